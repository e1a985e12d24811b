//! What a run is priced with when no fitted calibration profile can stand for it: a model's
//! class (a profile's device factors transfer only within one) and the composed prior
//! ([`composed`]): the device factors measured on the GPU, else on a GPU of its architecture
//! family, else borrowed across families — from the kernel steps ([`device_prior`]) or, for a
//! model of the class they were fitted on, from one engine's serving runs on the GPU with that
//! engine's own piece held ([`device_piece`]); the engine's own host time, per-kernel floor and
//! collective latency where a profile of its family fitted those alone ([`engine_piece`]), else
//! the priors' — each piece said with where its numbers come from. `cachesim run` falls back to
//! it, never to the bare roofline; `--calibration kernels` asks for it.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    let family = crate::catalog::gpu(&k.gpu, None).ok().and_then(|g| g.arch);
    let source = closeness_of(&k.gpu, family, gpu);
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

/// How close a GPU measured on is to `gpu`: the same GPU, one of its architecture family, or
/// neither.
pub fn closeness(measured_on: &str, gpu: &Gpu) -> DeviceSource {
    closeness_of(measured_on, crate::catalog::gpu(measured_on, None).ok().and_then(|g| g.arch), gpu)
}

/// [`closeness`] with the measured GPU's architecture family already looked up.
fn closeness_of(measured_on: &str, family: Option<crate::catalog::Arch>, gpu: &Gpu) -> DeviceSource {
    if measured_on == gpu.name {
        DeviceSource::Measured
    } else if gpu.arch.is_some() && gpu.arch == family {
        DeviceSource::Family
    } else {
        DeviceSource::Borrowed
    }
}

/// A device piece fitted on serving runs ([`device_piece`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DevicePiece {
    /// Its profile's file name and the profile.
    pub file: &'static str,
    pub profile: &'static Profile,
    /// The engine piece it was fitted with ([`engine_piece`]): its engine factors held there.
    pub engine: &'static Profile,
    /// How close the GPU it was fitted on is to the run's.
    pub source: DeviceSource,
}

impl DevicePiece {
    /// The per-kernel floor on this device relative to the one its engine piece measured on
    /// the kernel steps' device: the fitted floor over the engine piece's (1 where the fit held
    /// the floor). A kernel's fixed cost is the engine's kernels (how many, how fused) times the
    /// device's (launch, ramp and drain of one kernel), so the ratio carries to every engine.
    pub fn floor_ratio(&self) -> f64 {
        if self.profile.fit.only.iter().any(|f| f == "kernel_floor_s") && self.engine.efficiency.kernel_floor_s > 0.0 {
            self.profile.efficiency.kernel_floor_s / self.engine.efficiency.kernel_floor_s
        } else {
            1.0
        }
    }
}

/// The device piece for a run of a model of `class` ([`model_class`]) on `gpu` from serving
/// runs: a built-in profile whose fit freed device factors ([`DEVICE_FACTORS`], and perhaps the
/// per-kernel floor) and nothing else, with every other engine factor held at an engine piece's
/// of its family ([`engine_piece`]) — so that what it fitted is the device, measured through an
/// engine already measured elsewhere — fitted on models of `class` alone (its factors absorb
/// what the roofline leaves out of the class) on `gpu` or a GPU of its architecture family, and
/// admitted by `usable` with its engine piece; the closest, then the first in file order.
pub fn device_piece(gpu: &Gpu, class: &str, usable: impl Fn(&Profile) -> bool) -> Option<DevicePiece> {
    let mut best: Option<DevicePiece> = None;
    for (file, p) in crate::calibration::profile::builtin_iter() {
        let freed = |f: &str| p.fit.only.iter().any(|o| o == f);
        if !(p.fit.only.iter().all(|f| DEVICE_FACTORS.contains(&f.as_str()) || f == "kernel_floor_s")
            && DEVICE_FACTORS.iter().any(|f| freed(f))
            && !p.models.is_empty()
            && p.models.iter().all(|m| crate::catalog::model(m, None).is_ok_and(|m| model_class(&m, false) == class))
            && usable(p))
        {
            continue;
        }
        let Some((_, engine)) = engine_pieces().find(|(_, e)| {
            e.engine == p.engine
                && ENGINE_FACTORS
                    .iter()
                    .filter(|f| !freed(f))
                    .all(|f| factors::get(&p.efficiency, f) == factors::get(&e.efficiency, f))
                && usable(e)
        }) else {
            continue;
        };
        let source = closeness(&p.gpu, gpu);
        if source != DeviceSource::Borrowed && best.as_ref().is_none_or(|b| source < b.source) {
            best = Some(DevicePiece { file, profile: p, engine, source });
        }
    }
    best
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
    let family = crate::calibration::profile::family(engine);
    engine_pieces().find(|(_, p)| p.engine == family && usable(p)).cloned()
}

