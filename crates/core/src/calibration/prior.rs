//! What a run is priced with when no fitted calibration profile can stand for it: a model's
//! class (fitted factors transfer only within one) and the step-time priors with the kernel
//! measurements' device factors (`--calibration kernels`).

use crate::catalog::Model;
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

#[cfg(test)]
mod tests {
    use super::*;

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
