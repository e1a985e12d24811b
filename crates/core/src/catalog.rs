//! GPU and model profiles: built-in TOML files under `models/` (embedded in the binary) or a
//! user's file with the same fields. Derived quantities the engines use: KV bytes per token,
//! weight bytes, and the KV capacity SGLang and LightLLM compute from memory settings (vLLM's
//! budget is [`crate::vllm_memory`]).

use crate::error::{Error, Location, RecordError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::OnceLock;

const GPUS: &str = include_str!("../../../models/gpus.toml");
const MODELS: &str = include_str!("../../../models/models.toml");
const NETWORKS: &str = include_str!("../../../models/networks.toml");

/// A GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Short names the entry also answers to on `--gpu` (never echoed): `h100` is the SXM5 board,
    /// the H100 of NVIDIA's HGX and DGX systems.
    #[serde(default, skip_serializing)]
    pub aliases: Vec<String>,
    pub memory_gb: f64,
    pub mem_bw_gbps: f64,
    pub bf16_tflops: f64,
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 (NVFP4) tensor TFLOPS, where the datasheet states it. Recorded only: no
    /// [`Dtype`] is 4-bit, so the step-time model prices no FP4 GEMM yet.
    #[serde(default)]
    pub fp4_tflops: Option<f64>,
    /// NVLink, bidirectional GB/s; `None` = PCIe only.
    #[serde(default)]
    pub nvlink_gbps: Option<f64>,
    pub pcie_gbps: f64,
    /// Device memory as CUDA reports it (`torch.cuda.mem_get_info` total), GiB, where known: a
    /// little below the datasheet's. vLLM sizes its KV budget from this total.
    #[serde(default)]
    pub cuda_total_gib: Option<f64>,
    /// Streaming multiprocessors (what `multi_processor_count` reports), where known: kernels
    /// that reserve SMs for communication leave the GEMMs the rest.
    #[serde(default)]
    pub sm_count: Option<u32>,
    /// The architecture family (`volta`, `ampere`, `ada`, `hopper`, `blackwell`), where stated:
    /// shares of peak measured on one GPU of a family stand as the prior of the others
    /// ([`crate::calibration::prior::device_prior`]).
    #[serde(default)]
    pub arch: Option<Arch>,
    /// GPUs of one NVLink domain (one "node" to the parallel layout), where not 8: an HGX or DGX
    /// board holds 8 (H100, H200, H20, B200, B300), a GB200/GB300 NVL72 rack 72. A layout of
    /// more GPUs than `--nnodes` such domains hold is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u64>,
}

/// GPUs per node unless the catalog says otherwise: an HGX/DGX board's 8.
pub const DEFAULT_GPUS_PER_NODE: u64 = 8;

/// A GPU's architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Volta,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
}

impl Arch {
    /// The family's name as NVIDIA writes it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Volta => "Volta",
            Arch::Ampere => "Ampere",
            Arch::Ada => "Ada Lovelace",
            Arch::Hopper => "Hopper",
            Arch::Blackwell => "Blackwell",
        }
    }
}

impl Gpu {
    /// vLLM's device class: "large" = memory ≥ 70 GiB and not an A100 (ENGINE_SPEC §2.2).
    pub fn vllm_large(&self) -> bool {
        self.memory_gb >= 70.0 && !self.description.to_lowercase().contains("a100") && !self.name.contains("a100")
    }
    /// Device memory in bytes: datasheet "GB" of HBM are binary (an "80 GB" H100 has 80 GiB).
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gb * (1u64 << 30) as f64
    }
    /// Device memory as CUDA reports it, bytes (the datasheet size where not known).
    pub fn cuda_total_bytes(&self) -> u64 {
        (self.cuda_total_gib.unwrap_or(self.memory_gb) * (1u64 << 30) as f64).round() as u64
    }
    /// GPUs of one node (NVLink domain): the catalog's `gpus_per_node`, else 8.
    pub fn gpus_per_node(&self) -> u64 {
        self.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE)
    }
    /// One-direction bandwidth between GPUs of one node, bytes/s.
    pub fn link_bytes_per_s(&self) -> f64 {
        self.nvlink_gbps.unwrap_or(self.pcie_gbps) / 2.0 * 1e9
    }
}

/// The element type of weights or KV: 2 bytes (bf16, fp16) or 1 (fp8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    Bf16,
    Fp16,
    Fp8,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp8 => 1,
        }
    }
}

/// The element type of a linear layer's recurrent state (SGLang `--mamba-ssm-dtype`, vLLM
/// `--mamba-ssm-cache-dtype`); its convolution state stays in the model's 16-bit type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SsmDtype {
    #[default]
    Bfloat16,
    Float32,
}

impl SsmDtype {
    /// The name the engines' flags take.
    pub fn name(self) -> &'static str {
        match self {
            SsmDtype::Bfloat16 => "bfloat16",
            SsmDtype::Float32 => "float32",
        }
    }
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            SsmDtype::Bfloat16 => 2,
            SsmDtype::Float32 => 4,
        }
    }
}

