//! Fuzzing on the stable toolchain: structure-aware and byte-level mutation of seed traces in
//! every format (ShareGPT JSON and JSONL, Mooncake, Azure, BurstGPT, native, and gzip of each),
//! seeded with small inline records, the bundled samples in traces/ and — when the shared data
//! folder is present — the first records of the real traces, run through format detection, the
//! readers (strict and lenient), the workload builder and a short simulation; and random values
//! of the run's numeric flags (instance failures among them) through config resolution, arrivals
//! and a simulation. The oracle is "no panic": errors are fine, and a run that simulates conserves
//! its requests (completed + failed = sent). `CACHESIM_FUZZ_CASES` sets the cases per target (default 64;
//! CI runs more). Every input that once panicked is kept in tests/fuzz_corpus/ and replayed by
//! `corpus_never_panics`.

use crate::common;

use cachesim::config::{resolve, RunOptions};
use cachesim::engine::EngineKind;
use cachesim::trace::{self, Format, ReadOptions};
use cachesim::vllm_memory::MemoryOverrides;
use cachesim::workload::arrivals::{ArrivalOptions, Rate};
use cachesim::workload::{build, BuildOptions};
use proptest::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

fn cases() -> u32 {
    std::env::var("CACHESIM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

const SHAREGPT: &str = r#"[{"id":"a","conversations":[{"from":"human","value":"hello there"},{"from":"gpt","value":"hi, how can I help"},{"from":"human","value":"tell me more"},{"from":"gpt","value":"sure"}]},
{"id":"b","conversation":[{"from":"system","value":"be nice"},{"from":"user","value":"q"},{"from":"assistant","value":"a"}]}]"#;
const MOONCAKE: &str = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
{\"timestamp\": 27482, \"input_length\": 1100, \"output_length\": 52, \"hash_ids\": [1, 2, 3]}\n\
{\"timestamp\": 30000, \"input_length\": 12, \"output_length\": 1, \"hash_ids\": [9]}\n";
const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n\
2023-11-16 18:15:50.9900000,396,109\n2023-11-16 18:15:51.0000000,12,1\n";
const BURSTGPT: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n46,GPT-4,100,3,103,API log\n";
const NATIVE: &str = "{\"prompt\": \"hi there\", \"output_len\": 3, \"timestamp_ms\": 1.5, \"session\": \"s\"}\n\
{\"prompt\": \"and then\", \"output\": \"ok\", \"timestamp_ms\": 20, \"session\": \"s\"}\n\
{\"prompt_ids\": [1, 2, 3], \"output_ids\": [4, 5], \"timestamp_ms\": 30}\n";

/// The first `n` bytes of `bytes`, cut after a line break when there is one.
fn head(bytes: &[u8], n: usize) -> Vec<u8> {
    let cut = &bytes[..bytes.len().min(n)];
    match cut.iter().rposition(|&b| b == b'\n') {
        Some(i) if cut.len() < bytes.len() => cut[..=i].to_vec(),
        _ => cut.to_vec(),
    }
}

/// The first `n` bytes of a file, cut after a line break (without reading the rest).
fn file_head(path: &Path, n: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path).ok()?.take(n as u64 + 1).read_to_end(&mut buf).ok()?;
    Some(head(&buf, n))
}

/// Seed documents (read once): inline ones per format, the bundled samples, and heads of the
/// real traces.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(read_seeds)
}

fn read_seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> =
        [SHAREGPT, MOONCAKE, AZURE, BURSTGPT, NATIVE].iter().map(|s| s.as_bytes().to_vec()).collect();
    // The same ShareGPT records as JSON Lines.
    let records: Vec<serde_json::Value> = serde_json::from_str(SHAREGPT).unwrap();
    v.push(records.iter().map(|r| format!("{r}\n")).collect::<String>().into_bytes());
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["traces/gsp.jsonl", "traces/random.jsonl", "traces/sessions.jsonl"] {
        v.push(head(&std::fs::read(crate_dir.join(f)).unwrap(), 4096));
    }
    if let Some(data) = real_data() {
        for f in [
            "traces/mooncake/conversation_trace.jsonl",
            "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
            "traces/sharegpt/ShareGPT_V3_filtered_1000.json",
        ] {
            v.extend(file_head(&data.join(f), 8192));
        }
        let gz = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
        if let Some(bytes) = file_head(&gz, 1 << 20) {
            use std::io::Read;
            let mut text = Vec::new();
            let _ = flate2::read::MultiGzDecoder::new(&bytes[..]).take(16384).read_to_end(&mut text);
            v.push(head(&text, 8192));
        }
    }
    v
}

