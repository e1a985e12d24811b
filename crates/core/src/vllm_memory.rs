//! vLLM's KV-cache memory budget, modelled term by term from the GPU and model profiles.
//!
//! vLLM measures what it may give the KV cache at start-up (`vllm/v1/worker/gpu_worker.py`,
//! `Worker.determine_available_memory`): `requested = ceil(total × gpu_memory_utilization)`
//! (`init_device`, total as `torch.cuda.mem_get_info` reports it), minus the non-KV memory
//! that `vllm/utils/mem_utils.py` `memory_profiling` finds — the weights
//! (`model_runner.model_memory_usage`), the torch peak increase of the profile run
//! (`GPUModelRunner.profile_run`: `_dummy_run` over `max_num_batched_tokens` tokens in
//! `min(max_num_batched_tokens, max_num_seqs)` sequences, then `_dummy_sampler_run` over those
//! sequences' logits) and the non-torch increase (cuBLAS and attention workspaces) — and, since
//! v0.21 (PR #38284), the CUDA-graph estimate of `GPUModelRunner.profile_cudagraph_memory`.
//! No GPU runs here, so each measured term is modelled ([`activation_peak_bytes`],
//! [`cudagraph_graphs`]) and each can be set by hand ([`MemoryOverrides`]) to reproduce a
//! logged `num_gpu_blocks`.

use crate::catalog::{Gpu, Model};
use crate::cost::parallel::Parallel;
use serde::Serialize;

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes per logit element alive at the sampler's peak (`vllm/v1/sample/ops/
/// topk_topp_sampler.py` `apply_top_k_top_p`, the native path that is the default unless
/// `VLLM_USE_FLASHINFER_SAMPLER=1`; the dummy run sets top-k and top-p): the bf16 logits (2),
/// their fp32 copy (4), the sorted values (4) and int64 indices (8), the top-p softmax (4),
/// two boolean masks (1 + 1) and the scattered result (4).
pub const SAMPLER_BYTES_PER_LOGIT: u64 = 28;

/// Device memory per captured CUDA graph: vLLM's profiler estimated 0.52 GiB for 51 piecewise
/// and 35 full graphs of Qwen3-8B (vLLM 0.21 start-up log quoted in LMCache issue #3430),
/// 6.5 MB a graph. A calibration from one log, not a law: the real cost depends on the model.
pub const CUDAGRAPH_BYTES_PER_GRAPH: f64 = 6.5e6;

/// Non-torch memory the profile run adds (workspaces allocated outside PyTorch's allocator):
/// 0.16 GiB in vLLM's own log for a TP-1 run on an H100 (PR #12126). NCCL and custom
/// all-reduce buffers are allocated before vLLM's baseline snapshot and are not counted.
pub const NON_TORCH_GIB: f64 = 0.16;

/// Terms set by hand instead of modelled (`--activation-peak-gib`, `--cudagraph-memory-gib`,
/// `--non-torch-memory-gib`, `--kv-cache-memory-bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryOverrides {
    /// Torch peak increase of the profile run, GiB per GPU.
    pub activation_peak_gib: Option<f64>,
    /// CUDA-graph estimate, GiB per GPU (0 = not charged, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`).
    pub cudagraph_memory_gib: Option<f64>,
    /// Non-torch increase, GiB per GPU.
    pub non_torch_memory_gib: Option<f64>,
    /// vLLM `--kv-cache-memory-bytes`: the KV budget itself, per GPU; profiling is skipped.
    pub kv_cache_memory_bytes: Option<u64>,
}

/// The shape of vLLM's profile run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfileRun {
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    /// Whether the bundle charges the CUDA-graph estimate (v0.21 and later).
    pub cudagraph_estimate: bool,
}

/// vLLM's memory budget per GPU, in bytes, as the config echo shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VllmMemory {
    /// Device memory as CUDA reports it.
    pub total_bytes: u64,
    pub gpu_memory_utilization: f64,
    /// `ceil(total × gpu_memory_utilization)`.
    pub requested_bytes: u64,
    /// Weights per GPU (its stage's layers, its TP shard; fp8 checkpoints at 1 byte).
    pub weights_bytes: u64,
    /// Peak activation of the profile run (torch peak increase).
    pub activation_peak_bytes: u64,
    /// CUDA graphs counted by the estimate (piecewise + full); 0 when not charged.
    pub cudagraphs: u32,
    pub cudagraph_bytes: u64,
    pub non_torch_bytes: u64,
    /// What the KV cache gets: `requested − weights − activation − graphs − non-torch`, or
    /// `--kv-cache-memory-bytes`.
    pub kv_cache_bytes: u64,
    /// Which terms were set by hand, in the order above.
    pub overridden: MemoryOverrides,
    /// KV bytes per token on one GPU (its stage's layers; MLA latent replicated).
    pub kv_bytes_per_token_per_rank: u64,
    /// LoRA's GPU slots, allocated with the weights (`--enable-lora`; 0 without).
    #[serde(skip_serializing_if = "is_zero")]
    pub lora_bytes: u64,
}

