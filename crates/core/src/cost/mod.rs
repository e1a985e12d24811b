//! Step time: how long one forward pass takes for a batch. [`BatchShape`] aggregates what the
//! scheduler put in a step (no per-request lists); [`Roofline`] prices it per op group — GEMMs
//! (max of FLOPs over peak and weights over bandwidth), prefill attention (grows with context),
//! decode attention (reads every running sequence's KV), tensor-parallel all-reduces — plus
//! per-step and per-sequence host overheads, scaled by the efficiency factors in
//! [`Efficiency`] that calibration will fit. A step is priced in two parts, device and host
//! ([`StepTime`]): an engine that overlaps scheduling with the forward pass (SGLang's overlap
//! schedule, vLLM's async scheduling) takes the larger, one that does not takes the sum.
//! [`Affine`] is a plain linear model for hand-computed tests; [`StepLaw`] is the same law's
//! device time as a fitted profile may state it, in place of the roofline, for a setup whose GPU
//! and model are unknown (`calibrate --fit --unknown-hardware`).

pub mod ep;
pub mod local;
pub mod lora;
pub mod moe;
pub mod parallel;
#[cfg(test)]
mod physics;
#[cfg(test)]
mod sanity;
pub mod spec;

use crate::catalog::{Dtype, Gpu, Model, Network, SsmDtype};
pub use local::LocalWindow;
use parallel::{Links, Parallel};
use serde::{Deserialize, Serialize};
use spec::SpecDecode;

/// What one step computes, in aggregate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BatchShape {
    /// Sequences in the step.
    pub seqs: u32,
    /// New tokens of prefill chunks (chunks of more than one token).
    pub prefill_tokens: u64,
    /// Σ over prefill chunks of new × (context + (new + 1) / 2): query-key pairs of attention.
    pub prefill_attn_pairs: f64,
    /// Σ context (already computed or cached) tokens under the prefill chunks.
    pub prefill_ctx_tokens: u64,
    /// Sequences computing one token.
    pub decode_seqs: u32,
    /// Σ context tokens of those sequences (KV read by decode attention).
    pub decode_ctx_tokens: u64,
    /// The model's windowed layers (sliding or chunked), whose attention the three `local_`
    /// sums count; `None` for a model whose every layer attends to every earlier token.
    #[serde(skip)]
    pub local: Option<LocalWindow>,
    /// `prefill_attn_pairs` as a windowed layer counts them ([`LocalWindow::pairs`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub local_prefill_attn_pairs: f64,
    /// `prefill_ctx_tokens` as a windowed layer reads them ([`LocalWindow::before`]).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub local_prefill_ctx_tokens: u64,
    /// `decode_ctx_tokens` as a windowed layer reads them.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub local_decode_ctx_tokens: u64,
    /// Distinct LoRA adapters the step's requests name (0: every request uses the base model,
    /// and no LoRA kernel runs; [`lora`]).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub lora_adapters: u32,
}

impl BatchShape {
    /// An empty batch of a model whose windowed layers attend to `local` ([`CostModel::local_window`]).
    pub fn within(local: Option<LocalWindow>) -> Self {
        Self { local, ..Self::default() }
    }

    /// Empties the batch, keeping its window.
    pub fn clear(&mut self) {
        *self = Self::within(self.local);
    }

    /// Adds a sequence computing `new` tokens after `context` already computed ones.
    #[inline]
    pub fn add(&mut self, context: u64, new: u64) {
        self.seqs += 1;
        if new == 1 {
            self.decode_seqs += 1;
            self.decode_ctx_tokens += context;
        } else {
            self.prefill_tokens += new;
            self.prefill_ctx_tokens += context;
            self.prefill_attn_pairs += causal_pairs(context, new);
        }
        if let Some(w) = self.local {
            if new == 1 {
                self.local_decode_ctx_tokens += w.before(context);
            } else {
                self.local_prefill_ctx_tokens += w.before(context);
                self.local_prefill_attn_pairs += w.pairs(context, new) as f64;
            }
        }
    }

    /// Every decoding sequence one token further (the next step of a decode-only batch, or of a
    /// multi-step batch): `contexts` are the decodes' contexts in the step now formed, needed
    /// only with windowed layers, whose reads stop growing at the window.
    #[inline]
    pub fn advance_decodes(&mut self, contexts: impl Iterator<Item = u64>) {
        self.decode_ctx_tokens += self.decode_seqs as u64;
        if let Some(w) = self.local {
            self.local_decode_ctx_tokens = contexts.map(|c| w.before(c)).sum();
        }
    }

    /// What the step's attention reads over all layers: each windowed sum weighted by the
    /// windowed layers' `share` of them, the plain sum by the rest.
    fn attended(&self, share: f64) -> Attended {
        let (pairs, pctx, dctx) =
            (self.prefill_attn_pairs, self.prefill_ctx_tokens as f64, self.decode_ctx_tokens as f64);
        if self.local.is_none() {
            return Attended { prefill_pairs: pairs, prefill_ctx: pctx, decode_ctx: dctx };
        }
        let mix = |full: f64, local: f64| (1.0 - share) * full + share * local;
        Attended {
            prefill_pairs: mix(pairs, self.local_prefill_attn_pairs),
            prefill_ctx: mix(pctx, self.local_prefill_ctx_tokens as f64),
            decode_ctx: mix(dctx, self.local_decode_ctx_tokens as f64),
        }
    }
    /// Tokens computed in the step.
    pub fn tokens(&self) -> u64 {
        self.prefill_tokens + self.decode_seqs as u64
    }
}

/// A step's price in two parts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTime {
    /// The forward pass on the GPUs.
    pub device_s: f64,
    /// Scheduling, input preparation, launch and sampling on the host.
    pub host_s: f64,
}

impl StepTime {
    /// Seconds the step occupies the engine: host and device in turn, or, when the engine
    /// overlaps them (the host prepares step k+1 while the device runs step k), the larger.
    pub fn total(self, overlap: bool) -> f64 {
        if overlap {
            self.device_s.max(self.host_s)
        } else {
            self.device_s + self.host_s
        }
    }
}

/// Prices a step.
pub trait CostModel: Send + Sync {
    /// Device and host seconds of the step.
    fn step_parts(&self, batch: &BatchShape) -> StepTime;

    /// Seconds the step takes, host and device overlapped or not.
    fn step_time(&self, batch: &BatchShape, overlap: bool) -> f64 {
        self.step_parts(batch).total(overlap)
    }

    /// Expected tokens a decoding sequence gains per step (speculative decoding: the accepted
    /// drafts and the target's own token); 1 without speculation.
    fn tokens_per_step(&self) -> f64 {
        1.0
    }

    /// The window of the model's windowed layers, which the batches it prices must count
    /// ([`BatchShape::within`]); `None` (the default): attention over every earlier token.
    fn local_window(&self) -> Option<LocalWindow> {
        None
    }

    /// Batches the engine keeps in flight at once (vLLM v1 under PP: one per stage).
    fn in_flight_batches(&self) -> usize {
        1
    }

    /// Host seconds to launch one step's kernels eagerly, without a CUDA graph: a step run so
    /// takes the larger of its device time and this (the host launches asynchronously). 0: the
    /// model does not price eager steps.
    fn eager_step_launch_s(&self) -> f64 {
        0.0
    }

    /// Seconds the step spends in each pipeline stage, host work in the first; one stage
    /// (the whole step) without PP.
    fn pipeline_stages(&self, batch: &BatchShape, overlap: bool) -> Vec<f64> {
        vec![self.step_time(batch, overlap)]
    }

    /// A pricer of `batch`'s decode steps as its context grows, giving exactly
    /// [`CostModel::step_time`]; `None` (the default) where the model has none for this batch.
    fn decode_pricer(&self, _batch: &BatchShape, _overlap: bool) -> Option<DecodePricer> {
        None
    }
}

/// Device `per_prefill_token × prefill tokens + per_decode_seq × decode seqs + per_ctx_token ×
/// (prefill + decode context tokens)`, host `base`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Affine {
    pub base_s: f64,
    pub per_prefill_token_s: f64,
    pub per_decode_seq_s: f64,
    pub per_ctx_token_s: f64,
}

impl CostModel for Affine {
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        let law = StepLaw {
            step_s: 0.0,
            per_prefill_token_s: self.per_prefill_token_s,
            per_decode_seq_s: self.per_decode_seq_s,
            per_ctx_token_s: self.per_ctx_token_s,
        };
        StepTime { device_s: law.device_s(b), host_s: self.base_s }
    }
}