/// The shared data folder, without the skip message (the fuzz targets run either way).
fn real_data() -> Option<PathBuf> {
    let dir = std::env::var_os("CACHESIM_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    dir.join("traces").is_dir().then_some(dir)
}

const FORMATS: [Option<Format>; 6] = [
    None,
    Some(Format::Sharegpt),
    Some(Format::Mooncake),
    Some(Format::Azure),
    Some(Format::Burstgpt),
    Some(Format::Native),
];

/// Reads `bytes` as a trace every way (detected and forced formats, strict and lenient) and runs
/// what reads through the builder and, when small, a simulation. Panics are the only failure.
fn exercise(bytes: &[u8]) {
    for format in FORMATS {
        for lenient in [false, true] {
            let opts = ReadOptions { format, lenient, ..Default::default() };
            let Ok(file) = trace::parse(Path::new("fuzz.trace"), bytes, &opts) else { continue };
            simulate(file, lenient);
        }
    }
}

fn simulate(file: trace::TraceFile, lenient: bool) {
    let build_opts = BuildOptions {
        tokenizer: cachesim::tokenize::TokenizerKind::Chars4,
        lenient,
        trace_block_size: 16,
        ..BuildOptions::default()
    };
    let Ok(w) = build(file, &build_opts) else { return };
    if w.requests.len() > 64 || w.info.prompt_tokens + w.info.output_tokens > 1 << 20 {
        return;
    }
    let opts = RunOptions { num_gpu_blocks_override: Some(4096), max_model_len: Some(65_520), ..RunOptions::default() };
    let cfg = resolve(&opts).expect("default options resolve");
    if let Ok(out) = cachesim::sim::simulate(&w, &cfg, cachesim::sim::Keep::default()) {
        conserved(&out);
    }
}

/// No request is lost: every request sent either completed or failed.
fn conserved(out: &cachesim::sim::Outcome) {
    let (done, failed) = (out.summary.completed, out.summary.failed);
    assert_eq!(done + failed, out.sent as u64, "{done} completed + {failed} failed of {} sent", out.sent);
}

/// Reads `bytes` gzip-compressed from a file, as `--trace x.gz` would.
fn exercise_file(bytes: &[u8]) {
    let mut f = tempfile::Builder::new().suffix(".gz").tempfile().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    if let Ok(file) = trace::read(f.path(), &ReadOptions::default()) {
        simulate(file, false);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Tokens that make readers work hard: signs, huge and fractional numbers, JSON syntax, bytes
/// that are not UTF-8.
const TOKENS: [&str; 22] = [
    "-1",
    "0",
    "1e308",
    "1e13",
    "1e16",
    "-0",
    "NaN",
    "4294967296",
    "99999999999999999999",
    "1.5",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\n",
    "null",
    "\u{feff}",
    "\r\n",
    "\u{ff}\u{0}",
];

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Token(usize, usize),
    Delete(usize, usize),
    Copy(usize, usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Token(i, t)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), any::<usize>(), 1usize..256).prop_map(|(a, b, n)| Mutation::Copy(a, b, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(mut v: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let len = v.len().max(1);
        match m {
            Mutation::Set(i, b) if !v.is_empty() => v[i % len] = *b,
            Mutation::Insert(i, b) => {
                let at = i % (v.len() + 1);
                v.splice(at..at, b.iter().copied());
            }
            Mutation::Token(i, t) => {
                let at = i % (v.len() + 1);
                v.splice(at..at, TOKENS[*t].bytes());
            }
            Mutation::Delete(i, n) if !v.is_empty() => {
                let at = i % len;
                v.drain(at..(at + n).min(v.len()));
            }
            Mutation::Copy(a, b, n) if !v.is_empty() => {
                let from = a % len;
                let chunk: Vec<u8> = v[from..(from + n).min(v.len())].to_vec();
                let at = b % (v.len() + 1);
                v.splice(at..at, chunk);
            }
            Mutation::Truncate(i) => v.truncate(i % (v.len() + 1)),
            _ => {}
        }
    }
    v
}

/// A number as a trace might write it: plain, extreme, negative, fractional, quoted.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..5000).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| if x.is_finite() { format!("{x:e}") } else { "1e999".into() }),
        (0..TOKENS.len()).prop_map(|t| TOKENS[t].to_string()),
        (0u64..100).prop_map(|n| format!("\"{n}\"")),
    ]
}

fn mooncake_line() -> impl Strategy<Value = String> {
    (number(), number(), number(), proptest::collection::vec(number(), 0..5)).prop_map(|(t, i, o, ids)| {
        format!(
            "{{\"timestamp\": {t}, \"input_length\": {i}, \"output_length\": {o}, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        )
    })
}

fn native_line() -> impl Strategy<Value = String> {
    (number(), number(), proptest::collection::vec(number(), 0..5), proptest::option::of(number()), any::<bool>())
        .prop_map(|(t, o, ids, session, text)| {
            let prompt = if text {
                "\"prompt\": \"some text\"".to_string()
            } else {
                format!("\"prompt_ids\": [{}]", ids.join(","))
            };
            let session = session.map(|s| format!(", \"session\": {s}")).unwrap_or_default();
            format!("{{{prompt}, \"output_len\": {o}, \"timestamp_ms\": {t}{session}}}\n")
        })
}

fn csv_row(azure: bool) -> impl Strategy<Value = String> {
    (number(), number(), number(), 0u32..86400).prop_map(move |(a, b, c, secs)| {
        if azure {
            format!("2023-11-16 {:02}:{:02}:{:02}.5,{a},{b}\n", secs / 3600, secs / 60 % 60, secs % 60)
        } else {
            format!("{a},GPT-4,{b},{c},0,API log\n")
        }
    })
}

fn sharegpt_record() -> impl Strategy<Value = String> {
    let role = prop_oneof![Just("human"), Just("gpt"), Just("system"), Just("user"), Just("bot"), Just("")];
    proptest::collection::vec((role, ".{0,12}"), 0..5).prop_map(|msgs| {
        let m: Vec<String> = msgs
            .iter()
            .map(|(r, v)| format!("{{\"from\": \"{r}\", \"value\": {}}}", serde_json::Value::String(v.clone())))
            .collect();
        format!("{{\"id\": \"x\", \"conversations\": [{}]}}", m.join(", "))
    })
}

proptest! {
    #![proptest_config(config(cases()))]

    /// Byte-level mutations of every seed, every format.
    #[test]
    fn mutated_traces_never_panic(seed in any::<usize>(), ms in proptest::collection::vec(mutation(), 1..8)) {
        let seeds = seeds();
        exercise(&mutate(seeds[seed % seeds.len()].clone(), &ms));
    }

    /// Gzip: valid compression of mutated content, and mutated compressed bytes.
    #[test]
    fn mutated_gzip_never_panics(seed in any::<usize>(), inner in proptest::collection::vec(mutation(), 0..4),
                                 outer in proptest::collection::vec(mutation(), 0..3)) {
        let seeds = seeds();
        let content = mutate(seeds[seed % seeds.len()].clone(), &inner);
        exercise_file(&mutate(gzip(&content), &outer));
    }

    /// Mooncake records with extreme field values.
    #[test]
    fn mooncake_records_never_panic(lines in proptest::collection::vec(mooncake_line(), 1..6)) {
        exercise(lines.concat().as_bytes());
    }

    /// Native records with extreme field values.
    #[test]
    fn native_records_never_panic(lines in proptest::collection::vec(native_line(), 1..6)) {
        exercise(lines.concat().as_bytes());
    }

    /// Azure and BurstGPT rows with extreme field values.
    #[test]
    fn csv_rows_never_panic(azure in any::<bool>(), rows in proptest::collection::vec(csv_row(true), 1..6),
                            burst in proptest::collection::vec(csv_row(false), 1..6)) {
        let doc = if azure { format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{}", rows.concat()) }
                  else { format!("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n{}", burst.concat()) };
        exercise(doc.as_bytes());
    }

    /// ShareGPT records (array and lines) with odd roles and texts.
    #[test]
    fn sharegpt_records_never_panic(recs in proptest::collection::vec(sharegpt_record(), 1..4), array in any::<bool>()) {
        let doc = if array { format!("[{}]", recs.join(",")) } else { recs.join("\n") };
        exercise(doc.as_bytes());
    }
}

/// A value of a numeric flag, from the edges of its type and the plausible middle.
fn u32_value() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        3 => Just(None),
        1 => proptest::option::of(prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX), 1u32..100_000])
    ]
}
fn u64_value() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        3 => Just(None),
        1 => proptest::option::of(prop_oneof![Just(0u64), Just(1), Just(2), Just(u64::MAX), 1u64..10_000_000])
    ]
}
/// Mostly a plausible value in `lo..hi`, sometimes an edge of f64.
fn f64_in(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    prop_oneof![9 => lo..hi, 1 => f64_value()]
}