fn is_zero(b: &u64) -> bool {
    *b == 0
}

impl VllmMemory {
    /// The budget of one GPU of a TP group on one node (bf16 KV).
    pub fn new(gpu: &Gpu, model: &Model, tp: u64, utilization: f64, run: ProfileRun, o: MemoryOverrides) -> Self {
        let layout = Parallel::tp(tp);
        Self::laid_out(gpu, model, layout, layout.kv_bytes_per_token_per_rank(model, 2), utilization, run, o)
    }

    /// The budget of one GPU of any layout, one token slot of its KV pool taking
    /// `kv_bytes_per_token_per_rank` (every layer's KV, or under vLLM's hybrid manager one
    /// group's layers').
    pub fn laid_out(
        gpu: &Gpu,
        model: &Model,
        layout: Parallel,
        kv_bytes_per_token_per_rank: u64,
        utilization: f64,
        run: ProfileRun,
        o: MemoryOverrides,
    ) -> Self {
        let tp = layout.tp;
        let total = gpu.cuda_total_bytes();
        let requested = (total as f64 * utilization).ceil() as u64;
        let weights = layout.weight_bytes_per_rank(model).round() as u64;
        let gib = |g: f64| (g * GIB).round() as u64;
        let activation = o
            .activation_peak_gib
            .map_or_else(|| activation_peak_bytes(model, tp, run.max_num_batched_tokens, run.max_num_seqs), gib);
        let graphs =
            if run.cudagraph_estimate { cudagraph_graphs(run.max_num_seqs, run.max_num_batched_tokens) } else { 0 };
        let cudagraph = o.cudagraph_memory_gib.map_or((graphs as f64 * CUDAGRAPH_BYTES_PER_GRAPH) as u64, gib);
        let non_torch = gib(o.non_torch_memory_gib.unwrap_or(NON_TORCH_GIB));
        let kv = o.kv_cache_memory_bytes.unwrap_or_else(|| {
            requested
                .saturating_sub(weights)
                .saturating_sub(activation)
                .saturating_sub(cudagraph)
                .saturating_sub(non_torch)
        });
        Self {
            total_bytes: total,
            gpu_memory_utilization: utilization,
            requested_bytes: requested,
            weights_bytes: weights,
            activation_peak_bytes: activation,
            cudagraphs: if o.cudagraph_memory_gib.is_some() { 0 } else { graphs },
            cudagraph_bytes: cudagraph,
            non_torch_bytes: non_torch,
            kv_cache_bytes: kv,
            overridden: o,
            kv_bytes_per_token_per_rank,
            lora_bytes: 0,
        }
    }

    /// The budget with LoRA enabled: its GPU slots (`slot_bytes`) are loaded with the weights,
    /// and every CUDA graph is captured twice, with and without LoRA kernels
    /// (`cudagraph_specialize_lora`, on by default: `vllm/config/compilation.py`), both before
    /// the KV cache is sized. A KV budget set by hand stays as set.
    pub fn with_lora(self, slot_bytes: u64) -> Self {
        let estimated = self.overridden.cudagraph_memory_gib.is_none();
        let extra_graphs = if estimated { self.cudagraph_bytes } else { 0 };
        let kv = match self.overridden.kv_cache_memory_bytes {
            Some(set) => set,
            None => self.kv_cache_bytes.saturating_sub(slot_bytes + extra_graphs),
        };
        Self {
            lora_bytes: slot_bytes,
            cudagraphs: if estimated { self.cudagraphs * 2 } else { self.cudagraphs },
            cudagraph_bytes: self.cudagraph_bytes + extra_graphs,
            kv_cache_bytes: kv,
            ..self
        }
    }

    /// `num_gpu_blocks` as `vllm/v1/core/kv_cache_utils.py` `get_num_blocks` computes it:
    /// `available // page_size // num_layers`, the page being one layer's block on this rank.
    pub fn num_gpu_blocks(&self, block_size: u32) -> u64 {
        let per_block = self.kv_bytes_per_token_per_rank * block_size as u64;
        self.kv_cache_bytes / per_block.max(1)
    }