/// A step's device seconds as a sum measured directly, not derived from a GPU and a model:
/// `step_s + per_prefill_token_s × prefill tokens + per_decode_seq_s × decoding sequences +
/// per_ctx_token_s × (prefill + decode context tokens)` — the four terms the unknown-
/// hardware mode names. A sum, not the roofline's max of compute and weight reads: on the seed
/// sweep's unknown setup a step that prefills adds its prompt tokens' time on top of the decode
/// step (the report's P99 ITL, 297 ms against a median of 121 ms), which a max-form roofline
/// hides under the weight read until the batch is compute bound (docs/validation/method.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepLaw {
    pub step_s: f64,
    pub per_prefill_token_s: f64,
    pub per_decode_seq_s: f64,
    pub per_ctx_token_s: f64,
}

impl StepLaw {
    /// Device seconds of a step of shape `b` (0 for an empty step).
    pub fn device_s(&self, b: &BatchShape) -> f64 {
        self.device_reading(b, (b.prefill_ctx_tokens + b.decode_ctx_tokens) as f64)
    }

    /// [`StepLaw::device_s`] with the context tokens attention reads given (`ctx_tokens`: a
    /// windowed model's layer-weighted count).
    fn device_reading(&self, b: &BatchShape, ctx_tokens: f64) -> f64 {
        if b.seqs == 0 {
            return 0.0;
        }
        self.step_s
            + self.per_prefill_token_s * b.prefill_tokens as f64
            + self.per_decode_seq_s * b.decode_seqs as f64
            + self.per_ctx_token_s * ctx_tokens
    }

    /// The law in words, e.g. `109.1 ms per step + 146.40 µs per prefill token + …`.
    pub fn describe(&self) -> String {
        format!(
            "{:.1} ms per step + {:.2} µs per prefill token + {:.2} µs per decoding sequence + {:.3} µs per context token",
            self.step_s * 1e3,
            self.per_prefill_token_s * 1e6,
            self.per_decode_seq_s * 1e6,
            self.per_ctx_token_s * 1e6
        )
    }
}

/// Fractions of peak reached in practice, and fixed overheads. Defaults are engineering
/// estimates; `cachesim calibrate --fit` fits them to real runs (`calibration/profiles/`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Achieved share of peak tensor FLOPS in GEMMs.
    pub gemm_flops: f64,
    /// Achieved share of HBM bandwidth when streaming weights or KV.
    pub mem_bw: f64,
    /// Achieved share of peak FLOPS in attention kernels.
    pub attn_flops: f64,
    /// Achieved share of link bandwidth in all-reduces.
    pub comm_bw: f64,
    /// Latency of one all-reduce, seconds.
    pub comm_latency_s: f64,
    /// Scheduling, sampling and launch overhead per step, seconds.
    pub step_overhead_s: f64,
    /// Extra per sequence in the batch (input preparation, sampling), seconds.
    pub per_seq_overhead_s: f64,
    /// Fixed device seconds every kernel costs on top of its roofline time, counted for every
    /// kernel of a forward pass ([`Model::forward_kernels`]: 5 per dense GQA layer, and once for
    /// the LM head; 0 = the plain roofline).
    ///
    /// Additive, not a lower bound: the H200 bf16 GEMMs of the Llama linear layers
    /// (`profiling/h200/gemm.csv`, M ≤ 64) all take ≈ 22–38 µs *more* than their weights need
    /// at the measured 4.19 TB/s copy rate, from the 17 MB TP-8 `o` weight to the 235 MB
    /// `gate_up` one; a `max(floor, roofline)` would price the 235 MB weight at 56 µs, not the
    /// measured 78. The same constant is why a weight read's *effective* bandwidth falls with
    /// the matrix size (1.4 TB/s for the 50 MB QKV weight, 3.0 for the 235 MB gate/up one), so
    /// no separate size-dependent bandwidth factor is needed. Decode attention
    /// (`attn_decode.csv`) sits at ≈ 45–60 µs up to a few hundred MB of KV and then streams at
    /// ≈ 3.8 TB/s: between the additive and the max form; it is priced additively like the
    /// GEMMs. The layer's norm, rotary and activation kernels have no term of their own: the
    /// fitted floor absorbs them. Under TP every rank runs every layer's kernels, so the floor
    /// does not shrink with TP — why TP speeds small-batch decode up far less than 1/TP.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kernel_floor_s: f64,
    /// Host seconds plain PyTorch takes to launch one layer's kernels eagerly (no CUDA graph).
    /// The kernel-step cases' eager rows use it ([`crate::calibrate::kernels`]), and a serving
    /// run's decode batches that its engine runs without a graph
    /// ([`crate::engine::DecodeGraphs`]): such a step takes the larger of the device time and
    /// layers × this, as the host launches asynchronously. Other serving steps price their host
    /// time with `step_overhead_s` and never read it (0 = unused).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub eager_layer_launch_s: f64,
    /// Host seconds PyTorch takes, from an idle GPU, to dispatch one
    /// `scaled_dot_product_attention` call (it selects its backend on the host first): the
    /// single attention-kernel rows were timed between two CUDA events around the call, so
    /// each is this plus the kernel's device time. Those rows only; no step reads it (0 =
    /// unused). A matmul needs no such term: the single-GEMM rows and the CUDA-graph decode
    /// steps show the same per-kernel floor (a fit with one gives it 0.1 µs, its bound).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sdpa_dispatch_s: f64,
    /// A measured step law that replaces the roofline's device time ([`StepLaw`]); `None` (the
    /// default) = the roofline. A profile fitted with `--unknown-hardware` states one, and its
    /// host overheads are then 0: the law times the whole step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub law: Option<StepLaw>,
}

/// Peak GEMM FLOP/s of `gpu` for weights of `dtype`: its FP8 tensor-core peak for FP8 weights
/// (the BF16 one where the GPU states none), else its BF16 peak.
pub fn gemm_peak(gpu: &Gpu, dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Fp8 => gpu.fp8_tflops.unwrap_or(gpu.bf16_tflops) * 1e12,
        Dtype::Bf16 | Dtype::Fp16 => gpu.bf16_tflops * 1e12,
    }
}

/// Seconds of work bound by the slower of its FLOPs at `flops_per_s` and its bytes at
/// `bytes_per_s`: the roofline's rule for every GEMM and attention term.
fn bound_s(flops: f64, flops_per_s: f64, bytes: f64, bytes_per_s: f64) -> f64 {
    (flops / flops_per_s).max(bytes / bytes_per_s)
}

/// Device seconds of one `[m, k] × [k, n]` GEMM with `dtype` weights, timed alone on `gpu`: one
/// per-kernel floor ([`Efficiency::kernel_floor_s`]) plus the slower of its FLOPs at the GEMM
/// efficiency of the dtype's peak and its weight bytes at the bandwidth efficiency — the rule
/// [`Roofline`] prices a layer's linear layers by (activation bytes left out, as there).
pub fn gemm_s(gpu: &Gpu, eff: &Efficiency, [m, k, n]: [u64; 3], dtype: Dtype) -> f64 {
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let weight_bytes = k * n * dtype.bytes() as f64;
    let flops_per_s = gemm_peak(gpu, dtype) * eff.gemm_flops;
    eff.kernel_floor_s + bound_s(2.0 * m * k * n, flops_per_s, weight_bytes, gpu.mem_bw_gbps * 1e9 * eff.mem_bw)
}

/// Query-key pairs of causal attention for `new` tokens after `context` cached ones:
/// new × (context + (new + 1) / 2).
#[inline]
fn causal_pairs(context: u64, new: u64) -> f64 {
    new as f64 * (context as f64 + (new as f64 + 1.0) / 2.0)
}

/// One attention kernel timed alone on `gpu`: `heads` query heads over `kv_heads` key-value
/// heads of `head_dim`, for `seqs` sequences each computing `new` query tokens after `context`
/// cached ones (causal within the new tokens). One per-kernel floor plus the slower of its
/// FLOPs (4 × head_dim per head per query-key pair: QKᵀ and AV) at the attention efficiency
/// of the BF16 peak and the bytes of K and V it reads at the bandwidth efficiency — the rule
/// [`Roofline`] prices one layer's prefill and decode attention by.
pub fn attention_kernel_s(
    gpu: &Gpu,
    eff: &Efficiency,
    [heads, kv_heads, head_dim]: [u64; 3],
    seqs: u64,
    new: u64,
    context: u64,
) -> f64 {
    let (new_f, context_f) = (new as f64, context as f64);
    let pairs = seqs as f64 * causal_pairs(context, new);
    let flops = 4.0 * (heads * head_dim) as f64 * pairs;
    let kv_bytes = 2.0 * 2.0 * (kv_heads * head_dim) as f64 * seqs as f64 * (context_f + new_f);
    let (flops_per_s, bytes_per_s) = (gpu.bf16_tflops * 1e12 * eff.attn_flops, gpu.mem_bw_gbps * 1e9 * eff.mem_bw);
    eff.kernel_floor_s + bound_s(flops, flops_per_s, kv_bytes, bytes_per_s)
}

fn is_default<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

