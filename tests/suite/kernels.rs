//! Kernel-level step cases against the H200 profiling data (the data folder's
//! `published/profiling/h200/`): the fitted H200 kernel profile reproduces the Llama-3.1-8B
//! decode and prefill steps, a simulated Llama-3.1-70B TP step is never shorter than one rank's
//! measured compute, and a fit on step rows recovers known factors.

use crate::common;

use cachesim::calibrate::{fit, kernels};
use cachesim::calibration::profile;
use cachesim::catalog::{gpu, model};
use cachesim::config::{resolve, RunOptions};
use cachesim::cost::{CostModel, Deployment, Efficiency, Roofline};
use cachesim::engine::EngineKind;
use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn case(name: &str) -> kernels::LoadedSteps {
    kernels::load(&crate_dir().join("calibration/cases").join(format!("{name}.toml"))).unwrap()
}

fn h200_profile() -> profile::Profile {
    profile::read(&crate_dir().join("calibration/profiles/h200-kernels.toml")).unwrap()
}

/// The kernel case `name`'s rows and their residuals priced by the H200 kernel profile.
fn priced_by_h200_profile(name: &str, data: &std::path::Path) -> (kernels::StepSet, Vec<profile::Residual>) {
    let set = case(name).read(Some(data)).unwrap();
    let rows = set.residuals(h200_profile().efficiency, &kernels::default_weights());
    (set, rows)
}

/// A fit of the kernel case `name` alone, every kernel metric weighted 1, from the defaults.
fn fit_alone(name: &str, data: &std::path::Path) -> fit::Fit {
    let t = fit::Target::from_steps(&case(name), Some(data)).unwrap();
    let o = cachesim::calibration::factors::FitOptions {
        weights: kernels::default_weights(),
        max_iters: 400,
        ..Default::default()
    };
    fit::fit(std::slice::from_ref(&t), &o).unwrap()
}

fn median(mut e: Vec<f64>) -> f64 {
    e.sort_by(f64::total_cmp);
    let n = e.len();
    if n % 2 == 1 {
        e[n / 2]
    } else {
        (e[n / 2 - 1] + e[n / 2]) / 2.0
    }
}

/// The fitted H200 profile reproduces the 8B decode and prefill steps within 5 % median.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn h200_profile_reproduces_the_8b_steps() {
    let Some(data) = common::data_dir() else { return };
    let p = h200_profile();
    assert_eq!(p.fit.cases, ["h200-llama8b-steps"]);
    let (_, rows) = priced_by_h200_profile("h200-llama8b-steps", &data);
    assert_eq!(rows.len(), 17 + 8);
    for m in ["decode_step_ms", "prefill_step_ms"] {
        let e: Vec<f64> = rows.iter().filter(|r| r.metric == *m).map(|r| r.error_pct.abs()).collect();
        let med = median(e);
        assert!(med < 5.0, "{m}: median |error| {med:.2} %");
    }
}