fn f64_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-1.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(1e-300),
        Just(1e300),
        0.0f64..2.0,
        0.0f64..1e4
    ]
}

fn engine() -> impl Strategy<Value = EngineKind> {
    prop_oneof![Just(EngineKind::Vllm), Just(EngineKind::VllmV0), Just(EngineKind::Sglang), Just(EngineKind::Lightllm)]
}

fn small_workload() -> cachesim::workload::Workload {
    let bytes = head(include_bytes!("../../traces/sessions.jsonl"), 40_000);
    let file = trace::parse(Path::new("sessions.jsonl"), &bytes, &ReadOptions::default()).unwrap();
    build(file, &BuildOptions::default()).unwrap()
}

proptest! {
    #![proptest_config(config(cases()))]

    /// The run's numeric settings at their edges (as the CLI admits them) through resolution,
    /// arrivals and a simulation of a few requests.
    #[test]
    fn numeric_settings_never_panic(o in settings()) {
        if let Ok(cfg) = resolve(&o) {
            if let Ok(out) = cachesim::sim::simulate(&small_workload(), &cfg, cachesim::sim::Keep::default()) {
                conserved(&out);
            }
        }
    }
}

/// Run options with every numeric setting drawn (boxed in groups: one flat tuple of two dozen
/// strategies overflows the test thread's stack in debug builds).
fn settings() -> impl Strategy<Value = RunOptions> {
    let limits = (engine(), u32_value(), u32_value(), u64_value(), u64_value(), u64_value())
        .prop_map(|(engine, seqs, tokens, blocks, total, model_len)| RunOptions {
            engine,
            max_num_seqs: seqs,
            max_num_batched_tokens: tokens,
            num_gpu_blocks_override: blocks,
            max_total_tokens: total,
            max_model_len: model_len,
            ..RunOptions::default()
        })
        .boxed();
    let memory = (
        prop_oneof![8 => Just(1u64), 2 => Just(2), 1 => Just(0), 1 => Just(3), 1 => Just(65)],
        f64_in(0.3, 1.0),
        f64_in(0.0, 20.0),
        f64_in(0.1, 3.0),
        proptest::option::of(f64_in(0.5, 0.95)),
    )
        .boxed();
    let chunks = (
        proptest::option::of(prop_oneof![Just(i64::MIN), Just(-1i64), Just(0), Just(1), Just(i64::MAX), 1i64..100_000]),
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX), 1u32..100_000],
        1u32..=512,
        1u32..=512,
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX)],
    )
        .boxed();
    let load = (
        proptest::option::of(prop_oneof![Just(Rate::Inf), (1e-300f64..1e6).prop_map(Rate::PerSecond)]),
        f64_in(0.1, 5.0),
        f64_in(1e-3, 10.0),
        proptest::option::of(0usize..12),
        proptest::option::of(1u32..8),
    )
        .boxed();
    // Instance failures on one to three instances: planned, random, a rolling restart, some or
    // none of them.
    let faults = (
        1u32..4,
        proptest::collection::vec((f64_in(0.0, 30.0), 0u32..4), 0..3),
        proptest::option::of(f64_in(0.5, 60.0)),
        proptest::option::of(f64_in(0.0, 20.0)),
        proptest::option::of(0u32..3),
        proptest::option::of(f64_in(0.0, 30.0)),
        proptest::option::of(f64_in(0.0, 10.0)),
    )
        .boxed();
    // An autoscaler (a third of the runs, replacing the failures): bounds, metric, target and
    // times at their edges.
    let scale = prop_oneof![
        2 => Just(None),
        1 => (
            (0u32..3, 1u32..6),
            0usize..5,
            f64_in(1e-4, 50.0),
            proptest::option::of(f64_in(1e-3, 20.0)),
            proptest::option::of(f64_in(0.0, 30.0)),
            proptest::option::of(f64_in(0.0, 30.0)),
            proptest::option::of(f64_in(0.0, 1.0)),
        )
            .prop_map(Some),
    ]
    .boxed();
    (limits, memory, chunks, load, faults, scale).prop_map(
        |(
            o,
            (tp, util, reserve, conservativeness, frac),
            (chunk, prefill, block_size, page_size, threshold),
            load,
            f,
            scale,
        )| {
            let (rate, burstiness, time_scale, num_prompts, max_concurrency) = load;
            let (instances, fail_at, mtbf_s, recovery_s, migration_limit, rolling_restart_s, drain_timeout_s) = f;
            let fail_at = fail_at
                .into_iter()
                .map(|(time_s, instance)| cachesim::cluster::faults::FailAt { time_s, instance })
                .collect();
            let mut faults = cachesim::cluster::faults::FaultOptions {
                fail_at,
                mtbf_s,
                recovery_s,
                migration_limit,
                rolling_restart_s,
                drain_timeout_s,
            };
            use cachesim::cluster::autoscale::{AutoscaleOptions, AutoscalePolicy, ScaleMetric};
            use cachesim::cluster::planner::{LoadPredictor, SlaOptions};
            let autoscale = match scale {
                None => AutoscaleOptions::default(),
                // The SLA planner: the same draws as its period, targets, predictor and budget.
                Some(((min, extra), 4, target, sync, _, cold, tolerance)) => {
                    faults = cachesim::cluster::faults::FaultOptions { drain_timeout_s, ..Default::default() };
                    AutoscaleOptions {
                        policy: Some(AutoscalePolicy::Sla),
                        cold_start_s: cold,
                        sla: SlaOptions {
                            interval_s: sync,
                            ttft_ms: Some(target * 100.0),
                            itl_ms: Some(target),
                            predictor: Some(if tolerance.is_some() {
                                LoadPredictor::Constant
                            } else {
                                LoadPredictor::Kalman
                            }),
                            max_gpu_budget: Some(min + extra),
                            min_endpoint: Some(min),
                        },
                        ..Default::default()
                    }
                }
                Some(((min, extra), metric, target, sync, window, cold, tolerance)) => {
                    faults = cachesim::cluster::faults::FaultOptions { drain_timeout_s, ..Default::default() };
                    AutoscaleOptions {
                        policy: Some(AutoscalePolicy::Hpa),
                        min_instances: Some(min),
                        max_instances: Some(min + extra),
                        metric: Some(
                            [ScaleMetric::Waiting, ScaleMetric::Running, ScaleMetric::InFlight, ScaleMetric::KvUsage]
                                [metric],
                        ),
                        target: Some(target),
                        sync_period_s: sync,
                        down_window_s: window,
                        cold_start_s: cold,
                        tolerance,
                        weights_load_gbps: None,
                        sla: Default::default(),
                    }
                }
            };
            RunOptions {
                cluster: cachesim::cluster::ClusterConfig { instances, ..Default::default() },
                faults,
                autoscale,
                tp,
                gpu_memory_utilization: Some(util),
                memory: MemoryOverrides { activation_peak_gib: Some(reserve), ..Default::default() },
                schedule_conservativeness: conservativeness,
                mem_fraction_static: frac,
                chunked_prefill_size: chunk,
                max_prefill_tokens: prefill,
                block_size,
                page_size,
                long_prefill_token_threshold: threshold,
                max_concurrency,
                arrivals: ArrivalOptions { rate, burstiness, time_scale, num_prompts, seed: 0, ..Default::default() },
                ..o
            }
        },
    )
}

