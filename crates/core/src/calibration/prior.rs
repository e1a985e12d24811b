//! What a run is priced with when no fitted calibration profile can stand for it: a model's
//! class (a profile's device factors transfer only within one) and the composed prior
//! ([`composed`]): the device factors measured on the GPU, else on a GPU of its architecture
//! family, else borrowed across families ([`device_prior`]); the engine's own host time,
//! per-kernel floor and collective latency where a profile of its family fitted those alone
//! ([`engine_piece`]), else the priors' — each piece said with where its numbers come from.
//! `cachesim run` falls back to it, never to the bare roofline; `--calibration kernels` asks
//! for it.

use crate::calibration::factors::{self, DEVICE_FACTORS, ENGINE_FACTORS};
use crate::calibration::profile::Profile;
use crate::catalog::{Gpu, Model};
use crate::cost::Efficiency;
use crate::engine::EngineKind;

/// A model's class for the family rung of [`leave_group_out`]: `dense` or `MoE` (routed experts
/// or an MLA latent cache: DeepSeek-V3/R1), with `, speculative` when the run drafts tokens. A
/// profile's factors absorb what the roofline leaves out of its class (expert routing and
/// all-to-alls, MLA's absorbed attention, draft-and-verify steps), so they do not transfer to
/// a model of another class.
pub fn model_class(model: &Model, speculative: bool) -> String {
    let kind = if model.is_moe() || model.is_mla() { "MoE" } else { "dense" };
    if speculative {
        format!("{kind}, speculative")
    } else {
        kind.to_string()
    }
}

/// The step-time priors with a kernel-step profile's device factors (`kernels`): GEMM, HBM and
/// attention efficiency and the per-kernel floor from the kernel measurements; the host
/// (per-step, per-sequence) and communication factors stay at the priors
/// ([`Efficiency::default`]), as no kernel step constrains them.
pub fn kernel_device_prior(kernels: &Efficiency) -> Efficiency {
    Efficiency {
        gemm_flops: kernels.gemm_flops,
        mem_bw: kernels.mem_bw,
        attn_flops: kernels.attn_flops,
        kernel_floor_s: kernels.kernel_floor_s,
        ..Efficiency::default()
    }
}

/// Where the device piece of [`composed`] comes from, from the closest to the farthest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSource {
    /// A kernel-step profile measured on this GPU.
    Measured,
    /// One measured on another GPU of the same architecture family: shares of peak carry over
    /// within a family (same tensor cores, same memory system), so they are its prior.
    Family,
    /// No GPU of the family (or no family stated) is measured: the shares of a GPU of another
    /// family, a prior said to be borrowed.
    Borrowed,
}

/// The device piece for `gpu`: the device factors of the built-in kernel-step profile
/// ([`crate::calibration::profile::builtin_kernels`]) — GEMM, HBM and attention efficiency and
/// the per-kernel floor — with how it relates to `gpu`, and the profile's name, GPU and cases.
pub fn device_prior(gpu: &Gpu) -> (Efficiency, DeviceSource, String) {
    let (file, k) = crate::calibration::profile::builtin_kernels();
    let measured_on = crate::catalog::gpu(&k.gpu, None).ok();
    let family = measured_on.as_ref().and_then(|g| g.arch);
    let source = if k.gpu == gpu.name {
        DeviceSource::Measured
    } else if gpu.arch.is_some() && gpu.arch == family {
        DeviceSource::Family
    } else {
        DeviceSource::Borrowed
    };
    let what = format!("{} (calibration/profiles/{file}, fitted on {})", k.name, k.fit.cases_named());
    let words = match source {
        DeviceSource::Measured => format!("device: measured on this GPU, {what}"),
        DeviceSource::Family => {
            format!("device: the {} family's prior, measured on an {}: {what}", family.map_or("?", |a| a.name()), k.gpu)
        }
        DeviceSource::Borrowed => format!(
            "device: borrowed, no {} GPU is measured: the shares measured on an {} ({}), {what}",
            gpu.arch.map_or("GPU of a stated architecture".to_string(), |a| a.name().to_string()),
            k.gpu,
            family.map_or("?", |a| a.name())
        ),
    };
    (kernel_device_prior(&k.efficiency), source, words)
}

