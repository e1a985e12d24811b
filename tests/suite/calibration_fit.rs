//! Fitting, end to end: reports written by cachesim itself with known step-time factors are
//! read back as cases (or one report with the run flags) and fitted; the fit must reproduce the
//! reports and recover the factors the workloads constrain; `validate --leave-one-out` and
//! `--leave-group-out` refit the profiles without each case or group (by source, down the
//! fallback chain to the engine family's cases of the same model class, then the priors).

use crate::common;

use common::{fails, ok, Load};
use std::path::{Path, PathBuf};

/// The loads of the synthetic cases: (case, engine, GPU, prompts, input, output, request rate).
const LOADS: &[Load] = &[
    ("c0", "vllm", "a100-80gb", 40, 512, 128, "2"),
    ("c1", "vllm", "a100-80gb", 300, 1024, 256, "inf"),
    ("c2", "vllm", "a100-80gb", 100, 256, 512, "8"),
    ("h0", "vllm", "h100-sxm", 300, 1024, 256, "8"),
];

/// [`common::synthetic_cases`] of [`LOADS`], each case's profile `../<gpu>.toml` (fitted by the
/// tests).
fn synthetic_cases(d: &Path) -> PathBuf {
    common::synthetic_cases(d, LOADS, |&(_, _, gpu, ..)| format!("profile = \"../{gpu}.toml\""))
}

/// Fits the A100 profile on c0–c2 and the H100 one on h0 (`loo`: with the leave-one-out record).
fn fit_both(d: &Path, loo: bool) {
    let cases = d.join("cases");
    for (glob, gpu) in [("c*", "a100-80gb"), ("h0", "h100-sxm")] {
        let out = d.join(format!("{gpu}.toml"));
        let mut args = vec!["calibrate", "--fit", "--cases", glob, "--cases-dir", cases.to_str().unwrap()];
        args.extend(["--out", out.to_str().unwrap()]);
        if !loo {
            args.push("--no-loo");
        }
        ok(&args);
    }
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!((got / want - 1.0).abs() < tol, "{what}: fitted {got}, true {want}");
}

/// Three loads (light Poisson, offline, closed-ish high rate) simulated with the factors of
/// [`common::TRUTH`], printed as vLLM reports, fitted from the defaults: every fitted metric within 1 %,
/// GEMM and HBM efficiency within 5 %, attention within 15 %. The host overheads are not
/// asserted: vLLM v1's async scheduling hides host time under device time (a step takes the
/// larger), so these loads do not constrain them.
#[test]
fn synthetic_round_trip_recovers_the_factors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synthetic_cases(d);
    fit_both(d, false);
    let out = d.join("a100-80gb.toml");
    let p = cachesim::calibration::profile::read(&out).unwrap();
    assert_eq!(p.fit.cases, ["c0", "c1", "c2"]);
    assert_eq!((p.fit.max_iters, p.fit.unknown_hardware), (Some(150), Some(false)));
    assert_eq!(p.fit.residuals.len(), 9);
    for r in &p.fit.residuals {
        assert!(r.error_pct.abs() < 1.0, "{r:?}");
    }
    close(p.efficiency.gemm_flops, 0.45, 0.05, "gemm_flops");
    close(p.efficiency.mem_bw, 0.65, 0.05, "mem_bw");
    close(p.efficiency.attn_flops, 0.3, 0.15, "attn_flops");
    assert!(Path::new(&out).is_file());
}