/// The built-in profiles fitted as engine pieces ([`engine_piece`]), in file order.
fn engine_pieces() -> impl Iterator<Item = &'static (&'static str, Profile)> {
    let (_, k) = crate::calibration::profile::builtin_kernels();
    crate::calibration::profile::builtin_iter().filter(move |(_, p)| {
        !p.fit.only.is_empty()
            && p.fit.only.iter().all(|f| ENGINE_FACTORS.contains(&f.as_str()))
            && DEVICE_FACTORS.iter().all(|f| factors::get(&p.efficiency, f) == factors::get(&k.efficiency, f))
    })
}

/// The composed prior's factors and where they come from ([`composed_from`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    pub efficiency: Efficiency,
    /// The pieces in words, for the run's echo.
    pub words: String,
    /// The device piece of the run's class it took ([`device_piece`]); `None`: the kernel steps'
    /// device factors ([`device_prior`]: dense Llama kernels, whatever the run's class).
    pub device: Option<DevicePiece>,
}

impl Composed {
    /// Whether the device factors are the kernel steps', not a device piece of the run's class.
    pub fn kernel_device(&self) -> bool {
        self.device.is_none()
    }
}

/// The composed prior for a run of `engine` on `gpu` for a model of `class` ([`model_class`];
/// [`composed_from`] with every piece usable).
pub fn composed(gpu: &Gpu, engine: EngineKind, class: &str) -> Composed {
    composed_from(gpu, engine, class, |_| true)
}

