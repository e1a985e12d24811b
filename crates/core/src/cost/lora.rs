//! The LoRA kernels of a step (vLLM 0.33, `vllm/lora/layers/*.py`, `vllm/lora/punica_wrapper/
//! punica_gpu.py`, `vllm/lora/ops/triton_ops/lora_shrink_op.py` and `lora_expand_op.py`): with
//! LoRA enabled every supported linear layer of a dense model is wrapped — the packed QKV
//! projection, the output projection, the packed gate/up projection and the down projection —
//! and so are the embedding and the LM head. A step in which some scheduled request names an
//! adapter runs, per wrapped layer, a *shrink* kernel (`x · A`, to `max_lora_rank` columns, over
//! every packed slice at once) and an *expand* kernel (`(x · A) · B`, added into the layer's
//! output): 8 kernels a layer, the embedding's expand and the head's shrink and expand. A step
//! whose requests all use the base model runs none (the model runner selects the graphs captured
//! without LoRA, `cudagraph_specialize_lora`).
//!
//! Each kernel is priced as the roofline prices a GEMM: one per-kernel floor
//! ([`super::Efficiency::kernel_floor_s`]) plus the slower of its FLOPs and its bytes — every
//! active adapter's A and B at `max_lora_rank` (the slots are padded to it) and the activations
//! it reads and adds into. The floors dominate a decode step: with the composed prior's floor
//! (≈ 20 µs) the 259 kernels of Llama-3.1-8B add ≈ 5 ms a step, the size of the slow-down vLLM's
//! own throughput benchmark shows for one rank-8 adapter on an A100 (vLLM pull request 11267:
//! 11.45 → 7.60 requests/s on ShareGPT, Llama-2-7B). Under TP each rank runs every kernel over
//! its shard (column-parallel layers shard B, row-parallel ones A); the gathers vLLM adds for
//! the shrink outputs of column-parallel layers (without `--fully-sharded-loras`) are not priced.

use crate::catalog::Model;
use serde::Serialize;

/// Bytes of one LoRA weight element (`lora_dtype` "auto": the model's activation dtype, bf16).
pub const LORA_DTYPE_BYTES: u64 = 2;

/// The wrapped layers of one model on one TP rank, per unit of rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoraShape {
    /// Elements of one adapter's A and B on one rank per unit of rank, all layers, the
    /// embedding and the head included (a slot holds `max_lora_rank` times this).
    pub elems_per_rank_unit: u64,
    /// The same for the whole adapter over all ranks (what its checkpoint holds at its rank).
    pub full_elems_per_rank_unit: u64,
    /// Activation elements one token's shrink reads and expand reads and writes, one rank.
    pub act_elems_per_token: u64,
    /// Shrink and expand kernels of one step with an adapter.
    pub kernels: u64,
}

impl LoraShape {
    /// The shape for a dense model over `tp` ranks (`None` for one whose experts or MLA
    /// projections vLLM wraps with other kernels, which cachesim does not model with LoRA).
    pub fn of(model: &Model, tp: u64) -> Option<Self> {
        if model.is_moe() || model.is_mla() {
            return None;
        }
        let tp = tp.max(1);
        let (h, i, v) = (model.hidden, model.intermediate, model.vocab);
        let (dq, dkv) = (model.heads * model.head_dim, model.kv_heads * model.head_dim);
        let layers = model.text_layers();
        // (in, out) per rank of each wrapped layer: column-parallel layers (QKV's three slices,
        // gate/up's two) keep A whole and shard B's rows; row-parallel ones (o, down) shard A.
        let per_layer = |tp: u64| -> [(u64, u64, u64); 4] {
            [
                // (A elements per rank unit, B elements per rank unit, activations per token)
                (3 * h, (dq + 2 * dkv) / tp, h + 2 * (dq + 2 * dkv) / tp),
                (dq / tp, h, dq / tp + 2 * h),
                (2 * h, 2 * i / tp, h + 4 * i / tp),
                (i / tp, h, i / tp + 2 * h),
            ]
        };
        let elems = |tp: u64| -> u64 {
            let layer: u64 = per_layer(tp).iter().map(|&(a, b, _)| a + b).sum();
            // The embedding (A over the vocabulary, B to the hidden size) and the head (A from
            // the hidden size, B over its vocabulary shard).
            layers * layer + v + h + h + v / tp
        };
        let act: u64 = per_layer(tp).iter().map(|&(_, _, x)| x).sum::<u64>() * layers + 2 * h + v / tp;
        Some(Self {
            elems_per_rank_unit: elems(tp),
            full_elems_per_rank_unit: elems(1),
            act_elems_per_token: act,
            kernels: 8 * layers + 3,
        })
    }