/// What a step's attention reads over all layers ([`BatchShape::attended`]).
#[derive(Debug, Clone, Copy)]
struct Attended {
    prefill_pairs: f64,
    prefill_ctx: f64,
    decode_ctx: f64,
}

impl Default for Efficiency {
    fn default() -> Self {
        Self {
            gemm_flops: 0.6,
            mem_bw: 0.8,
            attn_flops: 0.4,
            comm_bw: 0.7,
            comm_latency_s: 10e-6,
            step_overhead_s: 3e-3,
            per_seq_overhead_s: 15e-6,
            kernel_floor_s: 0.0,
            eager_layer_launch_s: 0.0,
            sdpa_dispatch_s: 0.0,
            law: None,
        }
    }
}

/// Everything beyond GPU, model and efficiency that shapes a step's cost: the layout over
/// GPUs and nodes, the KV element type, MoE routing skew and speculative decoding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Deployment {
    pub parallel: Parallel,
    /// Links between nodes (needed when `parallel.nnodes > 1`).
    pub network: Option<Network>,
    /// KV-cache element type (`--kv-cache-dtype`: auto = bf16, fp8).
    pub kv_dtype: Dtype,
    /// `--moe-skew` (0 = uniform routing; see [`moe::distinct_experts_skewed`]).
    pub moe_skew: f64,
    /// Speculative decoding; `None` = off.
    pub spec: Option<SpecDecode>,
    /// How MoE all-to-alls run under EP with DP attention: DeepEP and two-batch overlap.
    #[serde(skip_serializing_if = "ep::MoeA2a::is_plain")]
    pub a2a: ep::MoeA2a,
    /// The element type of linear layers' recurrent state (models with `linear` layers).
    #[serde(skip_serializing_if = "is_default")]
    pub ssm_dtype: SsmDtype,
}

impl Deployment {
    /// Plain TP on one node, bf16 KV, no speculation.
    pub fn tp(tp: u64) -> Self {
        Self { parallel: Parallel::tp(tp), ..Self::default() }
    }
}

/// What a model's linear layers cost one rank ([`Roofline`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct LinearLoad {
    /// FLOPs of the recurrences of one token over every linear layer.
    flops_per_token: f64,
    /// Bytes of one sequence's state over every linear layer.
    state_bytes_per_seq: f64,
}

/// The terms of a forward pass's compute that do not depend on the decode context, in the
/// order [`Roofline::compute_on_s`] adds them: the GEMMs plus the prefill attention, then (after
/// the decode attention) the linear layers, the kernel floors and the collectives.
#[derive(Debug, Clone, Copy)]
struct ComputeTerms {
    head: f64,
    linear: f64,
    floor: f64,
    comm: f64,
}

/// Device seconds of the decoding sequences' attention: their context's FLOPs or its KV reads.
fn decode_attn_s(flops_per_pair: f64, attn_flops: f64, kv_bytes_per_token: f64, bw: f64, l: &Load) -> f64 {
    bound_s(flops_per_pair * l.decode_ctx * l.decode_positions, attn_flops, l.decode_ctx * kv_bytes_per_token, bw)
}

/// The price of the decode steps of a coalesced stretch: the same sequences step after step,
/// only their context growing. Everything but the decode attention is computed once;
/// [`DecodePricer::step_time`] then does the roofline's own additions in its own order, so
/// it gives the very bits [`CostModel::step_time`] gives for the batch at that context.
#[derive(Debug, Clone, Copy)]
pub struct DecodePricer {
    terms: ComputeTerms,
    load: Load,
    lora_s: f64,
    host_s: f64,
    decode_flops_per_pair: f64,
    attn_flops: f64,
    kv_read_bytes_per_token: f64,
    bw: f64,
    overlap: bool,
}

impl DecodePricer {
    /// [`CostModel::step_time`] of the batch when its decodes read `decode_ctx_tokens` in all.
    pub fn step_time(&self, decode_ctx_tokens: u64) -> f64 {
        let l = Load { decode_ctx: decode_ctx_tokens as f64, ..self.load };
        let t = &self.terms;
        let decode_attn =
            decode_attn_s(self.decode_flops_per_pair, self.attn_flops, self.kv_read_bytes_per_token, self.bw, &l);
        let forward = t.head + decode_attn + t.linear + t.floor + t.comm;
        // As `Roofline::stages` and `step_parts`: the LoRA kernels, one stage, summed.
        let device_s: f64 = std::iter::once((forward + self.lora_s) / 1.0).sum();
        StepTime { device_s, host_s: self.host_s }.total(self.overlap)
    }
}

/// A step's work per rank, in f64 so batches can be split and scaled.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    seqs: f64,
    /// Tokens through the GEMMs (prefill tokens + decode positions).
    tokens: f64,
    prefill_pairs: f64,
    prefill_ctx: f64,
    /// Query positions per decoding sequence (1, or k + 1 when verifying drafts).
    decode_positions: f64,
    decode_ctx: f64,
}

impl Load {
    /// One of two equal micro-batches (SGLang two-batch overlap splits the batch's sequences,
    /// or a prefill's tokens, in halves: `two_batch_overlap.py` `compute_split_seq_index`).
    fn halved(&self) -> Self {
        Self {
            seqs: self.seqs / 2.0,
            tokens: self.tokens / 2.0,
            prefill_pairs: self.prefill_pairs / 2.0,
            prefill_ctx: self.prefill_ctx / 2.0,
            decode_positions: self.decode_positions,
            decode_ctx: self.decode_ctx / 2.0,
        }
    }
}

/// Roofline step time of a dense, MoE or MLA model on `tp` × `pp` GPUs: GEMMs (FLOPs over peak
/// vs weight bytes over bandwidth, the routed experts by the distinct experts a step touches),
/// attention (prefill over expanded heads, decode over the cached KV — MLA's latent), and
/// collectives (two per layer under TP, two-level across nodes; all-to-alls under EP with DP
/// attention; activations between pipeline stages).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    pub tp: u64,
    pub eff: Efficiency,
    pub deployment: Deployment,
    attn_peak: f64,
    gemm_peak: f64,
    bw: f64,
    links: Links,
    /// Per rank, all layers (as if on one stage).
    dense_weight_bytes: f64,
    dense_matmul_params: f64,
    /// Routed experts: (experts, top-k, MoE layers, params of one expert per rank, bytes of one
    /// expert per rank).
    moe: Option<(f64, f64, f64, f64, f64)>,
    prefill_flops_per_pair: f64,
    decode_flops_per_pair: f64,
    kv_read_bytes_per_token: f64,
    act_bytes_per_token: f64,
    layers: f64,
    /// Kernels of one forward pass ([`Model::forward_kernels`]), each paying the floor.
    kernels: f64,
    /// The share of SMs DeepGEMM keeps in a prefill under two-batch overlap with DeepEP
    /// ([`ep::deepgemm_sm_share`]; 1 otherwise).
    deepgemm_share: f64,
    head_params: f64,
    /// The windowed layers' window and their share of the layers ([`LocalWindow::of`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    local: Option<(LocalWindow, f64)>,
    /// Linear layers: their recurrence's FLOPs per token and the state bytes each sequence's
    /// step reads and writes back, on one rank ([`Model::linear_attention`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    linear: Option<LinearLoad>,
    /// DeepEP's all-to-all under EP with DP attention ([`ep`]); `None`: the plain all-to-all.
    #[serde(skip)]
    deepep: Option<ep::EpShape>,
    /// The LoRA kernels a step with an adapter runs and the floor each pays
    /// ([`Roofline::with_lora`]); `None`: LoRA off.
    #[serde(skip_serializing_if = "Option::is_none")]
    lora: Option<(lora::LoraKernels, f64)>,
}

impl Roofline {
    /// The model on `tp` GPUs of one node (bf16 KV, no speculation).
    pub fn new(gpu: &Gpu, model: &Model, tp: u64, eff: Efficiency) -> Self {
        Self::deployed(gpu, model, Deployment::tp(tp), eff)
    }

