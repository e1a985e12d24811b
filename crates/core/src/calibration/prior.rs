//! What a run is priced with when no fitted calibration profile can stand for it: a model's
//! class (fitted factors transfer only within one) and the composed prior ([`composed`]): the
//! device factors measured on the GPU, else on a GPU of its architecture family, else borrowed
//! across families ([`device_prior`]), with the host and communication factors at the priors —
//! each piece said with where its numbers come from. `cachesim run` falls back to it, never to
//! the bare roofline; `--calibration kernels` asks for it.

use crate::catalog::{Gpu, Model};
use crate::cost::Efficiency;

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

/// The composed prior for `gpu`: the device piece ([`device_prior`]), the host (per step, per
/// sequence) and communication factors at the priors of [`Efficiency::default`], and the
/// pieces in words for the run's echo.
pub fn composed(gpu: &Gpu) -> (Efficiency, String) {
    let (e, _, device) = device_prior(gpu);
    let words = format!(
        "{device}; host: the priors ({:.2} ms per step, {:.1} µs per sequence; no serving run fitted); \
         communication: the priors ({:.2} of link bandwidth, {:.0} µs per collective)",
        e.step_overhead_s * 1e3,
        e.per_seq_overhead_s * 1e6,
        e.comm_bw,
        e.comm_latency_s * 1e6
    );
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
        let (c, words) = composed(&g("h100-sxm"));
        assert_eq!(c, e);
        assert!(words.contains("; host: the priors (3.00 ms per step, 15.0 µs per sequence"), "{words}");
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