/// The engine piece for a run of `engine`: a built-in profile of the engine's family whose fit
/// freed only engine factors ([`ENGINE_FACTORS`]: host time per step and per sequence, the
/// per-kernel floor, the collective latency) with every device factor ([`DEVICE_FACTORS`]) held
/// at the kernel-step profile's, and for which `usable` holds — the first in file order. Those
/// factors measure the engine (its scheduler and sampler, the kernels it launches per layer,
/// its all-reduce), not the GPU or the model they were fitted on, so they stand for it on any
/// GPU and model: fitted on the H100 Qwen3-32B rows of AIConfigurator's silicon sample, they
/// bring the Blackwell and the other models' TPOTs of the sample nearer
/// (docs/validation/silicon.md, "The engine piece"). `None` when the family has none.
pub fn engine_piece(engine: EngineKind, usable: impl Fn(&Profile) -> bool) -> Option<(&'static str, Profile)> {
    let (_, k) = crate::calibration::profile::builtin_kernels();
    let family = crate::calibration::profile::family(engine);
    crate::calibration::profile::builtin().into_iter().find(|(_, p)| {
        p.engine == family
            && !p.fit.only.is_empty()
            && p.fit.only.iter().all(|f| ENGINE_FACTORS.contains(&f.as_str()))
            && DEVICE_FACTORS.iter().all(|f| factors::get(&p.efficiency, f) == factors::get(&k.efficiency, f))
            && usable(p)
    })
}

/// The composed prior for a run of `engine` on `gpu` ([`composed_from`] with every engine
/// piece usable).
pub fn composed(gpu: &Gpu, engine: EngineKind) -> (Efficiency, String) {
    composed_from(gpu, engine, |_| true)
}