/// With the H200 profile, a simulated Llama-3.1-70B TP 4 / TP 8 step, all-reduces included, is
/// never shorter than the measured compute of one rank alone, every row checked in the mode it
/// was measured in:
/// - decode (CUDA graph, device-bound): the TP step's device time ≥ the rank's time less 2 %,
///   the data's own noise — at TP 8, L = 512 the rank takes 14.42 ms at B = 8 but 14.16 ms at
///   B = 32, 1.8 % less for 4× the work. Exactly ≥ for 44 of the 47 rows; the three TP 8
///   B = 8 rows fall 0.6–1.1 % short.
/// - eager prefill where the model is device-bound (device time ≥ the eager launch time): the
///   TP step ≥ the rank's time.
/// - eager prefill where the model is launch-bound (plain PyTorch's host launches set the
///   time, which serving runs price as host time): the model says so, and the launch time is
///   within 35 % of the measurement — TP 8 at T = 128 took 75.4 ms against 44.4 ms at T = 256,
///   host noise no device model can follow.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn a_tp_step_is_never_shorter_than_a_ranks_compute() {
    let Some(data) = common::data_dir() else { return };
    let eff = h200_profile().efficiency;
    let (mut checked, mut exact) = (0, 0);
    for tp in [4, 8] {
        let set = case(&format!("h200-llama70b-tp{tp}-rank-steps")).read(Some(&data)).unwrap();
        assert!(set.rank && set.tp == tp);
        let r = Roofline::deployed(&set.gpu, &set.model, Deployment::tp(tp), eff);
        for row in &set.rows {
            let (batch, eager) = row.work.step().expect("a step row");
            let device = r.step_parts(batch).device_s * 1e3;
            let launch = r.eager_launch_s() * 1e3;
            let what =
                format!("TP {tp} {}: simulated {device:.2} ms, one rank measured {:.2} ms", row.shape, row.measured);
            if !eager {
                assert!(device >= 0.98 * row.measured, "{what}");
            } else if device >= launch {
                assert!(device >= row.measured, "{what}");
            } else {
                assert!((launch / row.measured - 1.0).abs() < 0.35, "{what}, launch-bound at {launch:.2} ms");
            }
            exact += usize::from(device.max(if eager { launch } else { 0.0 }) >= row.measured);
            // The all-reduces are what a TP step adds to a rank's compute.
            assert!(device > r.rank_compute_s(batch) * 1e3);
            checked += 1;
        }
    }
    assert_eq!(checked, 19 + 8 + 20 + 8);
    assert_eq!(exact, checked - 5, "rows where the TP step is at least the rank's measured time");
    // What `run` prices these deployments with by default, for every engine: no fitted profile
    // matches Llama-3.1-70B on an H200, so the composed prior — the device factors checked above,
    // and each engine's own per-kernel floor, host time and collective latency where a profile
    // of its family fitted them alone (the engine piece), else the priors'. The rank above ran
    // plain PyTorch's kernels, each paying the kernel steps' floor; an engine's fused kernels pay
    // its own, which is why a serving step can be shorter than that rank (AIConfigurator's
    // silicon sample: vLLM 0.19, Llama-3.1-70B FP8, TP 8, four requests on H100s decode at
    // 9.1–10.2 ms a token, all-reduces included, below the 13.3 ms this data's plain TP 8 rank
    // computes alone on the faster H200). So the composed TP step is held to the same rank with
    // the engine's floor in place of the plain one (the measured time less the kernels × the
    // floors' difference), and to the hardware: the rank's weights read at the datasheet's HBM
    // bandwidth plus its all-reduces at the link's full rate.
    let plain_floor = eff.kernel_floor_s;
    for engine in [EngineKind::Vllm, EngineKind::VllmV0, EngineKind::Sglang, EngineKind::Lightllm, EngineKind::Trtllm] {
        for tp in [4, 8] {
            let o = RunOptions { engine, gpu: "h200".into(), model: "llama-3.1-70b".into(), tp, ..Default::default() };
            let c = resolve(&o).unwrap();
            let got = &c.efficiency;
            assert_eq!(
                (got.gemm_flops, got.mem_bw, got.attn_flops),
                (eff.gemm_flops, eff.mem_bw, eff.attn_flops),
                "{engine:?} TP {tp}: {}",
                c.calibration
            );
            assert!(c.calibration.starts_with("prior (no fitted profile for h200"), "{}", c.calibration);
            assert!(got.kernel_floor_s > 0.0 && got.kernel_floor_s <= plain_floor, "{engine:?}: {}", c.calibration);
            let set = case(&format!("h200-llama70b-tp{tp}-rank-steps")).read(Some(&data)).unwrap();
            let r = Roofline::deployed(&set.gpu, &set.model, Deployment::tp(tp), *got);
            let saved_ms = set.model.forward_kernels() * (plain_floor - got.kernel_floor_s) * 1e3;
            let weights_ms = set.model.weight_bytes(2) / tp as f64 / (set.gpu.mem_bw_gbps * 1e9) * 1e3;
            let graphed: Vec<(&cachesim::cost::BatchShape, f64, &str)> = set
                .rows
                .iter()
                .filter_map(|r| {
                    r.work.step().filter(|(_, eager)| !eager).map(|(b, _)| (b, r.measured, r.shape.as_str()))
                })
                .collect();
            for &(batch, measured, shape) in &graphed {
                // The rank's compute at this shape is at most what it measured at any shape with
                // as many sequences and as long a context (more work never takes less time): the
                // envelope the measurements' noise hides (B = 8 measured 1.8 % above B = 32).
                let per_seq = |b: &cachesim::cost::BatchShape| b.decode_ctx_tokens / u64::from(b.decode_seqs);
                let within = |o: &&(&cachesim::cost::BatchShape, f64, &str)| {
                    o.0.decode_seqs >= batch.decode_seqs && per_seq(o.0) >= per_seq(batch)
                };
                let rank = graphed.iter().filter(within).map(|o| o.1).fold(measured, f64::min);
                let device = r.step_parts(batch).device_s * 1e3;
                // The engine's own rank was never timed alone: the bound is a model's, so 5 %
                // below it is allowed (the closest, vLLM's TP 8 at B = 8, whose fitted 7.1 µs
                // collectives leave its all-reduces less than the priors' 10, sits 4.4 % below).
                assert!(
                    device >= 0.95 * (rank - saved_ms),
                    "{engine:?} TP {tp} {shape}: {device:.2} ms < one rank's {rank:.2} ms less {saved_ms:.2} ms of floors",
                );
                assert!(device > weights_ms, "{engine:?} TP {tp} {shape}: {device:.2} ms");
            }
        }
    }
    let raw = Roofline::deployed(
        &gpu("h200", None).unwrap(),
        &model("llama-3.1-70b", None).unwrap(),
        Deployment::tp(8),
        Efficiency::default(),
    );
    let mut b = cachesim::cost::BatchShape::default();
    b.add(512, 1);
    assert!(
        raw.step_parts(&b).device_s * 1e3 < 13.34,
        "the bare roofline's TP 8 decode at B = 1 undercuts the rank's 13.34 ms"
    );
}