    /// One line for the config echo: the terms in GiB.
    pub fn echo(&self) -> String {
        let g = |b: u64| b as f64 / GIB;
        let mark = |set: bool| if set { " (set)" } else { "" };
        if self.overridden.kv_cache_memory_bytes.is_some() {
            return format!("kv_cache_memory {:.2} GiB (set; profiling skipped)", g(self.kv_cache_bytes));
        }
        format!(
            "{:.2} GiB × {} = {:.2} − weights {:.2}{} − activation {:.2}{}{} − non-torch {:.2}{} = KV {:.2} GiB",
            g(self.total_bytes),
            self.gpu_memory_utilization,
            g(self.requested_bytes),
            g(self.weights_bytes),
            if self.lora_bytes > 0 { format!(" − LoRA slots {:.2}", g(self.lora_bytes)) } else { String::new() },
            g(self.activation_peak_bytes),
            mark(self.overridden.activation_peak_gib.is_some()),
            match (self.cudagraphs, self.overridden.cudagraph_memory_gib) {
                (_, Some(_)) => format!(" − CUDA graphs {:.2} (set)", g(self.cudagraph_bytes)),
                (0, None) => String::new(),
                (n, None) => format!(" − CUDA graphs {:.2} ({n} graphs)", g(self.cudagraph_bytes)),
            },
            g(self.non_torch_bytes),
            mark(self.overridden.non_torch_memory_gib.is_some()),
            g(self.kv_cache_bytes),
        )
    }
}

/// KV bytes per token on one rank (bf16): KV heads split over TP but never below one head
/// (`ModelConfig.get_num_kv_heads`: `max(1, total // tp)`); an MLA latent is not split.
pub fn kv_bytes_per_token_per_rank(model: &Model, tp: u64) -> u64 {
    crate::cost::parallel::Parallel::tp(tp).kv_bytes_per_token_per_rank(model, 2)
}

/// The torch peak increase of vLLM's profile run, modelled from tensor lifetimes (bf16):
/// the forward over `T = max_num_batched_tokens` tokens peaks in the MLP with the residual,
/// the normed input and the MLP output (`3·hidden`) beside gate/up (`2·I/TP`) and its
/// activation (`I/TP`) — for MoE, per routed expert slot the fused-MoE caches `3·I/TP + hidden`
/// — and the sampler holds the hidden states (`T·hidden`) and [`SAMPLER_BYTES_PER_LOGIT`] per
/// logit of `R = min(T, max_num_seqs)` rows over the vocabulary. The larger of the two.
pub fn activation_peak_bytes(model: &Model, tp: u64, max_num_batched_tokens: u32, max_num_seqs: u32) -> u64 {
    let t = max_num_batched_tokens as u64;
    let rows = t.min(max_num_seqs as u64);
    let mlp = match model.experts_per_token {
        Some(k) => k * (3 * (model.moe_intermediate.unwrap_or(model.intermediate) / tp) + model.hidden),
        None => 3 * (model.intermediate / tp),
    };
    let forward = t * (3 * model.hidden + mlp) * 2;
    let sampler = t * model.hidden * 2 + rows * model.vocab * SAMPLER_BYTES_PER_LOGIT;
    forward.max(sampler)
}

/// vLLM's default CUDA-graph capture sizes (`vllm/config/vllm.py`): `[1, 2, 4]`, multiples of
/// 8 below 256, multiples of 16 from 256, up to `max_cudagraph_capture_size = min(2 ×
/// max_num_seqs, 512)` and no more than `max_num_batched_tokens`.
pub fn cudagraph_capture_sizes(max_num_seqs: u32, max_num_batched_tokens: u32) -> Vec<u32> {
    let max = (2 * max_num_seqs).min(512).min(max_num_batched_tokens);
    [1, 2, 4].into_iter().chain((8..256).step_by(8)).chain((256..=512).step_by(16)).filter(|&s| s <= max).collect()
}