    /// Bytes of one GPU slot on one rank at `max_lora_rank`.
    pub fn slot_bytes(&self, max_lora_rank: u32) -> u64 {
        self.elems_per_rank_unit * max_lora_rank as u64 * LORA_DTYPE_BYTES
    }

    /// Bytes of one adapter's checkpoint at `rank`, every rank's shard together.
    pub fn adapter_bytes(&self, rank: u32) -> u64 {
        self.full_elems_per_rank_unit * rank as u64 * LORA_DTYPE_BYTES
    }
}

/// The LoRA kernels as a step prices them: the shape at the slots' rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoraKernels {
    pub shape: LoraShape,
    pub max_lora_rank: u32,
}

impl LoraKernels {
    /// Device seconds of a step's LoRA kernels over `tokens` tokens with `adapters` distinct
    /// adapters active, at `flops_per_s` and `bytes_per_s` achieved, each kernel paying `floor_s`.
    pub fn step_s(&self, tokens: f64, adapters: u32, flops_per_s: f64, bytes_per_s: f64, floor_s: f64) -> f64 {
        if adapters == 0 || tokens <= 0.0 {
            return 0.0;
        }
        let r = self.max_lora_rank as f64;
        let per_unit = self.shape.elems_per_rank_unit as f64;
        // Every token goes through A then B of its adapter: 2 FLOPs per weight element it meets.
        let flops = 2.0 * tokens * r * per_unit;
        let bytes =
            (adapters as f64 * r * per_unit + tokens * self.shape.act_elems_per_token as f64) * LORA_DTYPE_BYTES as f64;
        self.shape.kernels as f64 * floor_s + (flops / flops_per_s).max(bytes / bytes_per_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::model;

    /// Llama-3.1-8B by hand: H 4096, I 14336, 32 heads and 8 KV heads of 128, 32 layers, vocab
    /// 128,256. Per layer per rank unit: QKV 3·4096 + 6144, o 4096 + 4096, gate/up 2·4096 +
    /// 28,672, down 14,336 + 4096 = 81,920 = 7H + 2Dq + 2Dkv + 3I.
    #[test]
    fn llama_8b_by_hand() {
        let m = model("llama-3.1-8b", None).unwrap();
        let s = LoraShape::of(&m, 1).unwrap();
        assert_eq!(s.elems_per_rank_unit, 32 * 81_920 + 2 * 128_256 + 2 * 4096);
        assert_eq!(s.kernels, 259);
        // One rank-16 slot: 2,886,144 elements per unit × 16 × 2 bytes ≈ 92 MB.
        assert_eq!(s.slot_bytes(16), (32 * 81_920 + 2 * 128_256 + 2 * 4096) * 16 * 2);
        // Under TP 2 the sharded halves halve; the whole checkpoint does not change.
        let t = LoraShape::of(&m, 2).unwrap();
        assert_eq!(
            t.elems_per_rank_unit,
            32 * (7 * 4096 + (2 * 4096 + 2 * 1024 + 3 * 14_336) / 2) + 128_256 + 8192 + 64_128
        );
        assert_eq!(t.full_elems_per_rank_unit, s.full_elems_per_rank_unit);
        assert!(LoraShape::of(&model("deepseek-r1", None).unwrap(), 8).is_none());
    }

    #[test]
    fn kernels_cost_their_floors_and_nothing_without_an_adapter() {
        let m = model("llama-3.1-8b", None).unwrap();
        let k = LoraKernels { shape: LoraShape::of(&m, 1).unwrap(), max_lora_rank: 16 };
        assert_eq!(k.step_s(64.0, 0, 1e15, 3e12, 20e-6), 0.0);
        // A decode of 64 tokens with one adapter: 259 floors (5.18 ms) plus ≈ 92 MB at 3 TB/s.
        let t = k.step_s(64.0, 1, 1e15, 3e12, 20e-6);
        let bytes = (2_886_144.0 * 16.0 + 64.0 * k.shape.act_elems_per_token as f64) * 2.0;
        assert!((t - (259.0 * 20e-6 + bytes / 3e12)).abs() < 1e-12, "{t}");
        // A second adapter reads its weights too.
        assert!(k.step_s(64.0, 2, 1e15, 3e12, 20e-6) > t);
    }
}