/// Known factors → synthetic step rows → fit → the factors back.
#[test]
fn fit_on_step_rows_recovers_known_factors() {
    let dir = tempfile::tempdir().unwrap();
    let truth = Efficiency {
        gemm_flops: 0.7,
        attn_flops: 0.5,
        mem_bw: 0.85,
        kernel_floor_s: 15e-6,
        eager_layer_launch_s: 400e-6,
        ..Efficiency::default()
    };
    let file = dir.path().join("s.toml");
    let body = "kind = \"steps\"\ncase = \"s\"\ngpu = \"h200\"\nmodel = \"llama-3.1-8b\"\n\
                decode = \"d.csv\"\nprefill = \"p.csv\"\nprefill_eager = true\n";
    std::fs::write(&file, body).unwrap();
    // Rows priced by the truth: decode over batch and context, prefill over length.
    let mut d = String::from("batch,context,time_us\n");
    let mut p = String::from("tokens,time_us\n");
    std::fs::write(dir.path().join("d.csv"), "batch,context,time_us\n1,1,1\n").unwrap();
    std::fs::write(dir.path().join("p.csv"), "tokens,time_us\n1,1\n").unwrap();
    let probe = kernels::load(&file).unwrap().read(Some(dir.path())).unwrap();
    let r = Roofline::deployed(&probe.gpu, &probe.model, Deployment::tp(1), truth);
    for (b, l) in [(1, 512), (16, 512), (64, 2048), (256, 512), (32, 8192), (128, 2048)] {
        let mut s = cachesim::cost::BatchShape::default();
        (0..b).for_each(|_| s.add(l, 1));
        d += &format!("{b},{l},{}\n", r.step_parts(&s).device_s * 1e6);
    }
    for t in [128, 512, 2048, 8192, 16384] {
        let mut s = cachesim::cost::BatchShape::default();
        s.add(0, t);
        p += &format!("{t},{}\n", r.step_parts(&s).device_s.max(r.eager_launch_s()) * 1e6);
    }
    std::fs::write(dir.path().join("d.csv"), d).unwrap();
    std::fs::write(dir.path().join("p.csv"), p).unwrap();
    let t = fit::Target::from_steps(&kernels::load(&file).unwrap(), Some(dir.path())).unwrap();
    assert!(t.steps.as_ref().is_some_and(|s| s.rows.len() == 11));
    let o = cachesim::calibration::factors::FitOptions {
        weights: kernels::default_weights(),
        max_iters: 1000,
        ..Default::default()
    };
    let f = fit::fit(std::slice::from_ref(&t), &o).unwrap();
    assert!(f.objective < 1e-3, "{} {:?}", f.objective, f.efficiency);
    let e = f.efficiency;
    for (name, got, want) in [
        ("gemm_flops", e.gemm_flops, truth.gemm_flops),
        ("attn_flops", e.attn_flops, truth.attn_flops),
        ("mem_bw", e.mem_bw, truth.mem_bw),
        ("kernel_floor_s", e.kernel_floor_s, truth.kernel_floor_s),
        ("eager_layer_launch_s", e.eager_layer_launch_s, truth.eager_layer_launch_s),
    ] {
        // Within 3 %: attention, which only the long prefills constrain, is the loosest (2.1 %).
        assert!((got / want - 1.0).abs() < 0.03, "{name}: {got} vs {want}");
    }
    // Host overheads and collectives are not constrained by step rows: held at the start.
    assert_eq!((e.step_overhead_s, e.per_seq_overhead_s, e.comm_bw, e.comm_latency_s), (0.003, 15e-6, 0.7, 1e-5));
    assert_eq!(f.held.len(), 5, "{:?}", f.held);
    assert!(f.held.contains(&"sdpa_dispatch_s: no single attention-kernel row (no step runs it)".to_string()));
    // A factor named in `hold` keeps its start value and is said so; an unknown name is an error.
    let mut start = o.start;
    start.mem_bw = 0.5;
    let held = cachesim::calibration::factors::FitOptions { start, hold: vec!["mem_bw"], ..o.clone() };
    let f = fit::fit(std::slice::from_ref(&t), &held).unwrap();
    assert_eq!(f.efficiency.mem_bw, 0.5);
    assert!(!f.fitted.contains(&"mem_bw") && f.held.contains(&"mem_bw: held at the start's 0.500".to_string()));
    assert!(f.objective > 1e-3, "the truth's HBM efficiency is not 0.5: {}", f.objective);
    let bad = cachesim::calibration::factors::FitOptions { hold: vec!["gpu_count"], ..o };
    let e = fit::fit(std::slice::from_ref(&t), &bad).unwrap_err().to_string();
    assert!(e.contains("cannot hold `gpu_count`: not a factor"), "{e}");
}