/// Unknown hardware: a report printed with a known step law (seed-sweep-like: 50 × 200 → 100
/// tokens at 20 req/s, 64 sequences) is fitted with `--unknown-hardware` from the report alone;
/// the per-step, per-prefill-token and per-sequence terms come back within 5 %, and the fitted
/// law predicts another scheduler limit (16 sequences, the queueing cliff) within 2 % of the
/// truth's run. The profile records the law, no host overhead, and the widened objective.
#[test]
fn unknown_hardware_round_trip_recovers_the_step_law() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let truth = d.join("law.toml");
    std::fs::write(
        &truth,
        "name = \"law\"\ngpu = \"v100\"\nengine = \"vllm\"\nmodels = [\"llama-3.2-11b\"]\n\n[efficiency]\n\
         gemm_flops = 0.6\nmem_bw = 0.8\nattn_flops = 0.4\ncomm_bw = 0.7\ncomm_latency_s = 0.00001\n\
         step_overhead_s = 0.0\nper_seq_overhead_s = 0.0\n\n[efficiency.law]\nstep_s = 0.08\n\
         per_prefill_token_s = 0.0002\nper_decode_seq_s = 0.0005\nper_ctx_token_s = 0.0\n",
    )
    .unwrap();
    let w = d.join("w.jsonl");
    let gen = ["gen", "random", "--num-prompts", "50", "--input-len", "200", "--output-len", "100"];
    ok(&[&gen[..], &["--range-ratio", "1.0", "-o", w.to_str().unwrap()]].concat());
    let w = w.to_str().unwrap();
    let setup = ["--trace", w, "--gpu", "v100", "--model", "llama-3.2-11b", "--max-model-len", "4096"];
    let load = |seqs| ["--request-rate", "20", "--max-num-seqs", seqs, "--report-style", "vllm"];
    let run_with = |profile: &Path, seqs| -> serde_json::Value {
        let calibration = ["run", "--calibration", profile.to_str().unwrap(), "--json"];
        serde_json::from_str(&ok(&[&calibration[..], &setup, &load(seqs)].concat())).unwrap()
    };
    let printed = ok(&[&["run", "--calibration", truth.to_str().unwrap()][..], &setup, &load("64")].concat());
    assert!(printed.contains("Step time:      step law (80.0 ms per step + 200.00 µs per prefill token"), "{printed}");
    let report = d.join("report.txt");
    std::fs::write(&report, &printed).unwrap();
    let out = d.join("fitted.toml");
    let fit = ["calibrate", "--report", report.to_str().unwrap(), "-o", out.to_str().unwrap(), "--unknown-hardware"];
    let text = ok(&[&fit[..], &setup, &["--max-num-seqs", "64", "--max-iters", "300"]].concat());
    assert!(!text.contains("under-determined"), "{text}");
    let p = cachesim::calibration::profile::read(&out).unwrap();
    let law = p.efficiency.law.expect("an unknown-hardware fit states a step law");
    close(law.step_s, 0.08, 0.05, "step_s");
    close(law.per_prefill_token_s, 2e-4, 0.05, "per_prefill_token_s");
    close(law.per_decode_seq_s, 5e-4, 0.05, "per_decode_seq_s");
    assert_eq!((p.efficiency.step_overhead_s, p.efficiency.per_seq_overhead_s), (0.0, 0.0));
    assert_eq!(p.fit.fitted, ["step_s", "per_prefill_token_s", "per_decode_seq_s", "per_ctx_token_s"]);
    assert!(p.fit.weights.contains_key("p99_itl_ms") && p.fit.weights.contains_key("peak_output_throughput"));
    assert_eq!(p.fit.unknown_hardware, Some(true));
    // Held out: 16 sequences, where a third of the requests queue behind the first waves.
    let (want, got) = (run_with(&truth, "16"), run_with(&out, "16"));
    for m in ["output_throughput", "median_ttft_ms", "median_tpot_ms"] {
        let (w, g) = (want[m].as_f64().unwrap(), got[m].as_f64().unwrap());
        close(g, w, 0.02, m);
    }
    assert!(want["median_ttft_ms"].as_f64().unwrap() > 5000.0, "{}", want["median_ttft_ms"]);
}

