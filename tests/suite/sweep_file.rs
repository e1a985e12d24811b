//! Sweep files and the seed's vLLM tuning table: `sweep --file examples/vllm-tuning.toml` runs
//! exactly the sweep its flags describe (the same CSV, byte for byte), a bad file is reported
//! with its file, line and key, and the predicted ranking of the real tuning runs
//! (`ttft_sweep.csv`) agrees with the measured one (Spearman's ρ per metric, computed here and by
//! `sweep --compare`).

use crate::common;

use cachesim::sweep::output::spearman;
use common::{calibration_dir, fails, ok};
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/vllm-tuning.toml")
}

/// The workload of the tuning runs: 50 requests of 200 input and 100 output tokens.
fn workload(dir: &Path) -> String {
    common::random_50x200x100(dir).to_str().unwrap().to_string()
}

/// The example file's sweep written out as flags.
const AS_FLAGS: [&str; 18] = [
    "--gpu",
    "v100",
    "--model",
    "llama-3.2-11b",
    "--engine-version",
    "vllm@0.18",
    "--max-model-len",
    "4096",
    "--calibration",
    "none",
    "--zip",
    "max-num-seqs=64,48,16",
    "--zip",
    "max-num-batched-tokens=6144,4096,2048",
    "--zip",
    "request-rate=20,30,15",
    "--rank-by",
    "output_throughput",
];

#[test]
fn the_example_file_is_the_sweep_its_flags_describe() {
    let dir = tempfile::tempdir().unwrap();
    let trace = workload(dir.path());
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    let file = example();
    let from_file = ok(&["sweep", "--trace", &trace, "--file", file.to_str().unwrap(), "--csv", a.to_str().unwrap()]);
    let mut args = vec!["sweep", "--trace", &trace, "--csv", b.to_str().unwrap()];
    args.extend(AS_FLAGS);
    let from_flags = ok(&args);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(from_file.replace(a.to_str().unwrap(), "X"), from_flags.replace(b.to_str().unwrap(), "X"));
    assert_eq!(std::fs::read_to_string(&a).unwrap().lines().count(), 4);
    // The command line wins over [run]: a flag given there replaces the file's value.
    let h100 = ok(&["sweep", "--trace", &trace, "--file", file.to_str().unwrap(), "--gpu", "h100-sxm", "--json"]);
    let v100 = ok(&["sweep", "--trace", &trace, "--file", file.to_str().unwrap(), "--json"]);
    assert_ne!(h100, v100);
    let mut h100_flags = vec!["sweep", "--trace", &trace, "--json"];
    h100_flags.extend(AS_FLAGS);
    h100_flags[5] = "h100-sxm";
    assert_eq!(h100, ok(&h100_flags));
}

#[test]
fn a_bad_sweep_file_names_its_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[run]\ngpu = \"v100\"\nmax-num-seq = 3\n", "line 3: field `run.max-num-seq`: not a flag of `cachesim run`"),
        ("[run]\n\nmax-num-seqs = \"x\"\n", "line 3: field `run.max-num-seqs`: invalid value 'x'"),
        (
            "[grid]\ngpu = [\"v100\"]\nturns = [\"first\"]\n",
            "line 3: field `grid.turns`: `turns` changes how the trace is read",
        ),
        ("[zip]\nmax-num-seqs = [1, 2]\nblock = \"16\"\n", "line 3: field `zip.block`: zipped lists differ in length"),
        ("rank-by = \"speed\"\n", "line 1: field `rank-by`: unknown metric `speed`"),
        ("[gird]\n", "line 1: unknown field `gird`"),
    ];
    for (k, (text, want)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("bad{k}.toml"));
        std::fs::write(&p, text).unwrap();
        let err = fails(&["sweep", "--num-prompts", "4", "--file", p.to_str().unwrap()]);
        assert!(err.contains(&format!("bad{k}.toml")) && err.contains(want), "{text:?}: {err}");
    }
    let p = dir.path().join("plan.toml");
    std::fs::write(&p, "[grid]\nmax-num-seqs = [4]\n").unwrap();
    assert!(fails(&["plan", "--num-prompts", "4", "--file", p.to_str().unwrap()]).contains("plan needs an SLO"));
    std::fs::write(&p, "slo = \"ttft_p99=50000\"\n[grid]\nmax-num-seqs = [4]\n").unwrap();
    let out = ok(&["plan", "--num-prompts", "8", "--max-rate", "4", "--file", p.to_str().unwrap()]);
    assert!(out.contains("SLO:            p99_ttft_ms <= 50000 ms"), "{out}");
}

/// The real tuning runs against the example sweep's predictions: Spearman's ρ of each table
/// metric over the runs. With three runs ρ is 1, 0.5, −0.5 or −1; the predictions rank all three
/// metrics as measured (ρ = 1).
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_tuning_table_ranks_as_the_real_runs() {
    let Some(cal) = calibration_dir() else { return };
    let mut real = csv::Reader::from_path(cal.join("ttft_sweep.csv")).unwrap();
    let h = real.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap();
    let real: Vec<csv::StringRecord> = real.records().map(Result::unwrap).collect();
    let dir = tempfile::tempdir().unwrap();
    let trace = workload(dir.path());
    let out = dir.path().join("p.csv");
    ok(&["sweep", "--trace", &trace, "--file", example().to_str().unwrap(), "--csv", out.to_str().unwrap()]);
    let mut pred = csv::Reader::from_path(&out).unwrap();
    let ph = pred.headers().unwrap().clone();
    let pcol = |name: &str| ph.iter().position(|c| c == name).unwrap();
    let pred: Vec<csv::StringRecord> = pred.records().map(Result::unwrap).collect();
    assert_eq!(pred.len(), real.len());
    for (p, r) in pred.iter().zip(&real) {
        for (knob, real_col) in [
            ("max-num-seqs", "max_num_seqs"),
            ("max-num-batched-tokens", "max_num_batched_tokens"),
            ("request-rate", "request_rate"),
        ] {
            assert_eq!(p[pcol(knob)], r[col(real_col)], "the example's rows follow ttft_sweep.csv");
        }
    }
    let num =
        |recs: &[csv::StringRecord], c: usize| -> Vec<f64> { recs.iter().map(|r| r[c].parse().unwrap()).collect() };
    for (metric, real_col) in [
        ("output_throughput", "output_tok_s"),
        ("median_ttft_ms", "median_ttft_ms"),
        ("request_throughput", "request_throughput"),
    ] {
        let rho = spearman(&num(&real, col(real_col)), &num(&pred, pcol(metric))).unwrap();
        assert_eq!(rho, 1.0, "{metric}: Spearman ρ {rho}");
    }
    // The tool says the same with --compare, pairing each real run with its point.
    let real_csv = cal.join("ttft_sweep.csv");
    let text = ok(&[
        "sweep",
        "--trace",
        &trace,
        "--file",
        example().to_str().unwrap(),
        "--compare",
        real_csv.to_str().unwrap(),
    ]);
    assert!(
        text.contains("Spearman's rho (rank agreement, real vs predicted): output_throughput 1.00, median_ttft_ms 1.00, request_throughput 1.00"),
        "{text}"
    );
    let plan7 = text.lines().find(|l| l.trim_start().starts_with("plan7")).unwrap();
    let cells: Vec<&str> = plan7.split_whitespace().collect();
    assert_eq!(cells[..3], ["plan7", "0", "324.45"]);
    assert_eq!(cells[3].parse::<f64>().unwrap(), (num(&pred, pcol("output_throughput"))[0] * 100.0).round() / 100.0);
}