/// The single GEMMs of the H200 profiling (Llama-3.1-8B and 70B-per-rank layers in BF16;
/// Llama-3.1-8B and DeepSeek-V3/R1 shapes in BF16 and FP8), held out from the kernel profile
/// fitted on whole 8B steps: measured median |error| 19.4 % over 348 BF16 rows (bound 20 %),
/// 10.2 % over 168 FP8 rows (bound 10.5 %). At decode sizes (M ≤ 64) the FP8 rows, DeepSeek's
/// MLA projections and experts among them, are within 5 %: the per-kernel floor holds for them
/// as for Llama's BF16 layers. Fitted on the GEMMs alone, the floor comes out within 20 % of the
/// one fitted on whole steps (22.7 against 20.1 µs), while the GEMM efficiency rises from 0.55
/// to 0.72: a whole prefill step also runs norms, rotary and activations the roofline does not
/// price, which its fitted GEMM efficiency absorbs; and attention is held, no GEMM row runs it.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn gemm_rows_hold_the_per_kernel_floor() {
    let Some(data) = common::data_dir() else { return };
    let p = h200_profile();
    let (set, rows) = priced_by_h200_profile("h200-gemms", &data);
    let abs = |f: &dyn Fn(&cachesim::calibration::profile::Residual, &kernels::StepRow) -> bool| {
        median(rows.iter().zip(&set.rows).filter(|(r, row)| f(r, row)).map(|(r, _)| r.error_pct.abs()).collect())
    };
    for (metric, n, bound) in [("gemm_bf16_us", 348, 20.0), ("gemm_fp8_us", 168, 10.5)] {
        assert_eq!(rows.iter().filter(|r| r.metric == metric).count(), n, "{metric}");
        let m = abs(&|r, _| r.metric == metric);
        assert!(m < bound, "{metric}: median |error| {m:.2} % (bound {bound} %)");
    }
    let small_fp8 =
        abs(&|r, row| r.metric == "gemm_fp8_us" && matches!(row.work, kernels::Work::Gemm { mkn, .. } if mkn[0] <= 64));
    assert!(small_fp8 < 5.0, "FP8 at M ≤ 64: {small_fp8:.2} %");
    assert!(!rows.iter().any(|r| r.case.contains("looped")), "the looped expert rows are left out");
    let f = fit_alone("h200-gemms", &data);
    let e = f.efficiency;
    assert!((e.kernel_floor_s / p.efficiency.kernel_floor_s - 1.0).abs() < 0.2, "{e:?}");
    assert!(e.gemm_flops > p.efficiency.gemm_flops + 0.1, "{e:?}");
    assert!(!f.fitted.contains(&"attn_flops"), "{:?}", f.held);
    assert!(f.held.contains(&"attn_flops: only GEMM rows, which run no attention".to_string()), "{:?}", f.held);
}