/// A model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    #[serde(default)]
    pub hf_id: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// FFN width of the dense layers (of every layer in a dense model).
    pub intermediate: u64,
    pub vocab: u64,
    pub params_b: f64,
    /// Parameters used per token (MoE), as published; the cost model derives its own from the
    /// expert fields and checks it against this.
    #[serde(default)]
    pub active_params_b: Option<f64>,
    /// MoE: routed experts per MoE layer.
    #[serde(default)]
    pub experts: Option<u64>,
    /// MoE: routed experts each token goes to (top-k).
    #[serde(default)]
    pub experts_per_token: Option<u64>,
    /// MoE: experts every token goes to, each `moe_intermediate` wide (DeepSeek: 1).
    #[serde(default)]
    pub shared_experts: Option<u64>,
    /// MoE: FFN width of one expert (default: `intermediate`).
    #[serde(default)]
    pub moe_intermediate: Option<u64>,
    /// MoE: leading dense layers before the MoE layers (DeepSeek-V3: 3).
    #[serde(default)]
    pub first_dense_layers: Option<u64>,
    /// Layers that cache KV per token (default: all).
    #[serde(default)]
    pub kv_layers: Option<u64>,
    /// MLA: query low-rank width (DeepSeek-V3: 1536).
    #[serde(default)]
    pub q_lora_rank: Option<u64>,
    /// MLA: latent KV width (DeepSeek-V3: 512); with `qk_rope_head_dim`, what is cached.
    #[serde(default)]
    pub kv_lora_rank: Option<u64>,
    /// MLA: rotary part of a query/key head, cached beside the latent (DeepSeek-V3: 64).
    #[serde(default)]
    pub qk_rope_head_dim: Option<u64>,
    /// MLA: non-rotary part of a query/key head after expansion (DeepSeek-V3: 128).
    #[serde(default)]
    pub qk_nope_head_dim: Option<u64>,
    /// MLA: value head width after expansion (DeepSeek-V3: 128).
    #[serde(default)]
    pub v_head_dim: Option<u64>,
    /// The checkpoint's linear-layer weights (default bf16; DeepSeek-R1 fp8).
    #[serde(default)]
    pub weight_dtype: Dtype,
    /// Multi-token-prediction modules shipped with the model (DeepSeek-V3: 1), the MTP draft.
    #[serde(default)]
    pub mtp_layers: Option<u64>,
    /// Cross-attention layers that text-only prompts skip (Llama-3.2-Vision: 8).
    #[serde(default)]
    pub cross_attn_layers: Option<u64>,
    /// Vision-tower parameters, billions: loaded, never run for text-only prompts.
    #[serde(default)]
    pub vision_params_b: Option<f64>,
    pub max_context: u64,
    /// The attention kind of each layer, as a pattern repeated over the layers from layer 0
    /// (`config.json`'s `layer_types`; Gemma 3's `sliding_window_pattern` 6 is five `sliding`
    /// then one `full`). Empty: every layer full attention.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attention_pattern: Vec<AttentionKind>,
    /// The window of the `sliding` layers, tokens (`config.json` `sliding_window`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// The chunk of the `chunked` layers, tokens (`config.json` `attention_chunk_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk: Option<u64>,
    /// The shape of the `linear` layers' recurrent state (Qwen3-Next's Gated DeltaNet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_attention: Option<LinearAttention>,
}

/// A linear-attention layer (Gated DeltaNet, Mamba 2): no KV per token, one fixed state per
/// sequence — a short convolution window over the mixed query/key/value channels and a
/// `value_heads × value_head_dim × key_head_dim` recurrent matrix (SGLang `Mamba2StateShape`,
/// vLLM `MambaStateShapeCalculator.gated_delta_net_state_shape`; `config.json`'s `linear_*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearAttention {
    /// `linear_num_key_heads` (query and key heads; Mamba 2's `n_groups`).
    pub key_heads: u64,
    /// `linear_num_value_heads` (the recurrent state's heads).
    pub value_heads: u64,
    /// `linear_key_head_dim` (Mamba 2's `state_size`).
    pub key_head_dim: u64,
    /// `linear_value_head_dim` (Mamba 2's `head_dim`).
    pub value_head_dim: u64,
    /// `linear_conv_kernel_dim`: the convolution keeps its last `conv_kernel − 1` inputs.
    pub conv_kernel: u64,
}

impl LinearAttention {
    /// Channels of the convolution: queries and keys (`key_heads × key_head_dim` each) and values.
    pub fn conv_channels(&self) -> u64 {
        2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim
    }
    /// Elements of one layer's convolution state of one sequence over `tp` ranks together
    /// (`(conv_kernel − 1) × channels`; each rank holds `1/tp` of the channels).
    pub fn conv_elems(&self) -> u64 {
        (self.conv_kernel - 1) * self.conv_channels()
    }
    /// Elements of one layer's recurrent state of one sequence (all ranks together).
    pub fn ssm_elems(&self) -> u64 {
        self.value_heads * self.value_head_dim * self.key_head_dim
    }
    /// Bytes of one layer's state of one sequence on one of `tp` ranks, the convolution at
    /// `conv_bytes` and the recurrent state at `ssm_bytes` per element (heads split over ranks).
    pub fn state_bytes_per_rank(&self, tp: u64, conv_bytes: u64, ssm_bytes: u64) -> u64 {
        let tp = tp.max(1);
        self.conv_elems() / tp * conv_bytes + self.ssm_elems() / tp * ssm_bytes
    }
    /// Weights of one layer: the fused query/key/value/gate input projection, the beta/alpha
    /// projection (two per value head), the convolution and the output projection.
    pub fn params_per_layer(&self, hidden: u64) -> f64 {
        let v = (self.value_heads * self.value_head_dim) as f64;
        let h = hidden as f64;
        h * (self.conv_channels() as f64 + v)
            + h * 2.0 * self.value_heads as f64
            + (self.conv_channels() * self.conv_kernel) as f64
            + v * h
    }
    /// FLOPs of one token through one layer's recurrence (the delta rule's state update and
    /// read-out: about four multiply-adds per state element), apart from the projections.
    pub fn flops_per_token(&self) -> f64 {
        8.0 * self.ssm_elems() as f64
    }
}

/// What one layer's attention reads, and so which of its KV a prefix cache must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// Every earlier token.
    Full,
    /// The last `sliding_window` tokens (the token itself included).
    Sliding,
    /// The tokens of its own `attention_chunk`-aligned chunk (Llama 4's local layers).
    Chunked,
    /// None: a linear-attention layer keeps a fixed state per sequence ([`LinearAttention`]).
    Linear,
}

