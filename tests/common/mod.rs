//! Shared helpers for integration tests: where the real data lives, and running the binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shared data folder (`$CACHESIM_DATA`, else `../shared/data` beside the repository).
/// `None` (with the reason printed) when absent, unless `CACHESIM_REQUIRE_DATA=1`, which makes
/// a missing folder a failure.
pub fn data_dir() -> Option<PathBuf> {
    shared_dir("CACHESIM_DATA", "data", "traces")
}

/// The real benchmark reports (`$CACHESIM_CALIBRATION`, else `../shared/calibration` beside the
/// repository, holding `reports/`), absent or required like [`data_dir`].
pub fn calibration_dir() -> Option<PathBuf> {
    shared_dir("CACHESIM_CALIBRATION", "calibration", "reports")
}

/// One engine's golden schedules (`$CACHESIM_GOLDEN/<engine>`, else `../shared/golden/<engine>`
/// beside the repository), absent or required like [`data_dir`].
pub fn golden_dir(engine: &str) -> Option<PathBuf> {
    shared_dir("CACHESIM_GOLDEN", "golden", "").map(|d| d.join(engine)).filter(|d| {
        let found = d.join("schedules").is_dir();
        if !found && std::env::var("CACHESIM_REQUIRE_DATA").as_deref() == Ok("1") {
            panic!("CACHESIM_REQUIRE_DATA=1 but {} has no schedules/ folder", d.display());
        }
        found
    })
}

/// `$env`, else `../shared/<name>` beside the repository, when it holds `marker`; `None` with a
/// line on stderr (once per test binary) otherwise, a failure under `CACHESIM_REQUIRE_DATA=1`.
fn shared_dir(env: &str, name: &str, marker: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared").join(name));
    if dir.join(marker).is_dir() {
        return Some(dir);
    }
    if std::env::var("CACHESIM_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("CACHESIM_REQUIRE_DATA=1 but {} has no {marker}/ folder", dir.display());
    }
    // Written to the stderr handle itself, not through `eprintln!`, which the test harness
    // captures: the line shows in a plain `cargo test` summary, once per test binary.
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no real data (set {env}; looked in {}) — the tests that need it passed without checking anything",
            dir.display()
        );
    });
    None
}

/// Runs the cachesim binary with `args`.
pub fn cachesim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachesim")).args(args).output().expect("run cachesim")
}

/// Runs the binary, asserts success, returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = cachesim(args);
    assert!(out.status.success(), "cachesim {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Runs the binary, asserts failure, returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = cachesim(args);
    assert!(!out.status.success(), "cachesim {args:?} should have failed");
    String::from_utf8(out.stderr).expect("utf-8 output")
}

/// The README's shape-check and tuning workload, generated once into `dir`: 50 random prompts of
/// 200 tokens, 100 output tokens each (`cachesim gen random`).
pub fn random_50x200x100(dir: &Path) -> PathBuf {
    let p = dir.join("r50.jsonl");
    if !p.exists() {
        let s = p.to_str().unwrap();
        let args = ["--num-prompts", "50", "--input-len", "200", "--output-len", "100", "--range-ratio", "1.0"];
        ok(&[&["gen", "random"][..], &args, &["-o", s]].concat());
    }
    p
}

/// A workload of requests with distinct tokens (no shared prefixes): (prompt length, output
/// length) each, built through the trace reader as a user's trace would be.
pub fn distinct_requests(reqs: &[(u32, u32)]) -> cachesim::workload::Workload {
    let mut doc = String::new();
    for (i, &(prompt, out)) in reqs.iter().enumerate() {
        let base = 1_000 + i as u32 * 100_000;
        let ids: Vec<u32> = (base..base + prompt).collect();
        doc.push_str(&serde_json::json!({"prompt_ids": ids, "output_len": out}).to_string());
        doc.push('\n');
    }
    let opts = cachesim::trace::ReadOptions::default();
    let file = cachesim::trace::parse(Path::new("t.jsonl"), doc.as_bytes(), &opts).unwrap();
    cachesim::workload::build(file, &cachesim::workload::BuildOptions::default()).unwrap()
}