/// Graphs the estimate counts under the default `FULL_AND_PIECEWISE` mode: a piecewise graph
/// per capture size and a full decode graph per size up to `max_num_seqs` (the start-up log
/// prints them: "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" at 256 sequences).
pub fn cudagraph_graphs(max_num_seqs: u32, max_num_batched_tokens: u32) -> u32 {
    let sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens);
    (sizes.len() + sizes.iter().filter(|&&s| s <= max_num_seqs).count()) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn capture_sizes_match_the_logged_counts() {
        // "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" at max_num_seqs 256.
        let sizes = cudagraph_capture_sizes(256, 8192);
        assert_eq!((sizes.len(), sizes.last()), (51, Some(&512)));
        assert_eq!(cudagraph_graphs(256, 8192), 86);
        // 16 sequences: sizes 1, 2, 4, 8, 16, 24, 32 and full graphs up to 16.
        assert_eq!(cudagraph_capture_sizes(16, 8192), vec![1, 2, 4, 8, 16, 24, 32]);
        assert_eq!(cudagraph_graphs(16, 8192), 12);
        assert_eq!(cudagraph_capture_sizes(1024, 20), vec![1, 2, 4, 8, 16]);
    }

    #[test]
    fn llama_8b_on_an_h100_by_hand() {
        let (gpu, model) = (catalog::gpu("h100-sxm", None).unwrap(), catalog::model("llama-3.1-8b", None).unwrap());
        let run = ProfileRun { max_num_batched_tokens: 8192, max_num_seqs: 1024, cudagraph_estimate: true };
        let m = VllmMemory::new(&gpu, &model, 1, 0.92, run, MemoryOverrides::default());
        // total 79.22 GiB = 85,061,827,297 B; × 0.92 = 78,256,881,113.24 → ceil.
        assert_eq!((m.total_bytes, m.requested_bytes), (85_061_827_297, 78_256_881_114));
        assert_eq!(m.weights_bytes, 16_060_000_000);
        // forward 8192 × (3·4096 + 3·14336) × 2 = 905,969,664; sampler 8192 × 4096 × 2 +
        // 1024 × 128,256 × 28 = 3,744,464,896 (the larger).
        assert_eq!(activation_peak_bytes(&model, 1, 8192, 1024), 3_744_464_896);
        assert_eq!(activation_peak_bytes(&model, 1, 8192, 256), 986_447_872);
        assert_eq!(m.activation_peak_bytes, 3_744_464_896);
        // 51 piecewise + 51 full graphs × 6.5 MB.
        assert_eq!((m.cudagraphs, m.cudagraph_bytes), (102, 663_000_000));
        assert_eq!(m.non_torch_bytes, 171_798_692);
        // 78,256,881,114 − 16,060,000,000 − 3,744,464,896 − 663,000,000 − 171,798,692.
        assert_eq!(m.kv_cache_bytes, 57_617_617_526);
        // ÷ (16 tokens × 131,072 B) = 27,474.6 → 27,474 blocks.
        assert_eq!(m.num_gpu_blocks(16), 27_474);
    }

    #[test]
    fn overrides_replace_their_term_only() {
        let (gpu, model) = (catalog::gpu("h100-sxm", None).unwrap(), catalog::model("llama-3.1-8b", None).unwrap());
        let run = ProfileRun { max_num_batched_tokens: 8192, max_num_seqs: 1024, cudagraph_estimate: true };
        let o =
            MemoryOverrides { activation_peak_gib: Some(1.0), cudagraph_memory_gib: Some(0.0), ..Default::default() };
        let m = VllmMemory::new(&gpu, &model, 1, 0.9, run, o);
        assert_eq!((m.activation_peak_bytes, m.cudagraph_bytes, m.cudagraphs), (1 << 30, 0, 0));
        let want = (85_061_827_297f64 * 0.9).ceil() as u64 - 16_060_000_000 - (1 << 30) - 171_798_692;
        assert_eq!(m.kv_cache_bytes, want);
        assert!(m.echo().contains("activation 1.00 (set)"), "{}", m.echo());
        let set = MemoryOverrides { kv_cache_memory_bytes: Some(1 << 34), ..Default::default() };
        let m = VllmMemory::new(&gpu, &model, 1, 0.9, run, set);
        assert_eq!(m.kv_cache_bytes, 1 << 34);
        assert_eq!(m.num_gpu_blocks(16), (1 << 34) / (16 * 131_072));
        // Without the estimate (vLLM before 0.21) no graph is charged.
        let old =
            VllmMemory::new(&gpu, &model, 1, 0.9, ProfileRun { cudagraph_estimate: false, ..run }, Default::default());
        assert_eq!((old.cudagraphs, old.cudagraph_bytes), (0, 0));
    }

    #[test]
    fn kv_heads_split_over_tp_but_not_below_one() {
        let model = catalog::model("llama-3.1-70b", None).unwrap();
        assert_eq!(kv_bytes_per_token_per_rank(&model, 1), 327_680);
        assert_eq!(kv_bytes_per_token_per_rank(&model, 8), 40_960);
        // 8 KV heads over 16 ranks: each rank keeps one head.
        assert_eq!(kv_bytes_per_token_per_rank(&model, 16), 40_960);
        // Mixtral: 2 of 8 experts per token, I = 14,336, at TP 2:
        // forward 8192 × (3·4096 + 2 × (3·7168 + 4096)) × 2 = 1,040,187,392;
        // sampler 8192 × 4096 × 2 + 256 × 32,000 × 28 = 296,484,864.
        let mixtral = catalog::model("mixtral-8x7b", None).unwrap();
        assert_eq!(activation_peak_bytes(&mixtral, 2, 8192, 256), 1_040_187_392);
    }
}