impl AttentionKind {
    /// The name in `models.toml`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionKind::Full => "full",
            AttentionKind::Sliding => "sliding",
            AttentionKind::Chunked => "chunked",
            AttentionKind::Linear => "linear",
        }
    }
}

impl Model {
    /// Whether the model caches an MLA latent instead of per-head K and V.
    pub fn is_mla(&self) -> bool {
        self.kv_lora_rank.is_some()
    }
    /// Whether the model routes tokens over experts.
    pub fn is_moe(&self) -> bool {
        self.experts.is_some_and(|e| e > 1) && self.experts_per_token.is_some()
    }
    /// KV elements cached per token per layer (all ranks together): the MLA latent
    /// (`kv_lora_rank + qk_rope_head_dim`) or `2 × kv_heads × head_dim`.
    pub fn kv_elems_per_layer(&self) -> u64 {
        match self.kv_lora_rank {
            Some(r) => r + self.qk_rope_head_dim.unwrap_or(0),
            None => 2 * self.kv_heads * self.head_dim,
        }
    }
    /// The attention kind of layer `i` (`attention_pattern` repeated; full without one).
    pub fn layer_kind(&self, i: u64) -> AttentionKind {
        match self.attention_pattern.len() as u64 {
            0 => AttentionKind::Full,
            n => self.attention_pattern[(i % n) as usize],
        }
    }
    /// Layers of each kind, full first: (full, sliding, chunked, linear).
    pub fn layers_by_kind(&self) -> [u64; 4] {
        let mut n = [0; 4];
        for i in 0..self.layers {
            n[self.layer_kind(i) as usize] += 1;
        }
        n
    }
    /// Whether some layer attends as `kind` does.
    pub fn uses(&self, kind: AttentionKind) -> bool {
        self.attention_pattern.contains(&kind)
    }
    /// Whether some layers attend to a window of the earlier tokens (sliding or chunked).
    pub fn is_hybrid(&self) -> bool {
        self.uses(AttentionKind::Sliding) || self.uses(AttentionKind::Chunked)
    }
    /// Linear-attention layers (no KV per token; a state per sequence).
    pub fn linear_layers(&self) -> u64 {
        self.layers_by_kind()[AttentionKind::Linear as usize]
    }
    /// Layers that cache KV per token: `kv_layers`, else every layer but the linear ones.
    pub fn kv_cache_layers(&self) -> u64 {
        self.kv_layers.unwrap_or(self.layers - self.linear_layers())
    }
    /// KV-cache bytes per token (all ranks together) at `dtype_bytes` per element.
    pub fn kv_bytes_per_token(&self, dtype_bytes: u64) -> u64 {
        self.kv_cache_layers() * self.kv_elems_per_layer() * dtype_bytes
    }
    /// Weight bytes in memory: linear weights at `dtype_bytes` (bf16 models) or at the
    /// checkpoint's own width (fp8 models, whose embedding and LM head stay 16-bit).
    pub fn weight_bytes(&self, dtype_bytes: u64) -> f64 {
        let all = self.params_b * 1e9;
        match self.weight_dtype {
            Dtype::Fp8 => {
                let tables = 2.0 * (self.vocab * self.hidden) as f64;
                (all - tables) + tables * 2.0
            }
            _ => all * dtype_bytes as f64,
        }
    }
    /// Bytes per linear weight (1 for fp8 checkpoints, else 2).
    pub fn weight_elem_bytes(&self) -> f64 {
        self.weight_dtype.bytes() as f64
    }
    /// Layers a text-only token runs through (cross-attention layers skipped).
    pub fn text_layers(&self) -> u64 {
        self.layers - self.cross_attn_layers.unwrap_or(0).min(self.layers)
    }
    /// MoE layers (0 for a dense model).
    pub fn moe_layers(&self) -> u64 {
        if self.is_moe() {
            self.text_layers().saturating_sub(self.first_dense_layers.unwrap_or(0))
        } else {
            0
        }
    }
    /// Kernels one forward pass over the text layers launches, as the per-kernel floor
    /// (`cost::Efficiency::kernel_floor_s`) counts them: per layer one kernel per weight matrix
    /// it multiplies by, plus attention; plus the LM head. GQA attention: QKV (fused) and O;
    /// MLA: six with attention (SGLang's and vLLM's DeepSeek layers fuse q_a with kv_a and
    /// split the absorbed kv_b into two batched GEMMs around attention: fused q_a/kv_a, q_b,
    /// k absorption, attention, v absorption, o; without a query LoRA, q instead of the first
    /// two: five). A dense FFN: gate/up (fused) and down; an MoE layer: the router, the routed
    /// experts' fused gate/up and down, and the shared experts' gate/up and down when there are
    /// any. A dense GQA layer thus counts 5 (the H200 Llama steps the floor was fitted on), a
    /// DeepSeek-V3 MoE layer 11: the DeepSeek-V3 projections and experts of the H200 GEMM
    /// timings (`profiling/h200/gemm_fp8_moe.csv`) each pay the same floor as Llama's.
    pub fn forward_kernels(&self) -> f64 {
        let attention = match (self.is_mla(), self.q_lora_rank) {
            (true, Some(_)) => 6,
            (true, None) => 5,
            (false, _) => 3,
        };
        let moe_ffn = 3 + if self.shared_experts.unwrap_or(0) > 0 { 2 } else { 0 };
        let (layers, moe, linear) = (self.text_layers(), self.moe_layers(), self.linear_layers());
        // A linear layer: its two input projections, the convolution, the recurrence and the
        // output projection (SGLang `Qwen3GatedDeltaNet.forward`).
        ((layers.saturating_sub(linear)) * attention + linear * 5 + (layers - moe) * 2 + moe * moe_ffn + 1) as f64
    }
    /// Parameters of one expert (gate, up and down projections).
    pub fn expert_params(&self) -> f64 {
        3.0 * (self.hidden * self.moe_intermediate.unwrap_or(self.intermediate)) as f64
    }
    /// Routed-expert parameters of the whole model.
    pub fn routed_params(&self) -> f64 {
        self.moe_layers() as f64 * self.experts.unwrap_or(0) as f64 * self.expert_params()
    }
    /// Attention parameters of one layer, averaged over the layers: a linear layer's
    /// projections ([`LinearAttention::params_per_layer`]) where it has them, else
    /// [`Model::softmax_attn_params`].
    pub fn attn_params_per_layer(&self) -> f64 {
        let linear = self.linear_layers();
        match self.linear_attention {
            Some(l) if linear > 0 => {
                let n = self.layers as f64;
                (linear as f64 * l.params_per_layer(self.hidden)
                    + (self.layers - linear) as f64 * self.softmax_attn_params())
                    / n
            }
            _ => self.softmax_attn_params(),
        }
    }
    /// Parameters of one softmax-attention layer: MLA's down/up projections, or Q, K, V and O.
    pub fn softmax_attn_params(&self) -> f64 {
        let (h, n) = (self.hidden as f64, self.heads as f64);
        match self.kv_lora_rank {
            Some(r) => {
                let (rope, nope) =
                    (self.qk_rope_head_dim.unwrap_or(0) as f64, self.qk_nope_head_dim.unwrap_or(0) as f64);
                let v = self.v_head_dim.unwrap_or(self.head_dim) as f64;
                let q = match self.q_lora_rank {
                    Some(ql) => h * ql as f64 + ql as f64 * n * (nope + rope),
                    None => h * n * (nope + rope),
                };
                q + h * (r as f64 + rope) + r as f64 * n * (nope + v) + n * v * h
            }
            None => 2.0 * h * n * self.head_dim as f64 + 2.0 * h * (self.kv_heads * self.head_dim) as f64,
        }
    }
    /// Parameters loaded but never run for a text-only prompt: the vision tower and the
    /// cross-attention layers (attention and FFN each).
    pub fn skipped_params(&self) -> f64 {
        let per_layer = self.attn_params_per_layer() + 3.0 * (self.hidden * self.intermediate) as f64;
        self.vision_params_b.unwrap_or(0.0) * 1e9 + self.cross_attn_layers.unwrap_or(0) as f64 * per_layer
    }
    /// Parameters every token runs through apart from the routed experts: attention, dense
    /// FFNs, shared experts, norms, the LM head (the embedding is a lookup and not counted).
    pub fn dense_matmul_params(&self) -> f64 {
        self.params_b * 1e9 - self.routed_params() - self.skipped_params() - (self.vocab * self.hidden) as f64
    }
    /// Parameters touched per token (dense: all but the embedding table, which is a lookup;
    /// MoE: the dense part plus top-k experts per MoE layer).
    pub fn active_matmul_params(&self) -> f64 {
        self.dense_matmul_params()
            + self.moe_layers() as f64 * self.experts_per_token.unwrap_or(0) as f64 * self.expert_params()
    }
    /// Bytes of the weights one step reads besides the routed experts (all ranks together):
    /// everything loaded except the routed experts and what text-only prompts skip.
    pub fn dense_weight_bytes(&self) -> f64 {
        self.weight_bytes(2) - (self.routed_params() + self.skipped_params()) * self.weight_elem_bytes()
    }
    /// Bytes of one routed expert.
    pub fn expert_bytes(&self) -> f64 {
        self.expert_params() * self.weight_elem_bytes()
    }
    /// Attention weight bytes of all layers (replicated per DP-attention rank).
    pub fn attn_weight_bytes(&self) -> f64 {
        self.text_layers() as f64 * self.attn_params_per_layer() * self.weight_elem_bytes()
    }
}