    /// The model under a full deployment.
    pub fn deployed(gpu: &Gpu, model: &Model, d: Deployment, eff: Efficiency) -> Self {
        let p = d.parallel;
        let (tp, attn_tp, dp) = (p.tp as f64, p.attn_tp() as f64, p.dp_attention.max(1) as f64);
        let layers = model.text_layers() as f64;
        // Softmax attention runs in every layer but the linear ones.
        let attn_layers = (model.text_layers() - model.linear_layers()) as f64;
        let heads = model.heads as f64;
        let (qk, v) = match model.kv_lora_rank {
            Some(_) => (
                (model.qk_nope_head_dim.unwrap_or(0) + model.qk_rope_head_dim.unwrap_or(0)) as f64,
                model.v_head_dim.unwrap_or(model.head_dim) as f64,
            ),
            None => (model.head_dim as f64, model.head_dim as f64),
        };
        // Prefill over expanded heads: QKᵀ (2·qk) and AV (2·v) FLOPs per head per layer per
        // query-key pair. MLA decode attends over the latent with the up-projections absorbed:
        // scores over kv_lora + rope, values over kv_lora.
        let prefill_flops_per_pair = 2.0 * attn_layers * heads * (qk + v) / tp;
        let decode_flops_per_pair = match model.kv_lora_rank {
            Some(r) => 2.0 * attn_layers * heads * ((r + model.qk_rope_head_dim.unwrap_or(0)) as f64 + r as f64) / tp,
            None => prefill_flops_per_pair,
        };
        let kv_bytes = d.kv_dtype.bytes();
        // Each rank reads its attention group's KV of its own sequences (1/dp of them).
        let full_depth = Parallel { pp: 1, ..p };
        let kv_read = full_depth.kv_bytes_per_token_per_rank(model, kv_bytes) as f64 / dp;
        let attn = model.attn_weight_bytes();
        let dense_weight_bytes = if p.attn_tp() == p.tp {
            model.dense_weight_bytes() / tp
        } else {
            attn / attn_tp + (model.dense_weight_bytes() - attn) / tp
        };
        let moe = model.is_moe().then(|| {
            (
                model.experts.unwrap_or(0) as f64,
                model.experts_per_token.unwrap_or(0) as f64,
                model.moe_layers() as f64,
                model.expert_params() / tp,
                model.expert_bytes() / tp,
            )
        });
        let fp8 = model.weight_dtype == Dtype::Fp8;
        let deepep = match (d.a2a.deepep, model.is_moe()) {
            (Some(_), true) if p.ep && p.dp_attention > 1 => Some(ep::EpShape {
                ranks: p.tp,
                gpus_per_node: p.gpus_per_node(),
                experts: model.experts.unwrap_or(0) as f64,
                k: model.experts_per_token.unwrap_or(0) as f64,
                hidden: model.hidden as f64,
                fp8_dispatch: fp8,
            }),
            _ => None,
        };
        let links = Links {
            intra_bytes_per_s: gpu.link_bytes_per_s(),
            intra_latency_s: eff.comm_latency_s,
            net: if p.nnodes > 1 { d.network.clone() } else { None },
            gpus_per_node: p.gpus_per_node(),
            efficiency: eff.comm_bw,
        };
        Self {
            tp: p.tp,
            eff,
            attn_peak: gpu.bf16_tflops * 1e12,
            gemm_peak: gemm_peak(gpu, model.weight_dtype),
            bw: gpu.mem_bw_gbps * 1e9,
            links,
            dense_weight_bytes,
            dense_matmul_params: model.dense_matmul_params() / tp,
            moe,
            prefill_flops_per_pair,
            decode_flops_per_pair,
            kv_read_bytes_per_token: kv_read,
            act_bytes_per_token: (model.hidden * 2) as f64,
            layers,
            kernels: model.forward_kernels(),
            deepgemm_share: if deepep.is_some() && d.a2a.two_batch_overlap { ep::deepgemm_sm_share(gpu) } else { 1.0 },
            head_params: (model.vocab * model.hidden) as f64 / tp,
            local: LocalWindow::of(model),
            linear: model.linear_attention.filter(|_| model.linear_layers() > 0).map(|l| {
                let n = model.linear_layers() as f64;
                LinearLoad {
                    flops_per_token: n * l.flops_per_token() / tp,
                    // Each rank keeps its heads' state of its own sequences (1/dp of them).
                    state_bytes_per_seq: n * l.state_bytes_per_rank(p.attn_tp(), 2, d.ssm_dtype.bytes()) as f64 / dp,
                }
            }),
            deepep,
            deployment: d,
            lora: None,
        }
    }

    /// The same model served with LoRA enabled: a step whose requests name adapters also runs
    /// their shrink and expand kernels ([`lora`]), each paying `floor_s`.
    pub fn with_lora(self, lora: Option<lora::LoraKernels>, floor_s: f64) -> Self {
        Self { lora: lora.map(|k| (k, floor_s)), ..self }
    }

    /// Device seconds of the step's LoRA kernels (0 without an adapter in it).
    fn lora_s(&self, b: &BatchShape) -> f64 {
        match &self.lora {
            Some((k, floor_s)) if b.lora_adapters > 0 => {
                let positions = self.deployment.spec.as_ref().map_or(1, SpecDecode::verify_positions) as f64;
                let tokens = b.prefill_tokens as f64 + b.decode_seqs as f64 * positions;
                let e = &self.eff;
                k.step_s(tokens, b.lora_adapters, self.attn_peak * e.gemm_flops, self.bw * e.mem_bw, *floor_s)
            }
            _ => 0.0,
        }
    }

    /// What `b`'s attention reads over all layers, its windowed layers' reads counted as they
    /// read.
    fn attended(&self, b: &BatchShape) -> Attended {
        debug_assert!(
            b.seqs == 0 || b.local == self.local.map(|l| l.0),
            "a batch counted with window {:?} priced for {:?}",
            b.local,
            self.local
        );
        b.attended(self.local.map_or(0.0, |l| l.1))
    }

    fn load(&self, b: &BatchShape, decode_positions: f64) -> Load {
        let a = self.attended(b);
        Load {
            seqs: b.seqs as f64,
            tokens: b.prefill_tokens as f64 + b.decode_seqs as f64 * decode_positions,
            prefill_pairs: a.prefill_pairs,
            prefill_ctx: a.prefill_ctx,
            decode_positions,
            decode_ctx: a.decode_ctx,
        }
    }

    /// Device seconds of one forward pass over all layers on one TP group (no PP split). Under
    /// DeepEP the MoE all-to-alls follow [`ep::EpShape::layer_s`], added to the compute or,
    /// under two-batch overlap, run behind the other micro-batch's ([`ep::two_batch_s`]).
    fn forward_s(&self, l: &Load) -> f64 {
        let Some(shape) = self.deepep.filter(|_| l.seqs > 0.0) else {
            return self.compute_and_comm_s(l);
        };
        let p = self.deployment.parallel;
        let moe_layers = self.moe.map_or(0.0, |m| m.2);
        let low_latency = self.deployment.a2a.deepep.unwrap_or_default().low_latency(l.prefill_pairs > 0.0);
        // Every rank dispatches its own share of the step's tokens: with DeepEP the sparse MLP's
        // input is scattered over the attention TP ranks (SGLang `layers/communicator.py`,
        // `LayerScatterModes._compute_mlp_mode`: `ScatterMode.SCATTERED` for a sparse layer).
        let a2a = |l: &Load| moe_layers * shape.layer_s(&self.links, l.tokens / p.tp as f64, low_latency);
        if self.deployment.a2a.two_batch_overlap {
            let half = l.halved();
            // A prefill under TBO runs DeepGEMM on the SMs DeepEP's normal kernels leave
            // (`ep::deepgemm_sm_share`); a decode on all of them.
            let share = if l.prefill_pairs > 0.0 { self.deepgemm_share } else { 1.0 };
            ep::two_batch_s(self.compute_on_s(&half, share), a2a(&half), moe_layers)
        } else {
            self.compute_and_comm_s(l) + a2a(l)
        }
    }

    /// [`Roofline::forward_s`] without DeepEP's all-to-alls: the compute and every other
    /// collective (the plain all-to-all included when DeepEP is off).
    fn compute_and_comm_s(&self, l: &Load) -> f64 {
        self.compute_on_s(l, 1.0)
    }

    /// [`Roofline::compute_and_comm_s`] with the GEMMs' FLOP rate scaled by `gemm_share`, the
    /// share of the GPU's SMs they run on.
    fn compute_on_s(&self, l: &Load, gemm_share: f64) -> f64 {
        if l.seqs <= 0.0 {
            return 0.0;
        }
        let t = self.compute_terms(l, gemm_share);
        let (attn_flops, bw) = (self.attn_peak * self.eff.attn_flops, self.bw * self.eff.mem_bw);
        let decode_attn = decode_attn_s(self.decode_flops_per_pair, attn_flops, self.kv_read_bytes_per_token, bw, l);
        t.head + decode_attn + t.linear + t.floor + t.comm
    }