/// The user's own run: one printed report (h0's: 300 × 1,024 → 256 tokens at 8 req/s on an
/// H100) and the run flags describing it; the fit reproduces the report's metrics within 1 %
/// and GEMM and HBM efficiency within 5 %; the profile records the command and residuals; the
/// table prints measured, before and after. Totals that differ from the rebuilt run's by
/// more than 1 % are an error naming the report and the totals, unless accepted (then the
/// profile's assumptions say so). A `--deployment` file merges with the flags as for `run`.
#[test]
fn own_report_round_trip_recovers_the_factors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synthetic_cases(d);
    let (report, w, out) = (d.join("reports/h0.txt"), d.join("wh0.jsonl"), d.join("own.toml"));
    let run = ["--trace", w.to_str().unwrap(), "--gpu", "h100-sxm", "--model", "llama-3.1-8b"];
    let text =
        ok(&[&["calibrate", "--report", report.to_str().unwrap(), "-o", out.to_str().unwrap()], &run[..]].concat());
    assert!(
        text.contains("metric                     measured       before   error %        after   error %\n"),
        "{text}"
    );
    let p = cachesim::calibration::profile::read(&out).unwrap();
    assert_eq!(
        (p.gpu.as_str(), p.engine.as_str(), p.models.as_slice()),
        ("h100-sxm", "vllm", &["llama-3.1-8b".to_string()][..])
    );
    assert_eq!(p.fit.cases, ["h0"]);
    assert!(
        p.fit.command.starts_with("cachesim calibrate --report ") && p.fit.command.contains(" --gpu h100-sxm"),
        "{}",
        p.fit.command
    );
    // vLLM's report prints no median E2E latency: three weighted metrics, fewer than the five
    // factors, which the output says.
    assert_eq!(p.fit.residuals.len(), 3);
    assert!(text.contains("\n  under-determined: 5 factors fitted on 3 measured figures, so "), "{text}");
    for r in &p.fit.residuals {
        assert!(r.error_pct.abs() < 1.0, "{r:?}");
        assert!(text.contains(&format!("{:<22} {:>12.2}", r.metric, r.measured)), "{text}");
    }
    close(p.efficiency.gemm_flops, 0.45, 0.05, "gemm_flops");
    close(p.efficiency.mem_bw, 0.65, 0.05, "mem_bw");
    assert!(p.fit.assumptions.is_empty());
    // 250 of the 300 prompts: the totals differ.
    let short = [
        &["calibrate", "--report", report.to_str().unwrap(), "-o", out.to_str().unwrap()],
        &run[..],
        &["--num-prompts", "250"],
    ]
    .concat();
    let err = fails(&short);
    assert!(
        err.contains(&format!("{}: the report's totals differ from the rebuilt run's by more than 1 %: completed 300 in the report, 250 in the rebuilt run;", report.display())),
        "{err}"
    );
    ok(&[&short[..], &["--accept-totals-mismatch"]].concat());
    let p = cachesim::calibration::profile::read(&out).unwrap();
    assert_eq!(p.fit.assumptions.len(), 1);
    assert!(
        p.fit.assumptions[0].contains("completed 300 in the report, 250 in the rebuilt run"),
        "{:?}",
        p.fit.assumptions
    );
    // A deployment file states the setup as for `run`; the command line's flags override it.
    let dep = d.join("dep.toml");
    std::fs::write(&dep, "name = \"d\"\nmodel = \"llama-3.1-8b\"\ngpu = \"a100-80gb\"\n").unwrap();
    let with = [
        &["calibrate", "--report", report.to_str().unwrap(), "-o", out.to_str().unwrap()][..],
        &["--deployment", dep.to_str().unwrap(), "--trace", w.to_str().unwrap()],
    ]
    .concat();
    ok(&[&with[..], &["--max-iters", "5"]].concat());
    assert_eq!(cachesim::calibration::profile::read(&out).unwrap().gpu, "a100-80gb");
    ok(&[&with[..], &["--max-iters", "5", "--gpu", "h100-sxm"]].concat());
    assert_eq!(cachesim::calibration::profile::read(&out).unwrap().gpu, "h100-sxm");
    // `--note`s survive a refit to the same file, each once, in order.
    ok(&[&with[..], &["--max-iters", "5", "--note", "first"]].concat());
    ok(&[&with[..], &["--max-iters", "5", "--note", "second", "--note", "first"]].concat());
    assert_eq!(cachesim::calibration::profile::read(&out).unwrap().fit.notes, ["first", "second"]);
    assert!(std::fs::read_to_string(&out).unwrap().contains("notes = [\"first\", \"second\"]"));
    // A file at -o that is not a profile is refused and left as it was.
    let other = d.join("notes.toml");
    std::fs::write(&other, "not a profile\n").unwrap();
    let with_other = [&with[..2], &[report.to_str().unwrap(), "-o", other.to_str().unwrap()], &with[5..]].concat();
    let err = fails(&[&with_other[..], &["--max-iters", "5"]].concat());
    assert!(err.contains(&format!("--out {} exists and is not a profile", other.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "not a profile\n");
}

/// `validate` with an environment (thread count) and the arguments after the case folder.
fn validate(d: &Path, threads: &str, extra: &[&str]) -> std::process::Output {
    let cases = d.join("cases");
    std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args([&["validate", "--cases-dir", cases.to_str().unwrap()], extra].concat())
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .unwrap()
}

/// Leave-one-out: c0–c2 are predicted by the A100 profile refitted on the other two — exactly
/// the profile's own leave-one-out record — whatever the thread count (byte-identical output);
/// h0's profile was fitted on h0 alone: its rows say "no training case left" and stay out of the
/// summary. `--cases` picks cases by name; a folder there is an error pointing to --cases-dir.
#[test]
fn leave_one_out_is_deterministic_and_matches_the_fit_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synthetic_cases(d);
    fit_both(d, true);
    let one = validate(d, "1", &["--leave-one-out", "--json"]);
    assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
    let two = validate(d, "2", &["--leave-one-out", "--json"]);
    assert_eq!(one.stdout, two.stdout, "leave-one-out differs between 1 and 2 threads");
    let v: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(v["mode"], "leave-one-out");
    let cases = v["cases"].as_array().unwrap();
    let refit: Vec<&str> = cases.iter().map(|c| c["refit"].as_str().unwrap()).collect();
    assert_eq!(refit, ["loo", "loo", "loo", "no training case left"]);
    assert_eq!(cases[0]["refit_on"], "a100-80gb refitted on c1, c2");
    let p = cachesim::calibration::profile::read(&d.join("a100-80gb.toml")).unwrap();
    assert_eq!(p.fit.leave_one_out.len(), 9);
    let rows = v["rows"].as_array().unwrap();
    for r in &p.fit.leave_one_out {
        let row = rows.iter().find(|x| x["case"] == r.case.as_str() && x["metric"] == r.metric.as_str()).unwrap();
        // Equal to the last bits but one: serde_json's float parser may round the last digit.
        let got = row["predicted"].as_f64().unwrap();
        assert!((got / r.predicted - 1.0).abs() < 1e-14, "{r:?}: {got}");
    }
    // h0's weighted metrics are in the table, not in the summary: 3 cases each.
    assert!(rows.iter().any(|r| r["case"] == "h0"));
    assert_eq!(v["held_out"]["median_ttft_ms"]["cases"], 3);
    let text = validate(d, "2", &["--leave-one-out"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("  (leave-one-out)\n") && text.contains("no training case left\n"), "{text}");
    // --cases selects by name; the others still train.
    let only = validate(d, "2", &["--leave-one-out", "--json", "--cases", "c1"]);
    let only: serde_json::Value = serde_json::from_slice(&only.stdout).unwrap();
    let only_rows = only["rows"].as_array().unwrap();
    assert!(only_rows.iter().all(|r| r["case"] == "c1") && !only_rows.is_empty());
    let c1 = |rows: &[serde_json::Value]| -> Vec<serde_json::Value> {
        rows.iter().filter(|r| r["case"] == "c1").cloned().collect()
    };
    assert_eq!(c1(only_rows), c1(rows));
    let err = String::from_utf8(validate(d, "2", &["--cases", d.join("cases").to_str().unwrap()]).stderr).unwrap();
    assert!(err.contains("--cases takes case names") && err.contains("--cases-dir"), "{err}");
}

/// Leave-group-out by GPU: every profile's cases share a GPU, so each GPU's cases are predicted
/// by the vLLM family's profile fitted on the other GPU's cases of the same model class (dense),
/// as fitted — fit on A100, predict H100, and back. The truth is the same share of peak on both
/// GPUs, so h0 comes back within 2 % and c0–c2 within 10 % (one H100 load constrains fewer
/// factors). By source all cases are one group ("seed runs"): no case outside it trains any, so
/// each is priced by the step-time priors alone — the `--uncalibrated` rows exactly — gated, and
/// no published point is among them.
#[test]
fn leave_gpu_out_fits_on_a100_and_predicts_h100() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synthetic_cases(d);
    fit_both(d, false);
    let out = validate(d, "2", &["--leave-group-out", "gpu", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "leave-group-out gpu");
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.iter().all(|c| c["refit"] == "group-out" && c["rung"] == "family"), "{cases:?}");
    assert_eq!(
        cases[3]["refit_on"],
        "the vllm family's factors as fitted in a100-80gb (on c0, c1, c2; outside its group, model class dense)"
    );
    assert_eq!(
        cases[0]["refit_on"],
        "the vllm family's factors as fitted in h100-sxm (on h0; outside its group, model class dense)"
    );
    assert_eq!(v["by_rung"]["family"], v["held_out"]);
    let weighted = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"];
    for r in v["rows"].as_array().unwrap().iter().filter(|r| weighted.contains(&r["metric"].as_str().unwrap())) {
        let bound = if r["case"] == "h0" { 2.0 } else { 10.0 };
        assert!(r["error_pct"].as_f64().unwrap().abs() < bound, "{r}");
    }
    let err =
        String::from_utf8(validate(d, "2", &["--leave-group-out", "gpu", "--max-held-out-error", "0.001"]).stderr)
            .unwrap();
    assert!(
        err.contains("leave-group-out gpu median |error| ") && err.contains("exceeds --max-held-out-error 0.001 %"),
        "{err}"
    );
    let src = validate(d, "2", &["--leave-group-out", "source", "--json"]);
    assert!(src.status.success(), "{}", String::from_utf8_lossy(&src.stderr));
    let v: serde_json::Value = serde_json::from_slice(&src.stdout).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.iter().all(|c| c["refit"] == "group-out (prior)" && c["rung"] == "prior"), "{cases:?}");
    assert_eq!(
        cases[0]["refit_on"],
        "no fitted factor, the step-time priors (as --uncalibrated): a100-80gb was fitted on its group and no \
         transferable vllm profile was fitted on a case of its model class (dense) outside its group"
    );
    let raw = validate(d, "2", &["--uncalibrated", "--json"]);
    let raw: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(v["rows"], raw["rows"]);
    assert_eq!(v["held_out"], raw["summary"]);
    assert!(v.get("held_out_published").is_none(), "seed runs only");
}