/// Links between nodes, for parallel groups that span nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// NICs per node.
    pub nics: u64,
    /// Gb/s of one NIC, one direction.
    pub gbps: f64,
    /// Start-up latency of one message, µs.
    pub latency_us: f64,
}

impl Network {
    /// One node's bandwidth off the node, one direction, bytes/s.
    pub fn node_bytes_per_s(&self) -> f64 {
        self.nics as f64 * self.gbps * 1e9 / 8.0
    }
}

#[derive(Deserialize)]
struct GpuFile {
    gpu: Vec<Gpu>,
}

#[derive(Deserialize)]
struct ModelFile {
    model: Vec<Model>,
}

#[derive(Deserialize)]
struct NetworkFile {
    network: Vec<Network>,
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| Error::invalid(what, crate::messages::toml_error(text, &e)))
}

/// The built-in GPUs, parsed once per process (a sweep resolves a run per grid point).
fn gpus() -> &'static [Gpu] {
    static PARSED: OnceLock<Vec<Gpu>> = OnceLock::new();
    PARSED.get_or_init(|| parse::<GpuFile>(GPUS, "models/gpus.toml").expect("built-in GPU profiles parse").gpu)
}

/// The built-in models, parsed once per process.
fn models() -> &'static [Model] {
    static PARSED: OnceLock<Vec<Model>> = OnceLock::new();
    PARSED
        .get_or_init(|| parse::<ModelFile>(MODELS, "models/models.toml").expect("built-in model profiles parse").model)
}

/// The built-in networks, parsed once per process.
fn networks() -> &'static [Network] {
    static PARSED: OnceLock<Vec<Network>> = OnceLock::new();
    PARSED.get_or_init(|| {
        parse::<NetworkFile>(NETWORKS, "models/networks.toml").expect("built-in network profiles parse").network
    })
}

/// The built-in GPUs.
pub fn builtin_gpus() -> Vec<Gpu> {
    gpus().to_vec()
}

/// The built-in models.
pub fn builtin_models() -> Vec<Model> {
    models().to_vec()
}

