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
            "skipped: no real data (set {env}; looked in {}) — the tests that need it are marked ignored (build.rs)",
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

/// Runs the binary with rayon on `threads` threads, asserts success, returns stdout's bytes
/// (for the determinism tests: the same bytes at any thread count).
pub fn ok_at_threads(args: &[&str], threads: &str) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(args)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .expect("run cachesim");
    assert!(out.status.success(), "cachesim {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Runs the binary, asserts failure, returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = cachesim(args);
    assert!(!out.status.success(), "cachesim {args:?} should have failed");
    String::from_utf8(out.stderr).expect("utf-8 output")
}

/// The shape-check and tuning workload of docs/guide/run.md and docs/guide/sweep.md, generated once into `dir`: 50 random prompts of
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

/// The step-time factors the synthetic calibration cases are printed with (a profile file).
pub const TRUTH: &str = r#"name = "truth"
gpu = "a100-80gb"
engine = "vllm"
models = ["llama-3.1-8b"]

[efficiency]
gemm_flops = 0.45
mem_bw = 0.65
attn_flops = 0.3
comm_bw = 0.7
comm_latency_s = 0.00001
step_overhead_s = 0.002
per_seq_overhead_s = 0.00002
"#;

/// A synthetic calibration load: (case, engine, GPU, prompts, input tokens, output tokens,
/// request rate).
pub type Load = (&'static str, &'static str, &'static str, u32, u32, u32, &'static str);

/// Writes `truth.toml` ([`TRUTH`]) into `d` and, for each load, its workload `w<case>.jsonl`, the
/// report cachesim prints for it with TRUTH's factors in its engine's client layout
/// (`reports/<case>.txt`) and a case file `cases/<case>.toml` whose `[deployment]` ends with the
/// lines `deployment` gives for the load; returns the cases folder.
pub fn synthetic_cases(d: &Path, loads: &[Load], deployment: impl Fn(&Load) -> String) -> PathBuf {
    for sub in ["cases", "reports"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let truth = d.join("truth.toml");
    std::fs::write(&truth, TRUTH).unwrap();
    for load in loads {
        let &(case, engine, gpu, n, input, output, rate) = load;
        let w = d.join(format!("w{case}.jsonl"));
        let (n_s, in_s, out_s) = (n.to_string(), input.to_string(), output.to_string());
        let gen = ["gen", "random", "--num-prompts", &n_s, "--input-len", &in_s, "--output-len", &out_s];
        ok(&[&gen[..], &["--range-ratio", "1.0", "-o", w.to_str().unwrap()]].concat());
        let (w, truth) = (w.to_str().unwrap(), truth.to_str().unwrap());
        let report = ok(&[
            "run",
            "--trace",
            w,
            "--engine",
            engine,
            "--gpu",
            gpu,
            "--model",
            "llama-3.1-8b",
            "--calibration",
            truth,
            "--request-rate",
            rate,
            "--report-style",
            engine,
        ]);
        assert!(report.contains("calibration truth ("), "{report}");
        std::fs::write(d.join(format!("reports/{case}.txt")), report).unwrap();
        let case_file = format!(
            "case = \"{case}\"\nreport = \"../reports/{case}.txt\"\nexpressible = true\n\n[deployment]\ngpu = \"{gpu}\"\n\
             model = \"llama-3.1-8b\"\nengine = \"{engine}\"\ntopology = \"1 GPU\"\n{}\n\n[workload]\n\
             dataset = \"random\"\nnum_prompts = {n}\ninput_len = {input}\noutput_len = {output}\nrequest_rate = \"{rate}\"\n",
            deployment(load)
        );
        std::fs::write(d.join(format!("cases/{case}.toml")), case_file).unwrap();
    }
    d.join("cases")
}

/// The files under `dir` (recursively, `target/` folders left out) whose name ends with one of
/// `exts`, sorted.
pub fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("target") {
                    todo.push(p);
                }
            } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The keys of a small dense model (Llama-3.1-8B's shape) for the catalog files tests write.
pub const MODEL_KEYS: [(&str, &str); 9] = [
    ("hidden", "4096"),
    ("layers", "32"),
    ("heads", "32"),
    ("kv_heads", "8"),
    ("head_dim", "128"),
    ("intermediate", "14336"),
    ("vocab", "128256"),
    ("params_b", "8.03"),
    ("max_context", "131072"),
];

/// A catalog file of one `[[head]]` table named `name` with `keys`, the value of key `i` (named
/// `k`) replaced by `set(i, k)` where it gives one.
pub fn catalog_table(
    head: &str,
    name: &str,
    keys: &[(&str, &str)],
    set: impl Fn(usize, &str) -> Option<String>,
) -> String {
    let mut t = format!("[[{head}]]\nname = \"{name}\"\n");
    for (i, (k, d)) in keys.iter().enumerate() {
        t.push_str(&format!("{k} = {}\n", set(i, k).unwrap_or_else(|| d.to_string())));
    }
    t
}

/// A number field of a golden schedule's JSON line (panics naming it when absent).
pub fn json_num(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// The request ids of a vLLM golden schedule's list (ids written as strings), sorted.
pub fn request_ids(v: &serde_json::Value) -> Vec<u32> {
    let mut out: Vec<u32> = v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().parse().unwrap()).collect();
    out.sort_unstable();
    out
}

/// `v` sorted (the golden schedules list preempted, sampled and finished requests by id).
pub fn sorted(v: &[u32]) -> Vec<u32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}
