//! Physics as tests: over random deployments of the catalog's GPUs and models, priced with every
//! calibration a run can pick (each built-in fitted profile, the composed prior, the raw
//! roofline), a step never beats the hardware — a decode step reads at least the weights it
//! multiplies by, at no more than the datasheet's HBM bandwidth; a prefill never computes above
//! the tensor cores' peak; a TP step is never shorter than one rank's compute — and a step never
//! gets cheaper for more work (more sequences, longer contexts, more prompt tokens).

use super::*;
use crate::calibration::{prior, profile};
use crate::catalog::{builtin_gpus, builtin_models};
use proptest::prelude::*;

/// What floating-point sums may lose against a bound met exactly (a factor at 1, its bound).
const ROUNDING: f64 = 1.0 - 1e-12;

/// Every set of factors a run can be priced with, with where it comes from.
fn calibrations(gpu: &Gpu, class: &str) -> Vec<(String, Efficiency)> {
    use crate::engine::EngineKind::*;
    let mut all = vec![("none".to_string(), Efficiency::default())];
    for e in [Vllm, VllmV0, Sglang, Lightllm, Trtllm] {
        all.push((format!("prior ({e:?})"), prior::composed(gpu, e, class).efficiency));
    }
    all.extend(profile::builtin().into_iter().map(|(f, p)| (f.to_string(), p.efficiency)));
    all
}

/// A batch of `decode` sequences at `context` tokens each and one prefill chunk of `prefill`
/// new tokens after `cached` ones, counted for `r`'s windowed layers.
fn batch(r: &Roofline, decode: u32, context: u64, prefill: u64, cached: u64) -> BatchShape {
    let mut b = BatchShape::within(r.local_window());
    for _ in 0..decode {
        b.add(context, 1);
    }
    if prefill > 1 {
        b.add(cached, prefill);
    }
    b
}

/// The deployment drawn by indices into the catalog's GPUs and models, TP 2^`tp_log` and the
/// calibrations of [`calibrations`], priced; with it in words.
fn deployment(g: usize, m: usize, tp_log: u32, c: usize) -> (Gpu, Model, u64, Roofline, String) {
    let gpus = builtin_gpus();
    let models = builtin_models();
    let (gpu, model) = (gpus[g % gpus.len()].clone(), models[m % models.len()].clone());
    let tp = 1u64 << tp_log;
    let cals = calibrations(&gpu, &prior::model_class(&model, false));
    let (name, eff) = &cals[c % cals.len()];
    let r = Roofline::new(&gpu, &model, tp, *eff);
    let what = format!("{} on {} × {}, TP {tp}, calibration {name}", model.name, gpu.name, gpu.description);
    (gpu, model, tp, r, what)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_step_never_beats_the_hardware(
        g in 0usize..64, m in 0usize..64, tp_log in 0u32..4, c in 0usize..64,
        decode in 1u32..512, context in 0u64..32_768, prefill in 2u64..16_384, cached in 0u64..8_192,
    ) {
        let (gpu, model, tp, r, what) = deployment(g, m, tp_log, c);
        let (gpu, model) = (&gpu, &model);
        // Decode: the weights every token multiplies by and the KV it attends over, read once
        // per step, at the datasheet's bandwidth at most.
        let d = batch(&r, decode, context, 0, 0);
        let weights = model.dense_matmul_params() * model.weight_dtype.bytes() as f64 / tp as f64;
        let kv = r.attended(&d).decode_ctx * r.kv_read_bytes_per_token;
        let floor = (weights + kv) / (gpu.mem_bw_gbps * 1e9);
        let step = r.step_parts(&d).device_s;
        prop_assert!(step >= floor * ROUNDING, "{what}: decode of {decode} at {context}: {step} s < its reads alone {floor} s");
        // Prefill: the matmul FLOPs of every prompt token and the attention's, each at its
        // tensor cores' peak at most.
        let p = batch(&r, 0, 0, prefill, cached);
        let matmul = 2.0 * model.active_matmul_params() / tp as f64 * prefill as f64;
        let attention = r.prefill_flops_per_pair * r.attended(&p).prefill_pairs;
        let floor = matmul / gemm_peak(gpu, model.weight_dtype) + attention / (gpu.bf16_tflops * 1e12);
        let step = r.step_parts(&p).device_s;
        prop_assert!(step >= floor * ROUNDING, "{what}: prefill of {prefill} after {cached}: {step} s < its FLOPs at peak {floor} s");
        // A TP step is a rank's compute plus its collectives.
        let mixed = batch(&r, decode, context, prefill, cached);
        prop_assert!(r.step_parts(&mixed).device_s >= r.rank_compute_s(&mixed), "{what}");
    }

    #[test]
    fn more_work_never_costs_less(
        g in 0usize..64, m in 0usize..64, tp_log in 0u32..4, c in 0usize..64, overlap: bool,
        decode in 0u32..512, context in 0u64..32_768, prefill in 0u64..8_192, cached in 0u64..8_192,
        more_seqs in 1u32..64, more_ctx in 1u64..4_096, more_tokens in 2u64..4_096,
    ) {
        let (_, model, _, r, what) = deployment(g, m, tp_log, c);
        let t = |b: BatchShape| r.step_time(&b, overlap);
        let batch = |decode, context, prefill, cached| batch(&r, decode, context, prefill, cached);
        let base = t(batch(decode, context, prefill, cached));
        let what = format!("{what}: {base} s");
        prop_assert!(t(batch(decode + more_seqs, context, prefill, cached)) >= base, "more sequences: {what}");
        prop_assert!(t(batch(decode, context, prefill.max(1) + more_tokens, cached)) >= base, "more prompt tokens: {what}");
        // A chunked layer's token at the start of a chunk reads nothing before it: a longer
        // context can cost less there (Llama 4), as it does on the GPU.
        if !model.uses(crate::catalog::AttentionKind::Chunked) {
            prop_assert!(t(batch(decode, context + more_ctx, prefill, cached)) >= base, "longer contexts: {what}");
            prop_assert!(t(batch(decode, context, prefill, cached + more_ctx)) >= base, "a longer cached prefix: {what}");
        }
    }
}