/// A catalog entry's table and its range checks.
trait Checked: Clone {
    const TABLE: &'static str;
    fn name(&self) -> &str;
    /// Other names the entry answers to (a model's Hugging Face id, a GPU's datasheet name and
    /// its short names).
    fn aliases(&self) -> Vec<&str>;
    fn check_in(&self, e: &Entry) -> Result<()>;
}

impl Checked for Gpu {
    const TABLE: &'static str = "gpu";
    fn name(&self) -> &str {
        &self.name
    }
    fn aliases(&self) -> Vec<&str> {
        std::iter::once(self.description.as_str()).chain(self.aliases.iter().map(String::as_str)).collect()
    }
    fn check_in(&self, e: &Entry) -> Result<()> {
        self.check(e)
    }
}

impl Checked for Model {
    const TABLE: &'static str = "model";
    fn name(&self) -> &str {
        &self.name
    }
    fn aliases(&self) -> Vec<&str> {
        vec![&self.hf_id]
    }
    fn check_in(&self, e: &Entry) -> Result<()> {
        self.check(e)
    }
}

impl Checked for Network {
    const TABLE: &'static str = "network";
    fn name(&self) -> &str {
        &self.name
    }
    fn aliases(&self) -> Vec<&str> {
        Vec::new()
    }
    fn check_in(&self, e: &Entry) -> Result<()> {
        self.check(e)
    }
}

/// Checks entry `index` of a file's `items`.
fn checked<T: Checked>(item: T, index: usize, path: &str, text: &str) -> Result<T> {
    item.check_in(&Entry { path, text, table: T::TABLE, index, name: item.name() })?;
    Ok(item)
}

/// The built-in entry named `name` (any case), checked as a user's file is.
fn pick<T: Checked>(items: &[T], name: &str, flag: &str, (path, text): (&str, &str)) -> Result<T> {
    let names: Vec<String> = items.iter().map(|x| x.name().to_string()).collect();
    // The name, in any case; else an alias (a Hugging Face id, a datasheet name, a short name:
    // `h100`); else the one entry the name begins (`l40` for `l40s`, but `a100` is `a100-80gb`
    // or `a100-40gb`).
    let prefixed: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].name().to_ascii_lowercase().starts_with(&name.to_ascii_lowercase()))
        .collect();
    let index = items
        .iter()
        .position(|x| x.name().eq_ignore_ascii_case(name))
        .or_else(|| {
            items.iter().position(|x| x.aliases().iter().any(|a| !a.is_empty() && a.eq_ignore_ascii_case(name)))
        })
        .or(match prefixed[..] {
            [one] if !name.is_empty() => Some(one),
            _ => None,
        })
        .ok_or_else(|| {
            let message = match prefixed.len() {
                n if n > 1 && !name.is_empty() => {
                    let which: Vec<&str> = prefixed.iter().map(|&i| items[i].name()).collect();
                    format!("`{name}` is ambiguous: {}; give one of them", which.join(" or "))
                }
                _ => format!("unknown name `{name}`; known: {}", names.join(", ")),
            };
            Error::invalid(flag, message)
        })?;
    checked(items[index].clone(), index, path, text)
}

/// The first entry of a user's profile file, through `list` (which picks the table), checked.
fn first_in_file<F: serde::de::DeserializeOwned, T: Checked>(
    p: &Path,
    flag: &str,
    list: impl FnOnce(F) -> Vec<T>,
) -> Result<T> {
    let text = std::fs::read_to_string(p).map_err(|source| Error::Io { path: p.to_path_buf(), error: source })?;
    let path = p.display().to_string();
    let first = list(parse::<F>(&text, &path)?)
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid(flag, format!("{}: no [[{}]] table", p.display(), T::TABLE)))?;
    checked(first, 0, &path, &text)
}

/// A GPU by name, or the first entry of a TOML file with `[[gpu]]` tables.
pub fn gpu(name: &str, file: Option<&Path>) -> Result<Gpu> {
    match file {
        Some(p) => first_in_file(p, "--gpu-file", |f: GpuFile| f.gpu),
        None => pick(gpus(), name, "--gpu", ("models/gpus.toml", GPUS)),
    }
}

/// A model by name, or the first entry of a TOML file with `[[model]]` tables.
pub fn model(name: &str, file: Option<&Path>) -> Result<Model> {
    match file {
        Some(p) => first_in_file(p, "--model-file", |f: ModelFile| f.model),
        None => pick(models(), name, "--model", ("models/models.toml", MODELS)),
    }
}

/// The built-in networks.
pub fn builtin_networks() -> Vec<Network> {
    networks().to_vec()
}

/// A network by name, or the first entry of a TOML file with `[[network]]` tables.
pub fn network(name: &str, file: Option<&Path>) -> Result<Network> {
    match file {
        Some(p) => first_in_file(p, "--network-file", |f: NetworkFile| f.network),
        None => pick(networks(), name, "--network", ("models/networks.toml", NETWORKS)),
    }
}

/// Checks every built-in GPU, model and network as a user's file is checked.
pub fn check_builtin() -> Result<()> {
    for (i, g) in builtin_gpus().into_iter().enumerate() {
        checked(g, i, "models/gpus.toml", GPUS)?;
    }
    for (i, m) in builtin_models().into_iter().enumerate() {
        checked(m, i, "models/models.toml", MODELS)?;
    }
    for (i, n) in builtin_networks().into_iter().enumerate() {
        checked(n, i, "models/networks.toml", NETWORKS)?;
    }
    Ok(())
}

/// Where a catalog entry sits in its file, for errors that name the file, line and key.
struct Entry<'a> {
    path: &'a str,
    text: &'a str,
    /// `gpu`, `model` or `network`.
    table: &'a str,
    /// Which `[[table]]` of the file (0-based).
    index: usize,
    name: &'a str,
}