/// The composed prior for a run of `engine` on `gpu`: the device piece ([`device_prior`]); the
/// engine piece ([`engine_piece`], among the profiles `usable` admits) where the engine's family
/// has one, else the host factors at the priors of [`Efficiency::default`]; the link share at
/// its prior; and the pieces in words for the run's echo.
pub fn composed_from(gpu: &Gpu, engine: EngineKind, usable: impl Fn(&Profile) -> bool) -> (Efficiency, String) {
    let (mut e, _, device) = device_prior(gpu);
    let mut fitted_latency = false;
    let host = match engine_piece(engine, usable) {
        Some((file, p)) => {
            fitted_latency = p.fit.only.iter().any(|f| f == "comm_latency_s");
            for f in &p.fit.only {
                factors::set(&mut e, f, factors::get(&p.efficiency, f));
            }
            let values: Vec<String> = p.fit.only.iter().map(|f| factors::factor_text(&e, f)).collect();
            format!(
                "engine: {}'s own factors, fitted on {} served on an {} with the device factors held at the \
                 kernel steps' ({}, calibration/profiles/{file}): {}",
                p.engine,
                p.fit.cases_named(),
                p.gpu,
                p.name,
                values.join(", ")
            )
        }
        None => format!(
            "host: the priors ({:.2} ms per step, {:.1} µs per sequence; no serving run of {} fitted)",
            e.step_overhead_s * 1e3,
            e.per_seq_overhead_s * 1e6,
            crate::calibration::profile::family(engine)
        ),
    };
    let mut words = format!("{device}; {host}; communication: {:.2} of link bandwidth (the prior)", e.comm_bw);
    if !fitted_latency {
        words += &format!(", {:.1} µs per collective (the prior)", e.comm_latency_s * 1e6);
    }
    (e, words)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H200 is measured; the other Hopper GPUs take its shares as their family's prior; an
    /// A100 (Ampere) and a GPU of no stated family borrow them, and the words say so.
    #[test]
    fn device_prior_says_how_close_its_measurement_is() {
        let g = |n: &str| crate::catalog::gpu(n, None).unwrap();
        let (e, s, w) = device_prior(&g("h200"));
        assert_eq!(s, DeviceSource::Measured, "{w}");
        assert!(e.kernel_floor_s > 0.0 && w.starts_with("device: measured on this GPU, h200-kernels"), "{w}");
        for n in ["h100-sxm", "h20", "h800", "h100-pcie"] {
            let (f, s, w) = device_prior(&g(n));
            assert_eq!((f, s), (e, DeviceSource::Family), "{n}");
            assert!(w.starts_with("device: the Hopper family's prior, measured on an h200"), "{w}");
        }
        let (_, s, w) = device_prior(&g("a100-80gb"));
        assert_eq!(s, DeviceSource::Borrowed);
        assert!(
            w.starts_with("device: borrowed, no Ampere GPU is measured: the shares measured on an h200 (Hopper)"),
            "{w}"
        );
        let custom = Gpu { arch: None, name: "mine".into(), ..g("h200") };
        assert_eq!(device_prior(&custom).1, DeviceSource::Borrowed);
        let (c, words) = composed(&g("h100-sxm"), EngineKind::Lightllm);
        assert_eq!(c, e);
        assert!(words.contains("; host: the priors (3.00 ms per step, 15.0 µs per sequence"), "{words}");
    }

    /// vLLM v1, SGLang and TensorRT-LLM each have an engine piece (fitted on the H100 Qwen3-32B
    /// silicon rows with the kernel steps' device factors held); vLLM V0 and LightLLM have none,
    /// nor does a profile that freed a device factor (the published points' profiles). The
    /// composed prior takes the piece's fitted factors and keeps the device's; a piece `usable`
    /// refuses is passed over, leaving the priors' host time.
    #[test]
    fn the_engine_piece_is_the_engines_own_fit() {
        let names = |e| engine_piece(e, |_| true).map(|(_, p)| p.name);
        assert_eq!(names(EngineKind::Vllm).as_deref(), Some("h100-sxm-vllm-qwen3"));
        assert_eq!(names(EngineKind::Sglang).as_deref(), Some("h100-sxm-sglang-qwen3"));
        assert_eq!(names(EngineKind::Trtllm).as_deref(), Some("h100-sxm-trtllm-qwen3"));
        assert_eq!(names(EngineKind::VllmV0), None);
        assert_eq!(names(EngineKind::Lightllm), None);
        let b200 = crate::catalog::gpu("b200", None).unwrap();
        let (device, _, _) = device_prior(&b200);
        let (_, piece) = engine_piece(EngineKind::Sglang, |_| true).unwrap();
        let (e, words) = composed(&b200, EngineKind::Sglang);
        assert_eq!(
            (e.gemm_flops, e.mem_bw, e.attn_flops, e.comm_bw),
            (device.gemm_flops, device.mem_bw, device.attn_flops, device.comm_bw)
        );
        assert_eq!(
            (e.step_overhead_s, e.per_seq_overhead_s, e.kernel_floor_s),
            (piece.efficiency.step_overhead_s, piece.efficiency.per_seq_overhead_s, piece.efficiency.kernel_floor_s)
        );
        // SGLang's piece did not fit the collective latency: the prior's stays.
        assert_eq!(e.comm_latency_s, Efficiency::default().comm_latency_s);
        assert!(
            words.contains("; engine: sglang's own factors, fitted on 26 cases: aic-h100/")
                && words.contains("µs per kernel"),
            "{words}"
        );
        let (none, words) = composed_from(&b200, EngineKind::Sglang, |p| p.name != "h100-sxm-sglang-qwen3");
        assert_eq!(none, device);
        assert!(
            words.contains(
                "; host: the priors (3.00 ms per step, 15.0 µs per sequence; no serving run of sglang fitted)"
            ),
            "{words}"
        );
    }

    /// The device factors come from the kernel profile, the rest from the priors.
    #[test]
    fn kernel_prior_takes_the_device_factors_only() {
        let k = Efficiency {
            gemm_flops: 0.5,
            mem_bw: 0.9,
            attn_flops: 0.95,
            kernel_floor_s: 2e-5,
            step_overhead_s: 1.0,
            per_seq_overhead_s: 1.0,
            comm_bw: 0.1,
            eager_layer_launch_s: 1e-3,
            ..Efficiency::default()
        };
        let d = kernel_device_prior(&k);
        assert_eq!((d.gemm_flops, d.mem_bw, d.attn_flops, d.kernel_floor_s), (0.5, 0.9, 0.95, 2e-5));
        let e = Efficiency::default();
        assert_eq!(
            (d.step_overhead_s, d.per_seq_overhead_s, d.comm_bw, d.comm_latency_s),
            (e.step_overhead_s, e.per_seq_overhead_s, e.comm_bw, e.comm_latency_s)
        );
        assert_eq!(d.eager_layer_launch_s, e.eager_layer_launch_s);
    }

    /// Dense, MoE (routed experts, MLA) and speculative decoding, from the built-in models.
    #[test]
    fn model_classes() {
        let model = |n: &str| crate::catalog::model(n, None).unwrap();
        assert_eq!(model_class(&model("llama-3.1-8b"), false), "dense");
        assert_eq!(model_class(&model("llama-3.1-70b"), true), "dense, speculative");
        assert_eq!(model_class(&model("deepseek-r1"), false), "MoE");
        assert_eq!(model_class(&model("mixtral-8x7b"), false), "MoE");
        assert_eq!(model_class(&model("deepseek-r1"), true), "MoE, speculative");
    }
}