    /// The terms of [`Roofline::compute_on_s`] other than the decode attention, which alone
    /// depends on the decoding sequences' context.
    fn compute_terms(&self, l: &Load, gemm_share: f64) -> ComputeTerms {
        let e = &self.eff;
        let flops = self.gemm_peak * e.gemm_flops * gemm_share;
        let bw = self.bw * e.mem_bw;
        let attn_flops = self.attn_peak * e.attn_flops;
        let mut gemm = bound_s(2.0 * self.dense_matmul_params * l.tokens, flops, self.dense_weight_bytes, bw);
        if let Some((experts, k, moe_layers, params, bytes)) = self.moe {
            let touched = moe::distinct_experts_skewed(experts, k, l.tokens, self.deployment.moe_skew);
            gemm += moe_layers * bound_s(2.0 * l.tokens * k * params, flops, touched * bytes, bw);
        }
        let kv = self.kv_read_bytes_per_token;
        // A linear layer reads each sequence's state and writes it back, whatever its context.
        let linear = self.linear.map_or(0.0, |x| {
            bound_s(x.flops_per_token * l.tokens, attn_flops, 2.0 * x.state_bytes_per_seq * l.seqs, bw)
        });
        let prefill_attn = bound_s(self.prefill_flops_per_pair * l.prefill_pairs, attn_flops, l.prefill_ctx * kv, bw);
        ComputeTerms { head: gemm + prefill_attn, linear, floor: self.floor_s(), comm: self.comm_s(l.tokens) }
    }

    /// Host seconds of a step of `b` (not empty): the step's overhead and each sequence's.
    fn host_s(&self, b: &BatchShape) -> f64 {
        let e = &self.eff;
        // With DP attention every group's scheduler prepares its own sequences in parallel.
        let dp = self.deployment.parallel.dp_attention.max(1) as f64;
        e.step_overhead_s + e.per_seq_overhead_s * b.seqs as f64 / dp
    }

    /// [`CostModel::decode_pricer`] where it can be exact: one forward pass (no pipeline split,
    /// no speculation, no DeepEP, no measured law, no windowed layers), a batch of decodes alone.
    fn pricer(&self, b: &BatchShape, overlap: bool) -> Option<DecodePricer> {
        let plain = self.eff.law.is_none()
            && self.deployment.spec.is_none()
            && self.deepep.is_none()
            && self.local.is_none()
            && self.deployment.parallel.pp.max(1) == 1;
        if !plain || b.seqs == 0 || b.prefill_tokens > 0 || b.decode_seqs != b.seqs {
            return None;
        }
        let l = self.load(b, 1.0);
        Some(DecodePricer {
            terms: self.compute_terms(&l, 1.0),
            load: l,
            lora_s: self.lora_s(b),
            host_s: self.host_s(b),
            decode_flops_per_pair: self.decode_flops_per_pair,
            attn_flops: self.attn_peak * self.eff.attn_flops,
            kv_read_bytes_per_token: self.kv_read_bytes_per_token,
            bw: self.bw * self.eff.mem_bw,
            overlap,
        })
    }

    /// The per-kernel floors of one forward pass ([`Model::forward_kernels`]), whatever the
    /// batch (0 with the plain roofline).
    fn floor_s(&self) -> f64 {
        self.kernels * self.eff.kernel_floor_s
    }

    /// Device seconds of one TP rank's compute for the batch: the forward pass without its
    /// collectives (no speculation, no PP split) — what a rank's kernels take timed alone
    /// (DeepEP's all-to-alls and two-batch overlap left out too).
    pub fn rank_compute_s(&self, b: &BatchShape) -> f64 {
        let l = self.load(b, 1.0);
        self.compute_and_comm_s(&l) - self.comm_s(l.tokens)
    }

    /// Host seconds plain PyTorch takes to launch one forward pass eagerly: layers ×
    /// [`Efficiency::eager_layer_launch_s`] (kernel-step cases only).
    pub fn eager_launch_s(&self) -> f64 {
        self.layers * self.eff.eager_layer_launch_s
    }

    /// Collectives of one forward pass over all layers, for `tokens` tokens in the step.
    fn comm_s(&self, tokens: f64) -> f64 {
        let p = self.deployment.parallel;
        if p.tp <= 1 {
            return 0.0;
        }
        let (g, n) = p.tp_span();
        let dp = p.dp_attention.max(1);
        let bytes = tokens * self.act_bytes_per_token;
        let attn_tp = p.attn_tp();
        // After attention: an all-reduce inside the attention group over its own tokens.
        let attn = if attn_tp > 1 {
            let (ga, na) = (attn_tp.min(g), attn_tp.div_ceil(g.max(1)));
            self.links.all_reduce_s(bytes / dp as f64, ga, na)
        } else {
            0.0
        };
        // After the FFN: an all-reduce over TP (with DP attention, the gather and scatter of
        // every group's tokens move the same bytes); MoE layers under EP with DP attention
        // dispatch and combine top-k copies of each rank's tokens instead.
        let ffn = self.links.all_reduce_s(bytes, g, n);
        let moe_layers = self.moe.map_or(0.0, |m| m.2);
        let moe_ffn = match self.moe {
            Some(_) if self.deepep.is_some() => 0.0,
            Some((_, k, ..)) if p.ep && dp > 1 => 2.0 * self.links.all_to_all_s(bytes / dp as f64 * k, p.tp, g),
            _ => ffn,
        };
        self.layers * attn + (self.layers - moe_layers) * ffn + moe_layers * moe_ffn
    }

    /// Device seconds of one MTP/EAGLE draft pass: one layer over the decoding sequences and
    /// the LM head.
    fn draft_pass_s(&self, b: &BatchShape) -> f64 {
        if b.decode_seqs == 0 {
            return 0.0;
        }
        let d = BatchShape {
            seqs: b.decode_seqs,
            decode_seqs: b.decode_seqs,
            decode_ctx_tokens: b.decode_ctx_tokens,
            local_decode_ctx_tokens: b.local_decode_ctx_tokens,
            ..BatchShape::within(b.local)
        };
        let one_layer = self.forward_s(&self.load(&d, 1.0)) / self.layers.max(1.0);
        let head = bound_s(
            2.0 * self.head_params * b.decode_seqs as f64,
            self.gemm_peak * self.eff.gemm_flops,
            self.head_params * 2.0,
            self.bw * self.eff.mem_bw,
        );
        one_layer + head
    }

    /// Device seconds of the step's verify pass and drafts, before the PP split; a measured
    /// [`StepLaw`] instead when the factors state one (configuration refuses it with
    /// speculative decoding, whose verify and draft passes it does not know).
    fn device_s(&self, b: &BatchShape) -> f64 {
        self.base_device_s(b) + self.lora_s(b)
    }

    /// [`Roofline::device_s`] without the LoRA kernels.
    fn base_device_s(&self, b: &BatchShape) -> f64 {
        if let Some(law) = &self.eff.law {
            let a = self.attended(b);
            return law.device_reading(b, a.prefill_ctx + a.decode_ctx);
        }
        match &self.deployment.spec {
            None => self.forward_s(&self.load(b, 1.0)),
            Some(s) => {
                let verify = self.forward_s(&self.load(b, s.verify_positions() as f64));
                verify + s.draft_passes() as f64 * self.draft_pass_s(b)
            }
        }
    }

    /// Seconds to hand the step's activations from one stage to the next.
    fn stage_send_s(&self, b: &BatchShape) -> f64 {
        let p = self.deployment.parallel;
        let positions = self.deployment.spec.as_ref().map_or(1, SpecDecode::verify_positions) as u64;
        let tokens = b.prefill_tokens + b.decode_seqs as u64 * positions;
        self.links.stage_send_s(tokens as f64 * self.act_bytes_per_token, p.tp, p.pp_crosses_nodes())
    }

    /// Device seconds the batch spends in each pipeline stage (layers split evenly; each
    /// stage but the last also sends its activations on). One stage without PP.
    pub fn stage_times(&self, b: &BatchShape) -> Vec<f64> {
        self.stages(b).collect()
    }

    /// [`Roofline::stage_times`] one by one (a step's price sums them without a vector).
    fn stages(&self, b: &BatchShape) -> impl Iterator<Item = f64> {
        let pp = self.deployment.parallel.pp.max(1);
        let (stage, send) = if b.seqs == 0 {
            (0.0, 0.0)
        } else {
            (self.device_s(b) / pp as f64, if pp > 1 { self.stage_send_s(b) } else { 0.0 })
        };
        (0..pp).map(move |s| if s + 1 < pp { stage + send } else { stage })
    }
}