impl Entry<'_> {
    /// The 1-based line of `key` in this entry's table (of its first part, for a key of an
    /// inline table such as `linear_attention.key_heads`), else of the table's header (a key
    /// left to its default), else 1.
    fn line(&self, key: &str) -> u64 {
        let key = key.split('.').next().unwrap_or(key);
        let header = format!("[[{}]]", self.table);
        let mut seen = 0;
        let mut start = None;
        for (i, line) in self.text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with("[[") || (t.starts_with('[') && start.is_some()) {
                if start.is_some() {
                    break;
                }
                if t == header {
                    if seen == self.index {
                        start = Some(i as u64 + 1);
                    }
                    seen += 1;
                }
                continue;
            }
            if start.is_some() {
                let rest = t.strip_prefix(key).map(str::trim_start);
                if rest.is_some_and(|r| r.starts_with('=')) {
                    return i as u64 + 1;
                }
            }
        }
        start.unwrap_or(1)
    }

    fn fail(&self, key: &str, message: String) -> Error {
        Error::Record {
            path: std::path::PathBuf::from(self.path),
            error: RecordError {
                location: Location::Line(self.line(key)),
                field: key.to_string(),
                message: format!("[[{}]] `{}`: {message}", self.table, self.name),
            },
        }
    }

    /// A real quantity: finite, above 0 (or at 0 where `zero` allows it), at most `max`.
    fn real(&self, key: &str, v: f64, zero: bool, max: f64, unit: &str) -> Result<()> {
        let low_ok = if zero { v >= 0.0 } else { v > 0.0 };
        if v.is_finite() && low_ok && v <= max {
            return Ok(());
        }
        let low = if zero { "0 or more" } else { "above 0" };
        Err(self.fail(
            key,
            format!("{v} is not a physical value: it must be a finite number of {unit}, {low} and at most {max}"),
        ))
    }

    fn real_opt(&self, key: &str, v: Option<f64>, zero: bool, max: f64, unit: &str) -> Result<()> {
        v.map_or(Ok(()), |v| self.real(key, v, zero, max, unit))
    }

    /// A count in `lo..=hi`.
    fn count(&self, key: &str, v: u64, lo: u64, hi: u64, what: &str) -> Result<()> {
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(self.fail(key, format!("{v} is not a physical value: it must be between {lo} and {hi} ({what})")))
    }

    fn count_opt(&self, key: &str, v: Option<u64>, lo: u64, hi: u64, what: &str) -> Result<()> {
        v.map_or(Ok(()), |v| self.count(key, v, lo, hi, what))
    }
}

/// The largest figures a catalog entry may state: far above any device or model built, low
/// enough that no product of them overflows.
const MAX_TFLOPS: f64 = 1e5;
const MAX_GBPS: f64 = 1e5;
const MAX_WIDTH: u64 = 1 << 22;
const MAX_COUNT: u64 = 1 << 16;

impl Gpu {
    /// Every figure finite and in a physical range (errors name the file, line and key).
    fn check(&self, e: &Entry) -> Result<()> {
        e.real("memory_gb", self.memory_gb, false, 1e4, "GiB")?;
        e.real("mem_bw_gbps", self.mem_bw_gbps, false, MAX_GBPS, "GB/s")?;
        e.real("bf16_tflops", self.bf16_tflops, false, MAX_TFLOPS, "TFLOPS")?;
        e.real_opt("fp8_tflops", self.fp8_tflops, false, MAX_TFLOPS, "TFLOPS")?;
        e.real_opt("fp4_tflops", self.fp4_tflops, false, MAX_TFLOPS, "TFLOPS")?;
        e.real_opt("nvlink_gbps", self.nvlink_gbps, false, MAX_GBPS, "GB/s")?;
        e.real("pcie_gbps", self.pcie_gbps, false, MAX_GBPS, "GB/s")?;
        e.real_opt("cuda_total_gib", self.cuda_total_gib, false, self.memory_gb, "GiB (no more than memory_gb)")?;
        e.count_opt("sm_count", self.sm_count.map(u64::from), 1, MAX_COUNT, "streaming multiprocessors")?;
        e.count_opt("gpus_per_node", self.gpus_per_node, 1, 1024, "GPUs of one NVLink domain")
    }
}

impl Model {
    /// Every figure finite and in a physical range, the KV heads no more than the heads, the
    /// parameter count no less than the embedding and experts the shape gives (errors name the
    /// file, line and key).
    fn check(&self, e: &Entry) -> Result<()> {
        e.count("hidden", self.hidden, 1, MAX_WIDTH, "the hidden width")?;
        e.count("layers", self.layers, 1, MAX_COUNT, "decoder layers")?;
        e.count("heads", self.heads, 1, MAX_COUNT, "attention heads")?;
        e.count("kv_heads", self.kv_heads, 1, self.heads, "KV heads, at most `heads`")?;
        e.count("head_dim", self.head_dim, 1, MAX_COUNT, "the width of one head")?;
        e.count("intermediate", self.intermediate, 1, MAX_WIDTH, "the FFN width")?;
        e.count("vocab", self.vocab, 1, 1 << 24, "tokens in the vocabulary")?;
        e.real("params_b", self.params_b, false, 1e5, "billions of parameters")?;
        e.real_opt("active_params_b", self.active_params_b, false, self.params_b, "billions, at most params_b")?;
        e.count_opt("experts", self.experts, 1, MAX_COUNT, "routed experts")?;
        e.count_opt(
            "experts_per_token",
            self.experts_per_token,
            1,
            self.experts.unwrap_or(MAX_COUNT),
            "at most `experts`",
        )?;
        e.count_opt("shared_experts", self.shared_experts, 0, 1024, "shared experts")?;
        e.count_opt("moe_intermediate", self.moe_intermediate, 1, MAX_WIDTH, "the width of one expert")?;
        e.count_opt("first_dense_layers", self.first_dense_layers, 0, self.layers, "at most `layers`")?;
        e.count_opt("kv_layers", self.kv_layers, 1, self.layers, "at most `layers`")?;
        e.count_opt("q_lora_rank", self.q_lora_rank, 1, MAX_WIDTH, "the query low-rank width")?;
        e.count_opt("kv_lora_rank", self.kv_lora_rank, 1, MAX_WIDTH, "the latent KV width")?;
        e.count_opt("qk_rope_head_dim", self.qk_rope_head_dim, 0, MAX_COUNT, "the rotary part of a head")?;
        e.count_opt("qk_nope_head_dim", self.qk_nope_head_dim, 0, MAX_COUNT, "the non-rotary part of a head")?;
        e.count_opt("v_head_dim", self.v_head_dim, 1, MAX_COUNT, "the width of a value head")?;
        e.count_opt("mtp_layers", self.mtp_layers, 0, 1024, "MTP modules")?;
        e.count_opt("cross_attn_layers", self.cross_attn_layers, 0, self.layers - 1, "fewer than `layers`")?;
        e.real_opt("vision_params_b", self.vision_params_b, true, self.params_b, "billions, at most params_b")?;
        e.count("max_context", self.max_context, 1, 1 << 40, "tokens")?;
        self.check_attention(e)?;
        let shaped = (self.params_b * 1e9 - self.dense_matmul_params()) / 1e9;
        if self.dense_matmul_params() <= 0.0 {
            return Err(e.fail(
                "params_b",
                format!(
                    "{} billion parameters are no more than the embedding, routed experts and skipped layers the other \
                     keys give ({shaped:.3} billion): nothing would be left for attention",
                    self.params_b
                ),
            ));
        }
        Ok(())
    }
}