/// A catalog number as a file may state it: the edges of TOML's integers and floats and the
/// plausible middle.
fn catalog_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("1e300".to_string()),
        Just("9223372036854775807".to_string()),
        Just("4294967296".to_string()),
        (1u64..100_000).prop_map(|v| v.to_string()),
    ]
}

/// GPU, model and network files with one number each drawn at its edges.
fn catalog_files() -> impl Strategy<Value = (usize, String, usize, String, usize, String)> {
    (0usize..9, catalog_value(), 0usize..5, catalog_value(), 0usize..3, catalog_value())
}

proptest! {
    #![proptest_config(config(cases()))]

    /// Catalog files (`--gpu-file`, `--model-file`, `--network-file`) with a number at its edge
    /// never panic (issue 28: `head_dim = 0` once divided by zero in `config::resolve`); what
    /// resolves is simulated.
    #[test]
    fn catalog_numbers_never_panic((m, mv, g, gv, n, nv) in catalog_files()) {
        catalog_case(&[(m, mv)], &[(g, gv)], &[(n, nv)]);
    }
}

/// Writes the catalog files with the keys at the given indices set, resolves a two-node run on
/// them and simulates what resolves.
fn catalog_case(model: &[(usize, String)], gpu: &[(usize, String)], net: &[(usize, String)]) {
    let table = |head: &str, keys: &[(&str, &str)], set: &[(usize, String)]| {
        common::catalog_table(head, "fuzz", keys, |i, _| set.iter().find(|(j, _)| *j == i).map(|(_, v)| v.clone()))
    };
    let model_keys = common::MODEL_KEYS;
    let gpu_keys = [
        ("memory_gb", "80.0"),
        ("mem_bw_gbps", "3350.0"),
        ("bf16_tflops", "989.0"),
        ("pcie_gbps", "128.0"),
        ("nvlink_gbps", "900.0"),
    ];
    let net_keys = [("nics", "8"), ("gbps", "400.0"), ("latency_us", "5.0")];
    let dir = std::env::temp_dir().join(format!("cachesim-fuzz-catalog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mf, gf, nf) = (dir.join("model.toml"), dir.join("gpu.toml"), dir.join("net.toml"));
    std::fs::write(&mf, table("model", &model_keys, model)).unwrap();
    std::fs::write(&gf, table("gpu", &gpu_keys, gpu)).unwrap();
    std::fs::write(&nf, table("network", &net_keys, net)).unwrap();
    let o = RunOptions {
        model_file: Some(mf),
        gpu_file: Some(gf),
        tp: 2,
        layout: cachesim::layout::LayoutOptions { nnodes: 2, network_file: Some(nf), ..Default::default() },
        max_model_len: Some(4096),
        ..RunOptions::default()
    };
    if let Ok(cfg) = resolve(&o) {
        if let Ok(out) = cachesim::sim::simulate(&small_workload(), &cfg, cachesim::sim::Keep::default()) {
            conserved(&out);
        }
    }
}

/// The catalog inputs that once panicked or ran impossibly (issue 28 §2), replayed.
#[test]
fn catalog_corpus_never_panics() {
    let v = |s: &str| s.to_string();
    for (m, g, n) in [
        (vec![(4, v("0"))], vec![], vec![]),   // head_dim = 0: a division by zero
        (vec![(2, v("0"))], vec![], vec![]),   // 0 heads: 0 KV bytes
        (vec![(7, v("-8"))], vec![], vec![]),  // a negative parameter count: free weights
        (vec![(1, v("0"))], vec![], vec![]),   // 0 layers
        (vec![(8, v("0"))], vec![], vec![]),   // max_context = 0
        (vec![], vec![(1, v("nan"))], vec![]), // a NaN bandwidth
        (vec![], vec![(0, v("0"))], vec![]),   // 0 memory
        (vec![], vec![], vec![(0, v("0"))]),   // 0 NICs
        (vec![(3, v("64"))], vec![], vec![]),  // more KV heads than heads
    ] {
        catalog_case(&m, &g, &n);
    }
}

/// Flag values as typed on the command line, through the binary (clap parsing included).
#[test]
fn numeric_flags_through_the_binary_never_panic() {
    const FLAGS: [&str; 14] = [
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--num-gpu-blocks-override",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--activation-peak-gib",
        "--request-rate",
        "--burstiness",
        "--time-scale",
        "--num-prompts",
        "--max-concurrency",
        "--tp",
        "--block-size",
        "--chunked-prefill-size",
    ];
    const VALUES: [&str; 12] =
        ["0", "1", "-1", "-0.5", "1e-300", "1e300", "nan", "inf", "18446744073709551616", "2.5", "", "x"];
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/gsp.jsonl");
    let trace = trace.to_str().unwrap();
    let n = (cases() as usize / 4).max(8);
    // Every flag meets every value in turn, then pairs repeat with a stride.
    for k in 0..n {
        let (f, v) = (FLAGS[k % FLAGS.len()], VALUES[(k * 5 + k / FLAGS.len()) % VALUES.len()]);
        let args = ["--trace", trace, "--num-prompts", "8", "--num-gpu-blocks-override", "2048", f, v];
        let out = common::cachesim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "cachesim {args:?} panicked:\n{err}");
        assert!(matches!(out.status.code(), Some(0..=2)), "cachesim {args:?}: {:?}\n{err}", out.status);
    }
}

/// The autoscaler's numeric flags at their edges, one at a time over a working autoscaled run
/// of the bundled sample at fifty times its load: a clear refusal or a run, never a panic.
#[test]
fn autoscale_flags_through_the_binary_never_panic() {
    const FLAGS: [&str; 9] = [
        "--min-instances",
        "--max-instances",
        "--instances",
        "--scale-target",
        "--hpa-sync-period-s",
        "--hpa-tolerance",
        "--scale-down-window-s",
        "--cold-start-s",
        "--drain-timeout-s",
    ];
    let base = [
        "--time-scale",
        "0.02",
        "--autoscale",
        "hpa",
        "--max-instances",
        "3",
        "--scale-metric",
        "in-flight",
        "--scale-target",
        "4",
        "--hpa-sync-period-s",
        "0.5",
        "--cold-start-s",
        "1",
    ];
    numbers_at_their_edges(&base, &FLAGS);
}

/// Each of `flags` with numbers at their edges, one at a time after `base` (half the values per
/// flag, alternating, unless the fuzz runs many cases): a clear refusal or a run, never a panic.
fn numbers_at_their_edges(base: &[&str], flags: &[&str]) {
    const VALUES: [&str; 10] = ["0", "1", "3", "-1", "1e-300", "1e300", "nan", "inf", "4294967296", "0.001"];
    for (k, f) in flags.iter().enumerate() {
        for v in VALUES.iter().skip(k % 2).step_by(if cases() > 64 { 1 } else { 2 }) {
            let mut args = base.to_vec();
            args.extend([*f, *v]);
            let out = common::cachesim(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "cachesim {args:?} panicked:\n{err}");
            assert!(matches!(out.status.code(), Some(0..=2)), "cachesim {args:?}: {:?}\n{err}", out.status);
        }
    }
}

/// The SLA planner's numeric flags at their edges, one at a time over a working planned run of
/// the bundled sample at fifty times its load: a clear refusal or a run, never a panic.
#[test]
fn sla_planner_flags_through_the_binary_never_panic() {
    const FLAGS: [&str; 6] =
        ["--throughput-adjustment-interval", "--ttft", "--itl", "--max-gpu-budget", "--min-endpoint", "--instances"];
    let base = [
        "--time-scale",
        "0.02",
        "--autoscale",
        "sla",
        "--max-gpu-budget",
        "3",
        "--throughput-adjustment-interval",
        "0.5",
        "--cold-start-s",
        "1",
    ];
    numbers_at_their_edges(&base, &FLAGS);
}

/// SGLang's priority and queue flags at their edges, one at a time over an SGLang run of the
/// bundled sample at ten times its load with two priority classes and priority scheduling on
/// (so preemptions, queue aborts and sentinel priorities meet): a clear refusal or a run.
#[test]
fn sglang_priority_flags_through_the_binary_never_panic() {
    const FLAGS: [&str; 3] =
        ["--priority-scheduling-preemption-threshold", "--default-priority-value", "--max-queued-requests"];
    const VALUES: [&str; 10] =
        ["0", "1", "-1", "9223372036854775807", "-9223372036854775808", "4294967296", "1e3", "nan", "", "x"];
    for (k, f) in FLAGS.iter().enumerate() {
        for v in VALUES.iter().skip(k % 2).step_by(if cases() > 64 { 1 } else { 2 }) {
            let args = [
                "--engine",
                "sglang",
                "--enable-priority-scheduling",
                "--priority-mix",
                "-5:0.3,20:0.7",
                "--max-running-requests",
                "4",
                "--time-scale",
                "0.1",
                f,
                v,
            ];
            let out = common::cachesim(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "cachesim {args:?} panicked:\n{err}");
            assert!(matches!(out.status.code(), Some(0..=2)), "cachesim {args:?}: {:?}\n{err}", out.status);
            // The run itself is valid: a plain value runs (so the edges meet a working run).
            if *v == "1" {
                assert!(out.status.success(), "cachesim {args:?}:\n{err}");
            }
        }
    }
}

/// Every input that once made cachesim panic, replayed (tests/fuzz_corpus/*).
#[test]
fn corpus_never_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        if path.extension().is_some_and(|e| e == "gz") {
            exercise_file(&bytes);
        } else {
            exercise(&bytes);
        }
        n += 1;
    }
    eprintln!("replayed {n} corpus inputs from tests/fuzz_corpus");
}
