//! `calibrate --fit --any-engine`: one GPU's device factors fitted over cases of different
//! engine families. Two synthetic reports of one A100 and model, one served by vLLM and one by
//! SGLang, printed by cachesim itself with known factors, are fitted together: refused without
//! the flag, fitted with it (the profile's engine `any`, which no run picks on its own), and
//! still refused when the cases' GPUs differ.

use crate::common;

use common::{fails, ok, Load};
use std::path::Path;

/// (case, engine, GPU, prompts, input, output, request rate).
const LOADS: &[Load] = &[
    ("xv", "vllm", "a100-80gb", 200, 1024, 256, "inf"),
    ("xs", "sglang", "a100-80gb", 100, 512, 256, "8"),
    ("hv", "vllm", "h100-sxm", 100, 512, 128, "8"),
];

/// [`common::synthetic_cases`] of [`LOADS`], each case run with its own engine's flag.
fn cases(d: &Path) -> std::path::PathBuf {
    common::synthetic_cases(d, LOADS, |&(_, engine, ..)| format!("flags = [\"--engine\", \"{engine}\"]"))
}

/// The vLLM and the SGLang report of one A100: without `--any-engine` the fit names the two
/// families and stops; with it, one profile of engine `any` reproduces both reports (every
/// fitted metric within 2 %), records the flag in its command and a leave-one-out row per case
/// and metric, is used by `run --calibration FILE` for either engine, and matches no built-in
/// selection; it says how well the reports determine each factor. Cases on two GPUs stay refused
/// with the flag, and a prior of no width is refused.
#[test]
fn any_engine_fits_one_gpu_over_two_engines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = cases(d);
    let out = d.join("a100-any.toml");
    let base = ["calibrate", "--fit", "--cases", "xv,xs", "--cases-dir", cases.to_str().unwrap()];
    let err = fails(&[&base[..], &["--out", out.to_str().unwrap()]].concat());
    assert!(err.contains("a profile is for one GPU and engine family"), "{err}");
    assert!(err.contains("a100-80gb / sglang") && err.contains("a100-80gb / vllm"), "{err}");
    assert!(!out.exists());

    let text = ok(&[&base[..], &["--out", out.to_str().unwrap(), "--any-engine"]].concat());
    assert!(text.contains("(a100-80gb / any / llama-3.1-8b)"), "{text}");
    let p = cachesim::calibration::profile::read(&out).unwrap();
    assert_eq!((p.gpu.as_str(), p.engine.as_str()), ("a100-80gb", cachesim::calibration::profile::ANY_ENGINE));
    assert_eq!(p.engine, "any");
    assert_eq!(p.fit.cases, ["xs", "xv"]);
    assert!(p.fit.command.ends_with(" --any-engine"), "{}", p.fit.command);
    // (the SGLang layout prints a median E2E latency, the vLLM one does not)
    assert_eq!(p.fit.residuals.len(), 7, "{:?}", p.fit.residuals);
    for r in &p.fit.residuals {
        assert!(r.error_pct.abs() < 2.0, "{r:?}");
    }
    // Leave-one-out: each case predicted by the fit on the other, one row per metric.
    assert_eq!(p.fit.leave_one_out.len(), 7);
    for (case, rows) in [("xs", 4), ("xv", 3)] {
        assert_eq!(p.fit.leave_one_out.iter().filter(|r| r.case == case).count(), rows, "{case}");
    }
    assert!(p.fit.loo_median_abs_error_pct.is_some());
    // How well the two reports determine each fitted factor: said beside it and recorded.
    assert!(!p.fit.spread.is_empty() && p.fit.spread.keys().all(|k| p.fit.fitted.contains(k)), "{:?}", p.fit.spread);
    assert!(text.contains("at one standard error") || text.contains("not determined"), "{text}");
    // A prior of no width is refused by name, and no profile written.
    let flat = d.join("flat.toml");
    let err = fails(&[&base[..], &["--out", flat.to_str().unwrap(), "--any-engine", "--prior-sigma", "0"]].concat());
    assert!(err.contains("--prior-sigma") && !flat.exists(), "{err}");

    // Used when named, by either engine; never picked on its own.
    for engine in ["vllm", "sglang"] {
        let run = ok(&["run", "--gpu", "a100-80gb", "--engine", engine, "--calibration", out.to_str().unwrap()]);
        assert!(run.contains("calibration a100-any ("), "{run}");
        let e =
            if engine == "vllm" { cachesim::engine::EngineKind::Vllm } else { cachesim::engine::EngineKind::Sglang };
        let picked = cachesim::calibration::profile::builtin_for("a100-80gb", e, "llama-3.1-8b");
        assert_ne!(picked.map(|(_, p)| p.engine), Some("any".to_string()));
    }

    // One GPU still: the H100 case is refused beside the A100 ones, flag or not.
    let err = fails(&[
        "calibrate",
        "--fit",
        "--any-engine",
        "--cases",
        "xv,hv",
        "--cases-dir",
        cases.to_str().unwrap(),
        "--out",
        d.join("mixed.toml").to_str().unwrap(),
        "--no-loo",
    ]);
    assert!(err.contains("a profile is for one GPU") && err.contains("h100-sxm"), "{err}");
}
