//! Step time: how long one forward pass takes for a batch. [`BatchShape`] aggregates what the
//! scheduler put in a step (no per-request lists); [`Roofline`] prices it per op group — GEMMs
//! (max of FLOPs over peak and weights over bandwidth), prefill attention (grows with context),
//! decode attention (reads every running sequence's KV), tensor-parallel all-reduces — plus
//! per-step and per-sequence host overheads, scaled by the efficiency factors in
//! [`Efficiency`] that calibration will fit. A step is priced in two parts, device and host
//! ([`StepTime`]): an engine that overlaps scheduling with the forward pass (SGLang's overlap
//! schedule, vLLM's async scheduling) takes the larger, one that does not takes the sum.
//! [`Affine`] is a plain linear model for hand-computed tests.

use crate::profile::{Gpu, Model};
use serde::{Deserialize, Serialize};

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
}

impl BatchShape {
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
            self.prefill_attn_pairs += new as f64 * (context as f64 + (new as f64 + 1.0) / 2.0);
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
        StepTime {
            device_s: self.per_prefill_token_s * b.prefill_tokens as f64
                + self.per_decode_seq_s * b.decode_seqs as f64
                + self.per_ctx_token_s * (b.prefill_ctx_tokens + b.decode_ctx_tokens) as f64,
            host_s: self.base_s,
        }
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
        }
    }
}

/// Roofline step time of a dense (or MoE, by active parameters) model on `tp` GPUs in bf16.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    pub tp: u64,
    pub eff: Efficiency,
    peak_flops: f64,
    bw: f64,
    link: f64,
    weight_bytes: f64,
    matmul_params: f64,
    attn_flops_per_pair: f64,
    kv_bytes_per_token: f64,
    allreduce_bytes_per_token: f64,
    layers: f64,
}

impl Roofline {
    /// The model on `tp` GPUs of one kind (bf16 weights and KV).
    pub fn new(gpu: &Gpu, model: &Model, tp: u64, eff: Efficiency) -> Self {
        let tp_f = tp as f64;
        Self {
            tp,
            eff,
            peak_flops: gpu.bf16_tflops * 1e12,
            bw: gpu.mem_bw_gbps * 1e9,
            link: gpu.link_bytes_per_s(),
            weight_bytes: model.weight_bytes(2) / tp_f,
            matmul_params: model.active_matmul_params() / tp_f,
            // QKᵀ and AV: 2 matmuls × 2 FLOPs × head_dim per head per layer.
            attn_flops_per_pair: 4.0 * (model.layers * model.heads * model.head_dim) as f64 / tp_f,
            kv_bytes_per_token: model.kv_bytes_per_token(2) as f64 / tp_f,
            allreduce_bytes_per_token: (model.hidden * 2) as f64,
            layers: model.layers as f64,
        }
    }
}

impl CostModel for Roofline {
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        if b.seqs == 0 {
            return StepTime::default();
        }
        let e = &self.eff;
        let tokens = b.tokens() as f64;
        let flops = self.peak_flops * e.gemm_flops;
        let bw = self.bw * e.mem_bw;
        let gemm = (2.0 * self.matmul_params * tokens / flops).max(self.weight_bytes / bw);
        let prefill_attn = (self.attn_flops_per_pair * b.prefill_attn_pairs / (self.peak_flops * e.attn_flops))
            .max(b.prefill_ctx_tokens as f64 * self.kv_bytes_per_token / bw);
        let decode_attn = (self.attn_flops_per_pair * b.decode_ctx_tokens as f64 / (self.peak_flops * e.attn_flops))
            .max(b.decode_ctx_tokens as f64 * self.kv_bytes_per_token / bw);
        let comm = if self.tp > 1 {
            let ring = 2.0 * (self.tp as f64 - 1.0) / self.tp as f64;
            2.0 * self.layers
                * (e.comm_latency_s + ring * tokens * self.allreduce_bytes_per_token / (self.link * e.comm_bw))
        } else {
            0.0
        };
        StepTime {
            device_s: gemm + prefill_attn + decode_attn + comm,
            host_s: e.step_overhead_s + e.per_seq_overhead_s * b.seqs as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{gpu, model};

    fn h100_8b(tp: u64) -> Roofline {
        Roofline::new(&gpu("h100-sxm", None).unwrap(), &model("llama-3.1-8b", None).unwrap(), tp, Efficiency::default())
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
    fn affine_is_exact() {
        let a = Affine { base_s: 0.01, per_prefill_token_s: 1e-4, per_decode_seq_s: 1e-3, per_ctx_token_s: 0.0 };
        let mut b = BatchShape::default();
        b.add(0, 100);
        b.add(50, 1);
        assert!((a.step_time(&b, false) - (0.01 + 0.01 + 0.001)).abs() < 1e-12);
    }
}