/// Appends a published point's source row naming `url` to a synthetic case file, so that
/// `--leave-group-out source` groups it by that page.
fn publish(case_file: &Path, url: &str) {
    let mut text = std::fs::read_to_string(case_file).unwrap();
    text += &format!(
        "\n[published]\npoint_id = \"x\"\nengine = \"x\"\nengine_version = \"x\"\ngpu = \"x\"\nnum_gpus = \"1\"\n\
         model = \"x\"\nweight_dtype = \"bf16\"\nmeasurement_kind = \"online Poisson\"\nthroughput_scope = \"x\"\n\
         source_url = \"{url}\"\nsource_locator = \"x\"\n"
    );
    std::fs::write(case_file, text).unwrap();
}

/// The chain by source: the vLLM cases c0–c2 (A100) on page A; h0 (vLLM, H100) and an SGLang
/// case s0 on H100 (the same load as h0, simulated with the same truth by the sglang
/// scheduler) on page B. c0–c2 and h0 are predicted by the vLLM family's factors fitted on the
/// other page (fit on A100, predict H100 and back); s0 has no SGLang case outside page B, and
/// the vLLM case beside it is another engine's: it falls to the step-time priors — its rows are
/// the `--uncalibrated` ones. All are gated (all published points); the per-rung summary splits
/// them; the output is the same at any thread count.
#[test]
fn leave_source_out_falls_back_to_the_priors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = synthetic_cases(d);
    let (w, truth) = (d.join("wh0.jsonl"), d.join("truth.toml"));
    let run = ["run", "--trace", w.to_str().unwrap(), "--gpu", "h100-sxm", "--model", "llama-3.1-8b"];
    let flags = ["--calibration", truth.to_str().unwrap(), "--request-rate", "8", "--report-style", "vllm"];
    let report = ok(&[&run[..], &flags[..], &["--engine", "sglang"]].concat());
    std::fs::write(d.join("reports/s0.txt"), report).unwrap();
    let s0 = std::fs::read_to_string(cases.join("h0.toml"))
        .unwrap()
        .replace("\"h0\"", "\"s0\"")
        .replace("reports/h0.txt", "reports/s0.txt")
        .replace("engine = \"vllm\"", "engine = \"sglang\"\nengine_version = \"sglang@0.5\"")
        .replace("../h100-sxm.toml", "../h100-sglang.toml");
    std::fs::write(cases.join("s0.toml"), s0).unwrap();
    for c in ["c0", "c1", "c2"] {
        publish(&cases.join(format!("{c}.toml")), "https://a.org/vllm/#table");
    }
    publish(&cases.join("h0.toml"), "https://b.org/bench");
    publish(&cases.join("s0.toml"), "https://b.org/bench#sglang");
    fit_both(d, false);
    let sg = d.join("h100-sglang.toml");
    ok(&[
        "calibrate",
        "--fit",
        "--cases",
        "s0",
        "--cases-dir",
        cases.to_str().unwrap(),
        "--no-loo",
        "--out",
        sg.to_str().unwrap(),
    ]);

    let one = validate(d, "1", &["--leave-group-out", "source", "--json"]);
    assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
    let two = validate(d, "2", &["--leave-group-out", "source", "--json"]);
    assert_eq!(one.stdout, two.stdout, "leave-group-out source differs between 1 and 2 threads");
    let v: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    let cases = v["cases"].as_array().unwrap();
    let refit: Vec<(&str, &str)> =
        cases.iter().map(|c| (c["refit"].as_str().unwrap(), c["rung"].as_str().unwrap())).collect();
    let (family, prior) = (("group-out", "family"), ("group-out (prior)", "prior"));
    assert_eq!(refit, [family, family, family, family, prior]);
    assert_eq!(
        cases[4]["refit_on"],
        "no fitted factor, the step-time priors (as --uncalibrated): h100-sglang was fitted on its group and no \
         transferable sglang profile was fitted on a case of its model class (dense) outside its group"
    );
    let raw = validate(d, "2", &["--uncalibrated", "--json", "--cases", "s0"]);
    let raw: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
    let s0: Vec<&serde_json::Value> = v["rows"].as_array().unwrap().iter().filter(|r| r["case"] == "s0").collect();
    assert_eq!(s0, raw["rows"].as_array().unwrap().iter().collect::<Vec<_>>());
    // Every one is gated, published, and in its rung's summary.
    assert_eq!(v["held_out"]["median_ttft_ms"]["cases"], 5);
    assert_eq!(v["held_out_published"], v["held_out"]);
    assert_eq!(v["by_rung"]["family"]["median_ttft_ms"]["cases"], 4);
    assert_eq!(v["by_rung"]["prior"], raw["summary"]);
    let out = validate(d, "2", &["--leave-group-out", "source"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for title in
        ["  (leave-group-out source, published points only)\n", "  (per rung, leave-group-out source, gated rows)\n"]
    {
        assert!(text.contains(title), "{text}");
    }
    // The vLLM cases come back from the other page's fit: within 2 % on H100, 10 % on A100.
    let weighted = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"];
    for r in v["rows"].as_array().unwrap().iter().filter(|r| weighted.contains(&r["metric"].as_str().unwrap())) {
        if r["case"] != "s0" {
            let bound = if r["case"] == "h0" { 2.0 } else { 10.0 };
            assert!(r["error_pct"].as_f64().unwrap().abs() < bound, "{r}");
        }
    }
}