impl Model {
    /// The attention pattern names only kinds whose extent is stated, each extent a physical
    /// number of tokens, and no extent without layers that use it.
    fn check_attention(&self, e: &Entry) -> Result<()> {
        e.count_opt("sliding_window", self.sliding_window, 1, self.max_context, "tokens, at most max_context")?;
        e.count_opt("attention_chunk", self.attention_chunk, 1, self.max_context, "tokens, at most max_context")?;
        if self.attention_pattern.len() as u64 > self.layers {
            return Err(e.fail(
                "attention_pattern",
                format!(
                    "{} kinds for {} layers: the pattern is longer than the model",
                    self.attention_pattern.len(),
                    self.layers
                ),
            ));
        }
        for (kind, extent, key) in [
            (AttentionKind::Sliding, self.sliding_window, "sliding_window"),
            (AttentionKind::Chunked, self.attention_chunk, "attention_chunk"),
        ] {
            let used = self.uses(kind);
            if used && extent.is_none() {
                return Err(e.fail(
                    "attention_pattern",
                    format!("`{}` layers need `{key}` (how many tokens they attend to)", kind.name()),
                ));
            }
            if !used && extent.is_some() {
                return Err(e.fail(key, format!("no `{}` layer in attention_pattern uses it", kind.name())));
            }
        }
        if self.uses(AttentionKind::Sliding) && self.uses(AttentionKind::Chunked) {
            return Err(e.fail(
                "attention_pattern",
                "sliding-window and chunked layers in one model are not modelled (no released model mixes them)"
                    .to_string(),
            ));
        }
        if self.is_hybrid() && self.is_mla() {
            return Err(e.fail("attention_pattern", "windowed layers with an MLA latent are not modelled".to_string()));
        }
        match (self.uses(AttentionKind::Linear), self.linear_attention) {
            (true, None) => {
                return Err(e.fail(
                    "attention_pattern",
                    "`linear` layers need `linear_attention` (the shape of their state)".to_string(),
                ))
            }
            (false, Some(_)) => {
                return Err(e.fail("linear_attention", "no `linear` layer in attention_pattern uses it".to_string()))
            }
            (true, Some(l)) => {
                if self.is_hybrid() || self.is_mla() {
                    return Err(e.fail(
                        "attention_pattern",
                        "linear layers beside windowed layers or an MLA latent are not modelled".to_string(),
                    ));
                }
                if self.linear_layers() == self.layers {
                    return Err(e.fail(
                        "attention_pattern",
                        "every layer linear: a model without a softmax-attention layer is not modelled".to_string(),
                    ));
                }
                e.count("linear_attention.key_heads", l.key_heads, 1, MAX_COUNT, "heads")?;
                e.count("linear_attention.value_heads", l.value_heads, 1, MAX_COUNT, "heads")?;
                e.count("linear_attention.key_head_dim", l.key_head_dim, 1, MAX_COUNT, "the width of a key head")?;
                e.count(
                    "linear_attention.value_head_dim",
                    l.value_head_dim,
                    1,
                    MAX_COUNT,
                    "the width of a value head",
                )?;
                e.count("linear_attention.conv_kernel", l.conv_kernel, 2, 64, "taps of the short convolution")?;
                if l.value_heads % l.key_heads != 0 {
                    return Err(e.fail(
                        "linear_attention.value_heads",
                        format!("{} value heads do not share {} key heads evenly", l.value_heads, l.key_heads),
                    ));
                }
            }
            (false, None) => {}
        }
        Ok(())
    }
}