impl CostModel for Roofline {
    /// One step's price: under PP its stages one after another (the sum of
    /// [`Roofline::stage_times`]), which is the step's latency. vLLM v1 keeps up to PP batches in
    /// flight: the event loop forms the next batch over the requests not in flight and plays it
    /// through [`CostModel::pipeline_stages`]. With speculative decoding the step is the verify
    /// over k + 1 positions per decoding sequence plus the draft passes; the event loop emits
    /// [`CostModel::tokens_per_step`] tokens for it.
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        if b.seqs == 0 {
            return StepTime::default();
        }
        StepTime { device_s: self.stages(b).sum(), host_s: self.host_s(b) }
    }

    fn tokens_per_step(&self) -> f64 {
        self.deployment.spec.as_ref().map_or(1.0, SpecDecode::tokens_per_step)
    }

    fn in_flight_batches(&self) -> usize {
        self.deployment.parallel.pp.max(1) as usize
    }

    fn eager_step_launch_s(&self) -> f64 {
        self.eager_launch_s()
    }

    fn local_window(&self) -> Option<LocalWindow> {
        self.local.map(|l| l.0)
    }

    fn decode_pricer(&self, b: &BatchShape, overlap: bool) -> Option<DecodePricer> {
        self.pricer(b, overlap)
    }

    fn pipeline_stages(&self, b: &BatchShape, overlap: bool) -> Vec<f64> {
        let parts = self.step_parts(b);
        let mut stages = self.stage_times(b);
        if let Some(first) = stages.first_mut() {
            *first = StepTime { device_s: *first, host_s: parts.host_s }.total(overlap);
        }
        stages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{gpu, model};

    fn h100_8b(tp: u64) -> Roofline {
        Roofline::new(&gpu("h100-sxm", None).unwrap(), &model("llama-3.1-8b", None).unwrap(), tp, Efficiency::default())
    }

    /// A stretch's pricer gives the very bits of `step_time` at every context, for dense and
    /// MoE/MLA models, one GPU and TP, with per-kernel floors and host time, overlapped or not;
    /// it declines batches and deployments it cannot price exactly.
    #[test]
    fn the_decode_pricer_is_exact() {
        let eff = Efficiency { kernel_floor_s: 9e-6, per_seq_overhead_s: 4e-5, ..Efficiency::default() };
        let (h100, h20) = (gpu("h100-sxm", None).unwrap(), gpu("h20", None).unwrap());
        let models = [
            Roofline::new(&h100, &model("llama-3.1-8b", None).unwrap(), 1, eff),
            Roofline::new(&h100, &model("llama-3.1-70b", None).unwrap(), 4, eff),
            Roofline::deployed(&h20, &model("deepseek-r1", None).unwrap(), Deployment::tp(8), eff),
        ];
        for r in &models {
            for (seqs, ctx0) in [(1u32, 0u64), (7, 5_000), (256, 1_234_567)] {
                let mut b = BatchShape::default();
                for i in 0..seqs {
                    b.add(ctx0 / seqs as u64 + i as u64, 1);
                }
                for overlap in [false, true] {
                    let p = r.decode_pricer(&b, overlap).expect("a plain decode batch");
                    let mut s = b;
                    for _ in 0..40 {
                        assert_eq!(p.step_time(s.decode_ctx_tokens).to_bits(), r.step_time(&s, overlap).to_bits());
                        s.advance_decodes(std::iter::empty());
                    }
                }
            }
        }
        let mut prefill = BatchShape::default();
        prefill.add(0, 512);
        assert!(models[0].decode_pricer(&prefill, false).is_none(), "a prefill is not a decode stretch");
        let pp = Deployment { parallel: Parallel { pp: 2, ..Parallel::tp(1) }, ..Deployment::default() };
        let staged = Roofline::deployed(&h100, &model("llama-3.1-8b", None).unwrap(), pp, eff);
        let mut one = BatchShape::default();
        one.add(100, 1);
        assert!(staged.decode_pricer(&one, false).is_none(), "pipeline stages are priced step by step");
    }

    #[test]
    fn decode_is_bandwidth_bound_and_prefill_compute_bound() {
        let r = h100_8b(1);
        let mut d = BatchShape::default();
        d.add(1000, 1);
        // One decode: 16 GB of weights at 0.8 × 3.35 TB/s ≈ 6 ms, plus 3 ms overhead.
        let t = r.step_time(&d, false);
        assert!((0.0085..0.0105).contains(&t), "{t}");
        // A big prefill is compute bound: 8192 tokens × 2 × ~7 G params / (0.6 × 989 TFLOPS) ≈ 0.2 s.
        let mut p = BatchShape::default();
        p.add(0, 8192);
        let t = r.step_time(&p, false);
        assert!((0.18..0.30).contains(&t), "{t}");
        // More context, more decode time; TP shards the work.
        let mut d2 = BatchShape::default();
        for _ in 0..64 {
            d2.add(8000, 1);
        }
        assert!(r.step_time(&d2, false) > r.step_time(&d, false));
        assert!(h100_8b(2).step_time(&p, false) < r.step_time(&p, false));
        assert_eq!(r.step_time(&BatchShape::default(), true), 0.0);
    }

    #[test]
    fn moe_profiles_match_the_published_active_parameters() {
        // Dense part + top-k experts per MoE layer + the embedding = the model cards' "active".
        for (name, active_b) in
            [("deepseek-r1", 37.0), ("mixtral-8x7b", 12.9), ("qwen3-235b-a22b", 22.0), ("qwen3-30b-a3b", 3.3)]
        {
            let m = model(name, None).unwrap();
            let derived = (m.active_matmul_params() + (m.vocab * m.hidden) as f64) / 1e9;
            assert!((derived / active_b - 1.0).abs() < 0.03, "{name}: {derived} vs {active_b}");
        }
        // DeepSeek-R1: 58 MoE layers × 256 experts × 3 × 7,168 × 2,048 = 653.9 B routed.
        let r1 = model("deepseek-r1", None).unwrap();
        assert_eq!(r1.moe_layers(), 58);
        assert!((r1.routed_params() - 58.0 * 256.0 * 3.0 * 7168.0 * 2048.0).abs() < 1.0);
        // FP8 checkpoint: 671 B weights at 1 byte, embedding and LM head at 2.
        assert!((r1.weight_bytes(2) - (671e9 + 2.0 * 129_280.0 * 7168.0)).abs() < 1.0);
    }

    #[test]
    fn moe_decode_reads_the_experts_it_touches() {
        // Qwen3-30B-A3B on one H100, one decoding token at context 0: the dense weights
        // (30.5 B − 48 × 128 × 3 × 2,048 × 768 routed, at 2 B) and 48 layers × 8 experts ×
        // 9,437,184 B, all at 0.8 × 3.35 TB/s; FLOPs are negligible.
        let m = model("qwen3-30b-a3b", None).unwrap();
        let r = Roofline::new(&gpu("h100-sxm", None).unwrap(), &m, 1, Efficiency::default());
        let routed = 48.0 * 128.0 * 3.0 * 2048.0 * 768.0;
        let dense = (30.5e9 - routed) * 2.0;
        let expert = 3.0 * 2048.0 * 768.0 * 2.0;
        let mut one = BatchShape::default();
        one.add(0, 1);
        let want = (dense + 48.0 * 8.0 * expert) / (3.35e12 * 0.8);
        assert!((r.step_parts(&one).device_s - want).abs() < 1e-12, "{}", r.step_parts(&one).device_s);
        // 4,096 tokens touch all 128 experts: bytes of the whole model, but the FLOPs now bound.
        let mut big = BatchShape::default();
        big.add(0, 4096);
        let flops_bound = 2.0 * 4096.0 * (m.dense_matmul_params() + 48.0 * 8.0 * expert / 2.0) / (989.4e12 * 0.6);
        let bytes_bound = (dense + routed * 2.0) / (3.35e12 * 0.8);
        let gemm =
            r.forward_s(&r.load(&big, 1.0)) - r.prefill_flops_per_pair * big.prefill_attn_pairs / (989.4e12 * 0.4);
        assert!(gemm >= bytes_bound.min(flops_bound) && gemm < 1.2 * (bytes_bound + flops_bound), "{gemm}");
        // Per token, a large batch is ~200× cheaper than one token alone.
        assert!(r.step_parts(&big).device_s / 4096.0 < r.step_parts(&one).device_s / 100.0);
    }

    #[test]
    fn mla_decode_reads_the_latent_and_dp_attention_splits_it() {
        let (h20, r1) = (gpu("h20", None).unwrap(), model("deepseek-r1", None).unwrap());
        let net = crate::catalog::network("cx7-8x400", None).unwrap();
        let tp16 = Deployment {
            parallel: Parallel { nnodes: 2, ..Parallel::tp(16) },
            network: Some(net.clone()),
            ..Deployment::default()
        };
        let r = Roofline::deployed(&h20, &r1, tp16.clone(), Efficiency::default());
        // Every TP rank reads the whole 576-element latent of every token: 70,272 B.
        assert_eq!(r.kv_read_bytes_per_token, 70_272.0);
        // Absorbed decode: 2 × 61 × 128 × (576 + 512) / 16 FLOPs per query-key pair per rank;
        // prefill over expanded heads: 2 × 61 × 128 × (192 + 128) / 16.
        assert_eq!(r.decode_flops_per_pair, 2.0 * 61.0 * 128.0 * 1088.0 / 16.0);
        assert_eq!(r.prefill_flops_per_pair, 2.0 * 61.0 * 128.0 * 320.0 / 16.0);
        // DP attention over 16 groups: each rank reads only its sequences' latents.
        let mut dp = tp16;
        dp.parallel.dp_attention = 16;
        dp.parallel.ep = true;
        let d = Roofline::deployed(&h20, &r1, dp, Efficiency::default());
        assert_eq!(d.kv_read_bytes_per_token, 70_272.0 / 16.0);
        // FP8 GEMMs on the H20 (296 TFLOPS), attention at bf16 (148).
        assert_eq!((d.gemm_peak, d.attn_peak), (296e12, 148e12));
    }

    /// The per-kernel floor by hand: one Llama-3.1-8B decode at context 0 on an H200 costs its
    /// weights at 0.8 × 4.8 TB/s plus (32 layers × 5 kernels + the LM head) × 20 µs = 3.22 ms;
    /// Llama-3.1-70B at TP 8 pays 401 floors per rank, as many as on one GPU, and the plain
    /// roofline (floor 0) none.
    #[test]
    fn kernel_floor_adds_per_layer_kernels() {
        let h200 = gpu("h200", None).unwrap();
        let m8 = model("llama-3.1-8b", None).unwrap();
        let eff = Efficiency { kernel_floor_s: 20e-6, ..Efficiency::default() };
        let mut one = BatchShape::default();
        one.add(0, 1);
        let weights = m8.dense_weight_bytes() / (4.8e12 * 0.8);
        let with = Roofline::new(&h200, &m8, 1, eff).step_parts(&one).device_s;
        assert!((with - (weights + 161.0 * 20e-6)).abs() < 1e-12, "{with}");
        let plain = Roofline::new(&h200, &m8, 1, Efficiency::default()).step_parts(&one).device_s;
        assert!((plain - weights).abs() < 1e-12, "{plain}");
        let m70 = model("llama-3.1-70b", None).unwrap();
        let tp8 = |e| Roofline::new(&h200, &m70, 8, e);
        let extra = tp8(eff).rank_compute_s(&one) - tp8(Efficiency::default()).rank_compute_s(&one);
        assert!((extra - 401.0 * 20e-6).abs() < 1e-12, "{extra}");
        // The TP step adds its collectives (2 per layer) to the rank's compute.
        assert!(tp8(eff).step_parts(&one).device_s > tp8(eff).rank_compute_s(&one) + 160.0 * 10e-6);
        // Eager launches: layers × the per-layer launch time.
        let eager = Efficiency { eager_layer_launch_s: 1e-3, ..Efficiency::default() };
        assert_eq!(tp8(eager).eager_launch_s(), 0.08);
        // A zero floor is not written out: old profiles and echoes stay as they were.
        let t = toml::to_string(&Efficiency::default()).unwrap();
        assert!(!t.contains("kernel_floor_s") && !t.contains("eager_layer_launch_s"), "{t}");
        let back: Efficiency = toml::from_str(&t).unwrap();
        assert_eq!(back, Efficiency::default());
        // DeepSeek-R1 (MLA with a query LoRA, 3 dense layers, 58 MoE layers with a shared
        // expert): 3 × (6 + 2) + 58 × (6 + 5) + the LM head = 663 floors.
        let r1 = model("deepseek-r1", None).unwrap();
        assert_eq!((m8.forward_kernels(), m70.forward_kernels(), r1.forward_kernels()), (161.0, 401.0, 663.0));
        let ep = |e| Roofline::new(&h200, &r1, 8, e).rank_compute_s(&one);
        assert!((ep(eff) - ep(Efficiency::default()) - 663.0 * 20e-6).abs() < 1e-12);
    }

    /// One GEMM by hand on an H200 (4.8 TB/s, 989.4 BF16 and 1978.9 FP8 TFLOP/s), floor 20 µs,
    /// the default 0.6 GEMM and 0.8 bandwidth efficiency: Llama-3.1-8B's gate/up
    /// (K 4096, N 28672) at M = 1 is bound by its weights (235 MB in BF16, half in FP8); at
    /// M = 8192 by its FLOPs, twice as fast in FP8.
    #[test]
    fn one_gemm_by_hand() {
        let h200 = gpu("h200", None).unwrap();
        let eff = Efficiency { kernel_floor_s: 20e-6, ..Efficiency::default() };
        let (k, n) = (4096.0, 28672.0);
        let small = |d| gemm_s(&h200, &eff, [1, 4096, 28672], d);
        assert!((small(Dtype::Bf16) - (20e-6 + k * n * 2.0 / (4.8e12 * 0.8))).abs() < 1e-15);
        assert!((small(Dtype::Fp8) - (20e-6 + k * n / (4.8e12 * 0.8))).abs() < 1e-15);
        let large = |d| gemm_s(&h200, &eff, [8192, 4096, 28672], d) - 20e-6;
        let flops = 2.0 * 8192.0 * k * n;
        assert!((large(Dtype::Bf16) - flops / (989.4e12 * 0.6)).abs() < 1e-12);
        assert!((large(Dtype::Fp8) - flops / (1978.9e12 * 0.6)).abs() < 1e-12);
        assert_eq!(
            gemm_peak(&gpu("v100", None).unwrap(), Dtype::Fp8),
            gemm_peak(&gpu("v100", None).unwrap(), Dtype::Bf16)
        );
    }

    /// One attention kernel by hand on an H200, floor 20 µs, attention 0.4 and bandwidth 0.8
    /// of peak (the defaults): a causal prefill of 8,192 tokens with 32 heads of 128 is bound by
    /// its 8192 × 8193 / 2 query-key pairs at 4 × 128 FLOPs per head each; a decode of 64
    /// sequences over 4,096 keys with 8 KV heads by the 64 × 4,096 × 8 × 128 keys and values
    /// it reads at 2 bytes each.
    #[test]
    fn one_attention_kernel_by_hand() {
        let h200 = gpu("h200", None).unwrap();
        let eff = Efficiency { kernel_floor_s: 20e-6, ..Efficiency::default() };
        let prefill = attention_kernel_s(&h200, &eff, [32, 8, 128], 1, 8192, 0);
        let flops = 4.0 * 32.0 * 128.0 * 8192.0 * 8193.0 / 2.0;
        assert!((prefill - (20e-6 + flops / (989.4e12 * 0.4))).abs() < 1e-12, "{prefill}");
        let decode = attention_kernel_s(&h200, &eff, [32, 8, 128], 64, 1, 4095);
        let bytes = 2.0 * 2.0 * 64.0 * 4096.0 * 8.0 * 128.0;
        assert!((decode - (20e-6 + bytes / (4.8e12 * 0.8))).abs() < 1e-12, "{decode}");
    }

    proptest::proptest! {
        /// One GEMM: never below its floor, never faster for more rows or columns, never
        /// slower in FP8 than in BF16.
        #[test]
        fn one_gemm_is_monotone(
            m in 1u64..20_000, k in 1u64..20_000, n in 1u64..60_000, dm in 0u64..5_000, dn in 0u64..5_000,
            floor in 0.0f64..1e-4, gemm in 0.05f64..1.0, bw in 0.05f64..1.0,
        ) {
            let h100 = gpu("h100-sxm", None).unwrap();
            let eff = Efficiency { kernel_floor_s: floor, gemm_flops: gemm, mem_bw: bw, ..Efficiency::default() };
            let t = |mkn, d| gemm_s(&h100, &eff, mkn, d);
            let base = t([m, k, n], Dtype::Bf16);
            proptest::prop_assert!(base >= floor);
            proptest::prop_assert!(t([m + dm, k, n + dn], Dtype::Bf16) >= base);
            proptest::prop_assert!(t([m, k, n], Dtype::Fp8) <= base);
        }
    }

    /// Decode under DeepEP low latency at EP 72 (P042's layout): with two-batch overlap the step
    /// is [`ep::two_batch_s`] of one micro-batch's compute (half the sequences, the weights read
    /// again) and its all-to-alls; without, their sum at the full batch. At 256 sequences a
    /// device TBO wins; at 32 each micro-batch's weight reads outweigh the hidden all-to-alls
    /// and TBO loses, as the LMSYS blog measures (−27 % at 32 tokens a device).
    #[test]
    fn two_batch_overlap_wins_at_large_decode_batches_only() {
        use ep::{DeepEpMode, MoeA2a};
        let (h100, r1) = (gpu("h100-sxm", None).unwrap(), model("deepseek-r1", None).unwrap());
        let p = Parallel { tp: 72, pp: 1, ep: true, dp_attention: 72, nnodes: 9 };
        let roofline = |two_batch_overlap| {
            let d = Deployment {
                parallel: p,
                network: Some(crate::catalog::network("ib-8x400", None).unwrap()),
                a2a: MoeA2a { deepep: Some(DeepEpMode::LowLatency), two_batch_overlap },
                ..Deployment::default()
            };
            Roofline::deployed(&h100, &r1, d, Efficiency::default())
        };
        let (tbo, plain) = (roofline(true), roofline(false));
        let step = |r: &Roofline, per_device: u64| {
            let mut b = BatchShape::default();
            for _ in 0..72 * per_device {
                b.add(2000, 1);
            }
            r.step_parts(&b).device_s
        };
        for per_device in [32u64, 256] {
            let mut b = BatchShape::default();
            for _ in 0..72 * per_device {
                b.add(2000, 1);
            }
            let l = tbo.load(&b, 1.0);
            let shape = tbo.deepep.unwrap();
            let a2a = |n: f64| 58.0 * shape.layer_s(&tbo.links, n, true);
            let half = l.halved();
            let want = ep::two_batch_s(tbo.compute_and_comm_s(&half), a2a(per_device as f64 / 2.0), 58.0);
            assert!((step(&tbo, per_device) - want).abs() < 1e-12);
            let sum = plain.compute_and_comm_s(&l) + a2a(per_device as f64);
            assert!((step(&plain, per_device) - sum).abs() < 1e-12);
        }
        assert!(step(&tbo, 256) < step(&plain, 256), "TBO wins at 256 a device");
        assert!(step(&tbo, 32) > step(&plain, 32), "TBO loses at 32 a device");
    }

    #[test]
    fn affine_is_exact() {
        let a = Affine { base_s: 0.01, per_prefill_token_s: 1e-4, per_decode_seq_s: 1e-3, per_ctx_token_s: 0.0 };
        let mut b = BatchShape::default();
        b.add(0, 100);
        b.add(50, 1);
        assert!((a.step_time(&b, false) - (0.01 + 0.01 + 0.001)).abs() < 1e-12);
    }

    /// A stated step law replaces the roofline's device time term by term, whatever the GPU
    /// and model; the host part stays the factors' overheads.
    #[test]
    fn step_law_prices_the_device_by_hand() {
        let law = StepLaw { step_s: 0.1, per_prefill_token_s: 1e-4, per_decode_seq_s: 2e-3, per_ctx_token_s: 1e-6 };
        let eff = Efficiency { law: Some(law), step_overhead_s: 0.0, per_seq_overhead_s: 1e-3, ..Default::default() };
        let r = Roofline::new(&gpu("v100", None).unwrap(), &model("llama-3.2-11b", None).unwrap(), 1, eff);
        let mut b = BatchShape::default();
        b.add(300, 200); // prefill 200 after 300 cached
        b.add(250, 1);
        b.add(150, 1);
        let t = r.step_parts(&b);
        // 0.1 + 200 × 1e-4 + 2 × 2e-3 + (300 + 250 + 150) × 1e-6
        assert!((t.device_s - (0.1 + 0.02 + 0.004 + 0.0007)).abs() < 1e-12, "{t:?}");
        assert!((t.host_s - 0.003).abs() < 1e-12, "{t:?}");
        assert_eq!(r.step_parts(&BatchShape::default()), StepTime::default());
        assert!(law.describe().starts_with("100.0 ms per step + 100.00 µs per prefill token"), "{}", law.describe());
    }

    /// gpt-oss-20b's sliding layers (half of them, window 128) read at most 127 earlier tokens
    /// and pair a prompt token with at most 128 keys; the roofline prices the layer-weighted
    /// mean, which a model of full layers prices for the same totals.
    #[test]
    fn windowed_layers_are_priced_over_their_window() {
        let h100 = gpu("h100-sxm", None).unwrap();
        let gpt = model("gpt-oss-20b", None).unwrap();
        let full = Model { attention_pattern: Vec::new(), sliding_window: None, ..gpt.clone() };
        let (r, rf) = (
            Roofline::new(&h100, &gpt, 1, Efficiency::default()),
            Roofline::new(&h100, &full, 1, Efficiency::default()),
        );
        assert_eq!((r.local_window(), rf.local_window()), (Some(LocalWindow::Sliding(128)), None));
        // Two decodes at 10,000: 0.5 × 20,000 + 0.5 × 2 × 127 = 10,127 context tokens read, as
        // two full-attention decodes at 10,000 and 127.
        let mut d = BatchShape::within(r.local_window());
        d.add(10_000, 1);
        d.add(10_000, 1);
        assert_eq!((d.decode_ctx_tokens, d.local_decode_ctx_tokens), (20_000, 254));
        assert_eq!(r.attended(&d).decode_ctx, 10_127.0);
        let mut df = BatchShape::default();
        df.add(10_000, 1);
        df.add(127, 1);
        assert!((r.step_parts(&d).device_s - rf.step_parts(&df).device_s).abs() < 1e-15);
        // A 1,000-token prompt: 500,500 pairs in a full layer, 128 × 129 / 2 + 872 × 128 =
        // 119,872 in a sliding one.
        let mut p = BatchShape::within(r.local_window());
        p.add(0, 1000);
        assert_eq!(p.local_prefill_attn_pairs, 119_872.0);
        assert_eq!(r.attended(&p).prefill_pairs, 310_186.0);
        // Past the window a longer context costs the sliding layers nothing more.
        let at = |c: u64| {
            let mut b = BatchShape::within(r.local_window());
            b.add(c, 1);
            r.attended(&b).decode_ctx
        };
        assert_eq!(at(20_000) - at(10_000), 5_000.0);
        // Emptied, a batch keeps its window.
        d.clear();
        assert_eq!(d, BatchShape::within(r.local_window()));
    }

    /// Qwen3-Next's 36 Gated DeltaNet layers cache no KV: only its 12 softmax layers read the
    /// context (2 KV heads of 256: 24,576 bytes a token in bf16), and each sequence's step reads
    /// and writes back its state — per layer a 3 × 8,192 convolution window in bf16 and a
    /// 32 × 128 × 128 matrix at the SSM type — whatever its context.
    #[test]
    fn linear_layers_keep_a_state_instead_of_kv() {
        let h100 = gpu("h100-sxm", None).unwrap();
        let next = model("qwen3-next-80b-a3b", None).unwrap();
        assert_eq!((next.linear_layers(), next.kv_cache_layers()), (36, 12));
        assert_eq!(next.kv_bytes_per_token(2), 12 * 2 * 2 * 256 * 2);
        let fp32 = Deployment { ssm_dtype: SsmDtype::Float32, ..Deployment::tp(1) };
        let r = Roofline::deployed(&h100, &next, fp32, Efficiency::default());
        let l = r.linear.unwrap();
        assert_eq!(l.state_bytes_per_seq, 36.0 * (3.0 * 8192.0 * 2.0 + 32.0 * 128.0 * 128.0 * 4.0));
        let r2 = Roofline::deployed(
            &h100,
            &next,
            Deployment { ssm_dtype: SsmDtype::Float32, ..Deployment::tp(2) },
            Efficiency::default(),
        );
        assert_eq!(r2.linear.unwrap().state_bytes_per_seq, l.state_bytes_per_seq / 2.0);
        // Attention FLOPs per query-key pair over the 12 softmax layers only.
        assert_eq!(r.prefill_flops_per_pair, 2.0 * 12.0 * 16.0 * 512.0);
        // A longer context costs only the softmax layers' KV reads; one more sequence costs at
        // least its state read and written back.
        let step = |ctx: &[u64]| {
            let mut b = BatchShape::default();
            for &c in ctx {
                b.add(c, 1);
            }
            r.step_parts(&b).device_s
        };
        let bw = h100.mem_bw_gbps * 1e9 * Efficiency::default().mem_bw;
        let longer = step(&[100_000]) - step(&[1_000]);
        assert!((longer - 99_000.0 * 24_576.0 / bw).abs() < 1e-9, "{longer}");
        assert!(step(&[1_000, 1_000]) - step(&[1_000]) >= 2.0 * l.state_bytes_per_seq / bw * 0.999);
        // Every layer priced as softmax attention would read 4 × the KV and no state.
        let bf16 = Roofline::deployed(&h100, &next, Deployment::tp(1), Efficiency::default());
        assert!(bf16.linear.unwrap().state_bytes_per_seq < l.state_bytes_per_seq / 1.9);
    }

    /// Llama 4 Scout's chunked layers (three in four, chunks of 8,192) read back to the start of
    /// their chunk only: a decode just past a chunk boundary reads almost nothing there.
    #[test]
    fn chunked_layers_read_back_to_their_chunk_start() {
        let scout = model("llama-4-scout", None).unwrap();
        let r = Roofline::new(&gpu("h100-sxm", None).unwrap(), &scout, 4, Efficiency::default());
        let mut b = BatchShape::within(r.local_window());
        b.add(8_193, 1);
        assert_eq!(b.local_decode_ctx_tokens, 1);
        assert_eq!(r.attended(&b).decode_ctx, 0.25 * 8_193.0 + 0.75);
        let mut a = BatchShape::within(r.local_window());
        a.add(8_191, 1);
        assert!(r.step_parts(&b).device_s < r.step_parts(&a).device_s, "a chunk start is cheaper");
    }
}