/// The composed prior for a run of `engine` on `gpu` for a model of `class`: the device piece —
/// the kernel steps' ([`device_prior`]), or one fitted on serving runs of the class on this GPU
/// or its family ([`device_piece`]) where that is closer, its per-kernel floor as a ratio to its
/// engine's; the engine piece ([`engine_piece`]) where the engine's family has one, else the host
/// factors at the priors of [`Efficiency::default`]; the link share at its prior; and the pieces
/// in words for the run's echo. Only the pieces `usable` admits are taken.
pub fn composed_from(gpu: &Gpu, engine: EngineKind, class: &str, usable: impl Fn(&Profile) -> bool) -> Composed {
    let (mut e, kernels_source, mut device) = device_prior(gpu);
    let mut floor_ratio = 1.0;
    let piece = device_piece(gpu, class, &usable).filter(|d| d.source < kernels_source);
    if let Some(d) = piece {
        for f in DEVICE_FACTORS {
            factors::set(&mut e, f, factors::get(&d.profile.efficiency, f));
        }
        floor_ratio = d.floor_ratio();
        e.kernel_floor_s *= floor_ratio;
        let p = &d.profile;
        let shares: Vec<String> = p
            .fit
            .only
            .iter()
            .filter(|f| DEVICE_FACTORS.contains(&f.as_str()))
            .map(|f| factors::factor_text(&e, f))
            .collect();
        let floor = if floor_ratio == 1.0 {
            String::new()
        } else {
            format!(
                "; a kernel's fixed cost {floor_ratio:.3} × the one {} measured on an {} ({:.2} µs there, {:.2} here)",
                d.engine.name,
                d.engine.gpu,
                d.engine.efficiency.kernel_floor_s * 1e6,
                p.efficiency.kernel_floor_s * 1e6
            )
        };
        let whose = match d.source {
            DeviceSource::Measured => "measured on this GPU".to_string(),
            _ => format!("the {} family's, measured on a {}", gpu.arch.map_or("?", |a| a.name()), p.gpu),
        };
        device = format!(
            "device: {whose} through {}'s serving runs of {class} models with its engine piece held ({}, \
             calibration/profiles/{}, fitted on {}): {}{floor}",
            p.engine,
            p.name,
            d.file,
            p.fit.cases_named(),
            shares.join(", ")
        );
    }
    let mut fitted_latency = false;
    let host = match engine_piece(engine, usable) {
        Some((file, p)) => {
            fitted_latency = p.fit.only.iter().any(|f| f == "comm_latency_s");
            // (the engine's floor, measured on the kernel steps' device, scaled to this one)
            let floor = p.fit.only.iter().any(|f| f == "kernel_floor_s");
            for f in &p.fit.only {
                factors::set(&mut e, f, factors::get(&p.efficiency, f));
            }
            if floor {
                e.kernel_floor_s *= floor_ratio;
            }
            let values: Vec<String> = p.fit.only.iter().map(|f| factors::factor_text(&e, f)).collect();
            let scaled = if floor && floor_ratio != 1.0 {
                format!(" (its per-kernel floor × {floor_ratio:.3} on this device)")
            } else {
                String::new()
            };
            format!(
                "engine: {}'s own factors, fitted on {} served on an {} with the device factors held at the \
                 kernel steps' ({}, calibration/profiles/{file}): {}{scaled}",
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
    Composed { efficiency: e, words, device: piece }
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
        let lightllm = composed(&g("h100-sxm"), EngineKind::Lightllm, "dense");
        assert!(lightllm.kernel_device());
        let Composed { efficiency: c, words, .. } = lightllm;
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
        // (an MoE model: the B200's device piece is fitted on dense ones)
        let moe = composed(&b200, EngineKind::Sglang, "MoE");
        assert!(moe.kernel_device());
        let Composed { efficiency: e, words, .. } = moe;
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
        let Composed { efficiency: none, words, .. } =
            composed_from(&b200, EngineKind::Sglang, "MoE", |p| p.name != "h100-sxm-sglang-qwen3");
        assert_eq!(none, device);
        assert!(
            words.contains(
                "; host: the priors (3.00 ms per step, 15.0 µs per sequence; no serving run of sglang fitted)"
            ),
            "{words}"
        );
    }

    /// The B200's device piece (TensorRT-LLM's Llama-3.1-70B rows with its H100 engine piece
    /// held) prices dense models on the B200, and on the other Blackwell GPUs as their family's
    /// prior, for every engine: its shares of peak, and each engine's own floor scaled by the
    /// B200's ratio to the one TensorRT-LLM measured on Hopper. An MoE model, a Hopper GPU, or
    /// a piece `usable` refuses (itself or its engine piece) keeps the kernel steps' device.
    #[test]
    fn the_device_piece_prices_its_class_on_its_family() {
        let g = |n: &str| crate::catalog::gpu(n, None).unwrap();
        let d = device_piece(&g("b200"), "dense", |_| true).expect("the B200 piece");
        assert_eq!(
            (d.profile.name.as_str(), d.engine.name.as_str()),
            ("b200-trtllm-llama70b", "h100-sxm-trtllm-qwen3")
        );
        assert_eq!(d.source, DeviceSource::Measured);
        let ratio = d.floor_ratio();
        assert!(ratio > 0.2 && ratio < 1.0, "{ratio}");
        assert_eq!(device_piece(&g("b300"), "dense", |_| true).map(|d| d.source), Some(DeviceSource::Family));
        assert!(device_piece(&g("b200"), "MoE", |_| true).is_none());
        assert!(device_piece(&g("b200"), "dense, speculative", |_| true).is_none());
        assert!(device_piece(&g("h100-sxm"), "dense", |_| true).is_none(), "a serving piece is not borrowed");

        let (_, vllm) = engine_piece(EngineKind::Vllm, |_| true).unwrap();
        let c = composed(&g("b200"), EngineKind::Vllm, "dense");
        assert!(!c.kernel_device());
        let (e, p) = (&c.efficiency, &d.profile.efficiency);
        assert_eq!(
            (e.gemm_flops, e.mem_bw, e.attn_flops, e.comm_bw),
            (p.gemm_flops, p.mem_bw, p.attn_flops, p.comm_bw)
        );
        let v = &vllm.efficiency;
        assert_eq!(
            (e.step_overhead_s, e.per_seq_overhead_s, e.comm_latency_s),
            (v.step_overhead_s, v.per_seq_overhead_s, v.comm_latency_s)
        );
        assert_eq!(e.kernel_floor_s, v.kernel_floor_s * ratio);
        assert!(
            c.words.starts_with(
                "device: measured on this GPU through trtllm's serving runs of dense models with its engine piece \
                 held (b200-trtllm-llama70b, calibration/profiles/b200-trtllm-llama70b.toml, fitted on 36 cases"
            ) && c.words.contains("; a kernel's fixed cost 0.")
                && c.words.contains("(its per-kernel floor × 0."),
            "{}",
            c.words
        );
        let family = composed(&g("b300"), EngineKind::Vllm, "dense");
        assert!(
            family.words.starts_with("device: the Blackwell family's, measured on a b200 through"),
            "{}",
            family.words
        );
        // TensorRT-LLM's own runs get its own floor measured on the B200 back.
        let t = composed(&g("b200"), EngineKind::Trtllm, "dense").efficiency;
        assert!((t.kernel_floor_s / p.kernel_floor_s - 1.0).abs() < 1e-12);
        // No engine piece (LightLLM): the kernel steps' plain floor, scaled the same way.
        let (k, _, _) = device_prior(&g("b200"));
        let l = composed(&g("b200"), EngineKind::Lightllm, "dense").efficiency;
        assert_eq!(l.kernel_floor_s, k.kernel_floor_s * ratio);
        // Held out: the piece itself, or the engine piece it was fitted through.
        for refused in ["b200-trtllm-llama70b", "h100-sxm-trtllm-qwen3"] {
            let c = composed_from(&g("b200"), EngineKind::Vllm, "dense", |p| p.name != refused);
            assert!(c.kernel_device() && c.efficiency.gemm_flops == k.gemm_flops, "{refused}");
        }
        assert!(composed(&g("b200"), EngineKind::Vllm, "MoE").kernel_device());
        assert!(composed(&g("h200"), EngineKind::Vllm, "dense").kernel_device());
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