impl Network {
    /// Every figure finite and in a physical range (errors name the file, line and key).
    fn check(&self, e: &Entry) -> Result<()> {
        e.count("nics", self.nics, 1, 1024, "NICs per node")?;
        e.real("gbps", self.gbps, false, MAX_GBPS, "Gb/s")?;
        e.real("latency_us", self.latency_us, true, 1e6, "µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_load_and_derive() {
        let m = model("llama-3.1-8b", None).unwrap();
        assert_eq!(m.kv_bytes_per_token(2), 131_072);
        assert_eq!(model("llama-3.2-11b", None).unwrap().kv_bytes_per_token(2), 131_072);
        assert_eq!(model("qwen2.5-7b", None).unwrap().kv_bytes_per_token(2), 57_344);
        let h100 = gpu("h100-sxm", None).unwrap();
        assert!(h100.vllm_large());
        assert!(!gpu("a100-80gb", None).unwrap().vllm_large());
        assert!(!gpu("l40s", None).unwrap().vllm_large());
        // vLLM's total for an H100 (its log: 79.22 GiB); the H200's as measured.
        assert_eq!(h100.cuda_total_bytes(), 85_061_827_297);
        assert_eq!(gpu("h200", None).unwrap().cuda_total_bytes(), 150_109_880_320);
        assert_eq!(gpu("a10", None).unwrap().cuda_total_bytes(), 24 << 30);
    }

    #[test]
    fn profile_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("cachesim-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("gpu.toml");
        std::fs::write(
            &good,
            "[[gpu]]\nname = \"mine\"\nmemory_gb = 48\nmem_bw_gbps = 1000\nbf16_tflops = 200\npcie_gbps = 64\n",
        )
        .unwrap();
        assert_eq!(gpu("ignored", Some(&good)).unwrap().name, "mine");
        let empty = dir.join("empty.toml");
        std::fs::write(&empty, "gpu = []\n").unwrap();
        assert!(gpu("x", Some(&empty)).unwrap_err().to_string().contains("no [[gpu]] table"));
        let typo = dir.join("typo.toml");
        std::fs::write(&typo, "[[model]]\nname = \"m\"\nhiden = 1\n").unwrap();
        assert!(model("x", Some(&typo)).unwrap_err().to_string().contains("hiden"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The built-in catalog passes the checks a user's file gets.
    #[test]
    fn the_builtin_catalog_is_physical() {
        check_builtin().unwrap();
    }

    /// A user's file with a number that cannot be physical is refused, naming the file, the
    /// line and the key.
    #[test]
    fn unphysical_numbers_name_file_line_and_key() {
        let dir = std::env::temp_dir().join(format!("cachesim-physical-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gpu_text =
            "[[gpu]]\nname = \"mine\"\nmemory_gb = 48\nmem_bw_gbps = nan\nbf16_tflops = 200\npcie_gbps = 64\n";
        let f = dir.join("gpu.toml");
        std::fs::write(&f, gpu_text).unwrap();
        let e = gpu("x", Some(&f)).unwrap_err().to_string();
        assert!(
            e.contains("gpu.toml: line 4: field `mem_bw_gbps`: [[gpu]] `mine`: NaN is not a physical value"),
            "{e}"
        );
        let model_text = |key: &str, v: &str| {
            let base = [
                ("hidden", "4096"),
                ("layers", "32"),
                ("heads", "32"),
                ("kv_heads", "8"),
                ("head_dim", "128"),
                ("intermediate", "14336"),
                ("vocab", "128256"),
                ("params_b", "8.03"),
                ("max_context", "131072"),
            ];
            let mut t = String::from("[[model]]\nname = \"m\"\n");
            for (k, d) in base {
                t.push_str(&format!("{k} = {}\n", if k == key { v } else { d }));
            }
            t
        };
        let f = dir.join("model.toml");
        std::fs::write(&f, model_text("", "")).unwrap();
        assert_eq!(model("x", Some(&f)).unwrap().kv_bytes_per_token(2), 131_072);
        for (key, v, line) in [
            ("head_dim", "0", 7),
            ("heads", "0", 5),
            ("kv_heads", "64", 6),
            ("params_b", "-8", 10),
            ("params_b", "0.5", 10),
            ("layers", "0", 4),
            ("max_context", "0", 11),
        ] {
            std::fs::write(&f, model_text(key, v)).unwrap();
            let e = model("x", Some(&f)).unwrap_err().to_string();
            assert!(e.contains(&format!("model.toml: line {line}: field `{key}`")), "{key} = {v}: {e}");
        }
        let f = dir.join("net.toml");
        std::fs::write(&f, "[[network]]\nname = \"n\"\nnics = 0\ngbps = 400\nlatency_us = 5\n").unwrap();
        let e = network("x", Some(&f)).unwrap_err().to_string();
        assert!(e.contains("net.toml: line 3: field `nics`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = gpu("mi300x", None).unwrap_err().to_string();
        assert!(e.contains("--gpu") && e.contains("h100-sxm") && e.contains("v100"), "{e}");
        let e = model("gpt-5", None).unwrap_err().to_string();
        assert!(e.contains("llama-3.1-8b"), "{e}");
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;

    /// A name in any case, a Hugging Face id, datasheet name or short name, or the one name it
    /// begins resolves; a beginning of several names is refused with them.
    #[test]
    fn names_aliases_and_unique_prefixes_resolve() {
        assert_eq!(gpu("H200", None).unwrap().name, "h200");
        assert_eq!(gpu("H100-SXM5-80GB", None).unwrap().name, "h100-sxm");
        assert_eq!(gpu("l40", None).unwrap().name, "l40s");
        assert_eq!(model("meta-llama/Llama-3.1-8B-Instruct", None).unwrap().name, "llama-3.1-8b");
        assert_eq!(model("llama-3.1-8b", None).unwrap().name, "llama-3.1-8b", "exact beats prefix");
        assert_eq!(gpu("h100", None).unwrap().name, "h100-sxm", "a short name beats a prefix");
        assert_eq!(gpu("H100", None).unwrap().name, "h100-sxm");
        let e = gpu("a100", None).unwrap_err().to_string();
        assert!(e.contains("`a100` is ambiguous: a100-80gb or a100-40gb"), "{e}");
        let e = gpu("", None).unwrap_err().to_string();
        assert!(e.contains("unknown name ``"), "{e}");
        let e = model("gpt-5", None).unwrap_err().to_string();
        assert!(e.contains("unknown name `gpt-5`; known: llama-3.1-8b"), "{e}");
    }
}