/// A user's own GPU from GEMM timings alone: a folder holding one GEMM case and its CSV (rows
/// priced by known factors) fits through the command line, the factors come back, and `run`
/// takes the profile.
#[test]
fn own_gemm_timings_fit_a_device_profile() {
    use cachesim::catalog::{gpu, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let truth = Efficiency { gemm_flops: 0.7, mem_bw: 0.9, kernel_floor_s: 25e-6, ..Efficiency::default() };
    let h100 = gpu("h100-sxm", None).unwrap();
    let mut csv = String::from("shape,dtype,M,K,N,time_us\n");
    for (name, k, n) in [("qkv", 4096, 6144), ("gate_up", 4096, 28672), ("down", 14336, 4096)] {
        for m in [1, 16, 64, 256, 1024, 4096, 16384] {
            for d in [Dtype::Bf16, Dtype::Fp8] {
                let t = cachesim::cost::gemm_s(&h100, &truth, [m, k, n], d) * 1e6;
                csv += &format!("{name},{},{m},{k},{n},{t}\n", if d == Dtype::Fp8 { "fp8" } else { "bf16" });
            }
        }
    }
    std::fs::write(dir.path().join("gemm.csv"), csv).unwrap();
    let case =
        "kind = \"steps\"\ncase = \"mine\"\ngpu = \"h100-sxm\"\nmodel = \"llama-3.1-8b\"\ngemm = [\"gemm.csv\"]\n";
    std::fs::write(dir.path().join("mine.toml"), case).unwrap();
    let d = dir.path().to_str().unwrap();
    let out_file = dir.path().join("p.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["calibrate", "--fit", "--cases", "mine", "--cases-dir", d, "--data", d, "--out"])
        .arg(&out_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("evaluations (kernel rows, no simulation)"), "{text}");
    let p = profile::read(&out_file).unwrap();
    assert_eq!((p.gpu.as_str(), p.engine.as_str()), ("h100-sxm", "kernels"));
    let e = p.efficiency;
    for (name, got, want) in [
        ("gemm_flops", e.gemm_flops, truth.gemm_flops),
        ("mem_bw", e.mem_bw, truth.mem_bw),
        ("kernel_floor_s", e.kernel_floor_s, truth.kernel_floor_s),
    ] {
        assert!((got / want - 1.0).abs() < 0.02, "{name}: {got} vs {want}");
    }
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["run", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--num-prompts", "20", "--calibration"])
        .arg(&out_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && text.contains("calibration p (") && text.contains("fitted on mine"), "{text}");
}

/// The single attention kernels of the H200 profiling (causal prefill over one sequence, one
/// query per sequence over a cache; GQA 32/8, 16/2 and 8/1 heads of 128), held out from the
/// profile fitted on whole 8B steps: that profile's attention efficiency (0.98, next to its
/// bound) prices them far too fast (measured median |error| 54.9 % over 27 prefill rows, 23.2 %
/// over 72 decode rows). Fitted alone they give 0.57 of the BF16 peak — what the data's README
/// measures (440–644 TFLOP/s from 4k tokens up) — with 21–26 µs of SDPA host dispatch before
/// each call: the whole-step fit's attention efficiency stands in for work the steps run that
/// the roofline does not price (docs/validation/kernels.md).
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn attention_kernels_show_what_the_step_fit_leans_on() {
    let Some(data) = common::data_dir() else { return };
    let (_, rows) = priced_by_h200_profile("h200-attention", &data);
    for (metric, n, lo) in [("attn_prefill_us", 27, 45.0), ("attn_decode_us", 72, 15.0)] {
        let e: Vec<f64> = rows.iter().filter(|r| r.metric == metric).map(|r| r.error_pct).collect();
        assert_eq!(e.len(), n, "{metric}");
        assert!(e.iter().filter(|e| **e < 0.0).count() * 4 > n * 3, "{metric}: mostly too fast");
        let m = median(e.iter().map(|e| e.abs()).collect());
        assert!(m > lo, "{metric}: median |error| {m:.2} %");
    }
    let f = fit_alone("h200-attention", &data);
    let e = f.efficiency;
    assert!((0.5..0.65).contains(&e.attn_flops), "{e:?}");
    assert!((15e-6..35e-6).contains(&e.sdpa_dispatch_s), "{e:?}");
    assert!(f.held.contains(&"gemm_flops: only attention-kernel rows, which run no GEMM".to_string()), "{:?}", f.held);
    let fitted = median(f.residuals.iter().map(|r| r.error_pct.abs()).collect());
    assert!(fitted < 10.0, "fitted alone: median |error| {fitted:.2} %");
}
