//! Differential test against SGLang 0.5.23's own scheduler: every golden schedule in
//! `../shared/golden/sglang/schedules` (written by SGLang's real `get_next_batch_to_run`,
//! `RadixCache` and token pools, see that folder's README) is replayed through the library with
//! the case's settings and the default bundle `sglang@0.5`, and each step must match: the
//! scheduled requests and tokens in batch order, tokens computed before, the hit at each
//! (re)admission, retractions, sampled and finished requests, free and evictable tokens after
//! scheduling, and each request's first-token and finish steps. The first divergence is printed.
//! Skipped (with a printed reason) when the golden folder is absent, unless
//! CACHESIM_REQUIRE_DATA=1.

use crate::common;

use cachesim::cache::hicache::WritePolicy;
use cachesim::cache::storage::{Eviction, PrefetchPolicy, StorageConfig, Store};
use cachesim::cache::swa::SwaLayout;
use cachesim::cache::{Policy, SglangPool};
use cachesim::config::{resolve, RunOptions};
use cachesim::cost::Affine;
use cachesim::engine::sglang::hicache::HiCacheOptions;
use cachesim::engine::sglang::mamba::{MambaOptions, StrategyFlag};
use cachesim::engine::sglang::priority::{PriorityOptions, RetractionPolicy};
use cachesim::engine::{EngineKind, EngineVersion, Rules, SchedulePolicy};
use cachesim::sim::{self, Keep, ScheduledStep, SimConfig};
use cachesim::trace::{self, ReadOptions};
use cachesim::workload::{build, BuildOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// Wall-clock seconds a replay may take (each takes well under one in a release build).
const REPLAY_LIMIT_S: u64 = 120;

/// Lines of a JSON Lines file, gzipped or not.
fn json_lines(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut s).expect("gzip");
        s
    } else {
        String::from_utf8(bytes).expect("utf-8")
    };
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect("json line")).collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| u(x) as u32).collect()
}

/// One step as both sides can state it.
#[derive(Debug, PartialEq)]
struct Step {
    /// (request, tokens, computed before, hit when (re)admitted here).
    items: Vec<(u32, u32, u32, Option<u32>)>,
    retracted: Vec<u32>,
    sampled: Vec<u32>,
    finished: Vec<u32>,
    free_after_schedule: u64,
    evictable_after_schedule: u64,
    /// Under HiCache, the host pool's free tokens after scheduling.
    host_free_after_schedule: Option<u64>,
    /// Under a window pool (a model with sliding-window layers), its free and evictable
    /// tokens after scheduling.
    window_after_schedule: Option<(u64, u64)>,
    /// Under a state pool (a model with linear-attention layers), its free slots and its
    /// evictable states after scheduling.
    states_after_schedule: Option<(u64, u64)>,
    waiting: u32,
}

fn golden_step(v: &Value) -> Step {
    let rows = v["scheduled"].as_array().expect("scheduled");
    // A batch of 1-token rows is a decode batch in cachesim's timeline, whether SGLang ran it as
    // a decode or as an extend of last chunks and prompts cached up to their last token.
    let all_single = rows.iter().all(|x| u(&x["tokens"]) == 1);
    let items = rows
        .iter()
        .map(|x| {
            let tokens = u(&x["tokens"]) as u32;
            match x["kind"].as_str() {
                Some("running") => (u(&x["id"]) as u32, tokens, u32::MAX, None),
                Some("chunk") if all_single => (u(&x["id"]) as u32, tokens, u32::MAX, None),
                Some("new") => {
                    // Under HiCache the hit at admission is the device's and what was loaded.
                    let hit = u(&x["hit_tokens"]) + x["host_hit_tokens"].as_u64().unwrap_or(0);
                    (u(&x["id"]) as u32, tokens, u(&x["computed_before"]) as u32, Some(hit as u32))
                }
                _ => (u(&x["id"]) as u32, tokens, u(&x["computed_before"]) as u32, None),
            }
        })
        .collect();
    // cachesim's schedule lists a retraction and a priority preemption alike (both re-queue).
    let mut retracted = ids(&v["retracted"]);
    if !v["preempted"].is_null() {
        retracted.extend(ids(&v["preempted"]));
    }
    retracted.sort_unstable();
    Step {
        items,
        retracted,
        sampled: ids(&v["sampled"]),
        finished: ids(&v["finished"]),
        // The window schedules (tests/golden/sglang_swa) give each pool's.
        free_after_schedule: u(v.get("full_free_tokens_after_schedule").unwrap_or(&v["free_tokens_after_schedule"])),
        evictable_after_schedule: u(v
            .get("full_evictable_tokens_after_schedule")
            .unwrap_or(&v["evictable_tokens_after_schedule"])),
        host_free_after_schedule: v["host_free_tokens_after_schedule"].as_u64(),
        window_after_schedule: v["swa_free_tokens_after_schedule"]
            .as_u64()
            .map(|f| (f, u(&v["swa_evictable_tokens_after_schedule"]))),
        states_after_schedule: v["mamba_free_slots_after_schedule"]
            .as_u64()
            .map(|f| (f, u(&v["mamba_evictable_states_after_schedule"]))),
        waiting: u(&v["waiting_after_schedule"]) as u32,
    }
}

/// cachesim's steps in the golden form: a decode item (`running`) carries no computed-before
/// (the golden file has none); an item of a request not admitted before it is an admission.
fn our_steps(schedule: &[ScheduledStep], pool: u64, host_pool: Option<u64>) -> Vec<Step> {
    let mut active: HashMap<u32, ()> = HashMap::new();
    schedule
        .iter()
        .map(|s| {
            for id in &s.preempted {
                active.remove(id);
            }
            let items = s
                .items
                .iter()
                .map(|&(id, k, before)| {
                    let admitted_here = active.insert(id, ()).is_none();
                    let decode = !admitted_here && k == 1 && s.items.iter().all(|&(_, k, _)| k == 1);
                    if decode {
                        (id, k, u32::MAX, None)
                    } else {
                        (id, k, before, admitted_here.then_some(before))
                    }
                })
                .collect();
            for id in &s.finished {
                active.remove(id);
            }
            let used = s.usage_after_schedule.used_tokens;
            Step {
                items,
                retracted: s.preempted.clone(),
                sampled: s.sampled.clone(),
                finished: s.finished.clone(),
                free_after_schedule: pool - used,
                evictable_after_schedule: s.usage_after_schedule.evictable_tokens,
                host_free_after_schedule: host_pool.zip(s.host_tokens_after_schedule).map(|(p, h)| p - h),
                window_after_schedule: s
                    .window_after_schedule
                    .map(|w| (w.capacity_tokens.expect("a bounded window pool") - w.used_tokens, w.evictable_tokens)),
                states_after_schedule: s
                    .states_after_schedule
                    .map(|m| (m.capacity_tokens.expect("a bounded state pool") - m.used_tokens, m.evictable_tokens)),
                waiting: s.waiting,
            }
        })
        .collect()
}

/// Replays one golden file; returns a description of the first divergence, if any.
fn replay_case(
    dir: &Path,
    file: &str,
    trace_path: &Path,
    version: EngineVersion,
    rules: Option<Rules>,
) -> Option<String> {
    replay(&dir.join("schedules").join(file), trace_path, version, rules)
}

/// Replays the golden schedule at `path` over the trace at `trace_path`; each request is sent
/// with `ignore_eos` as the schedule's config line says (absent: with it).
fn replay(path: &Path, trace_path: &Path, version: EngineVersion, rules: Option<Rules>) -> Option<String> {
    replay_on(path, trace_path, version, rules, None).0
}

/// [`replay`] with the storage tier on `store` when given (another run's), which comes back with
/// the writes of this one landed.
fn replay_on(
    path: &Path,
    trace_path: &Path,
    version: EngineVersion,
    rules: Option<Rules>,
    store: Option<Store>,
) -> (Option<String>, Option<Store>) {
    let file = &path.file_name().expect("a file").to_string_lossy().into_owned();
    let lines = json_lines(path);
    let config = &lines[0];
    assert_eq!(config["type"], "config");
    let pool = u(&config["max_total_tokens"]);
    let policy = match config["schedule_policy"].as_str().expect("policy") {
        p if p.ends_with("FCFS") => SchedulePolicy::Fcfs,
        p if p.ends_with("LPM") => SchedulePolicy::Lpm,
        p if p.ends_with("LOF") => SchedulePolicy::Lof,
        p => panic!("{file}: policy {p} not covered"),
    };
    // The priority schedules (tests/golden/sglang-priority) state the priority flags.
    let flag = |k: &str| config[k].as_bool().unwrap_or(false);
    let sglang_priority = PriorityOptions {
        enable: flag("enable_priority_scheduling"),
        low_values_first: flag("schedule_low_priority_values_first"),
        preemption_threshold: config["priority_scheduling_preemption_threshold"].as_i64(),
        disable_preemption: flag("disable_priority_preemption"),
        retraction: match config["retraction_policy"].as_str() {
            None => None,
            Some("length") => Some(RetractionPolicy::Length),
            Some("priority") => Some(RetractionPolicy::Priority),
            Some(p) => panic!("{file}: retraction policy {p}"),
        },
        ..Default::default()
    };
    // The HiCache schedules (tests/golden/sglang_hicache) state the tier's settings.
    let hicache_on = flag("enable_hierarchical_cache");
    let hicache = HiCacheOptions {
        enable: hicache_on,
        write_policy: config["hicache_write_policy"].as_str().filter(|_| hicache_on).map(|p| match p {
            "write_through" => WritePolicy::WriteThrough,
            "write_through_selective" => WritePolicy::WriteThroughSelective,
            "write_back" => WritePolicy::WriteBack,
            p => panic!("{file}: write policy {p}"),
        }),
        ..Default::default()
    };
    let opts = RunOptions {
        hicache,
        engine: EngineKind::Sglang,
        engine_version: Some(version),
        max_total_tokens: Some(pool),
        max_running_requests: Some(u(&config["max_running_requests"]) as u32),
        chunked_prefill_size: Some(u(&config["chunked_prefill_size"]) as i64),
        max_prefill_tokens: u(&config["max_prefill_tokens"]) as u32,
        schedule_policy: policy,
        schedule_conservativeness: config["schedule_conservativeness"].as_f64().expect("conservativeness"),
        page_size: u(&config["page_size"]) as u32,
        overlap: Some(false),
        policy: flag("disable_radix_cache").then_some(Policy::None),
        sglang_priority: if sglang_priority.enable { sglang_priority } else { PriorityOptions::default() },
        ..Default::default()
    };
    // The state-pool schedules (tests/golden/sglang_mamba) state the pool and its strategy: a
    // model with linear-attention layers (Qwen3-Next, on 4 GPUs to hold it), the context the
    // driver gave SGLang.
    let mut opts = opts;
    if flag("is_hybrid_ssm") {
        opts.model = "qwen3-next-80b-a3b".into();
        opts.tp = 4;
        opts.max_model_len = Some(u(&config["context_len"]));
        opts.sglang_mamba = MambaOptions {
            strategy: Some(match config["mamba_radix_cache_strategy"].as_str() {
                Some("no_buffer") => StrategyFlag::NoBuffer,
                Some("extra_buffer") => StrategyFlag::ExtraBuffer,
                s => panic!("{file}: strategy {s:?}"),
            }),
            max_cache_size: Some(u(&config["mamba_cache_size"]) as i64),
            ..Default::default()
        };
    }
    let mut cfg = resolve(&opts).expect("resolve");
    if flag("is_hybrid_ssm") {
        let m = cfg.cache.states().expect("a state pool");
        assert_eq!(m.slots, u(&config["mamba_cache_size"]), "{file}: state slots");
        assert_eq!(m.track_interval as u64, u(&config["mamba_track_interval"]), "{file}: track interval");
        assert_eq!(m.cache_chunk as u64, u(&config["mamba_cache_chunk_size"]), "{file}: cache chunk");
        assert_eq!(cfg.engine.max_num_seqs as u64, u(&config["max_running_requests"]), "{file}: request cap");
    }
    if let Some(r) = rules {
        cfg.engine.rules = r;
    }
    // The window schedules (tests/golden/sglang_swa) state the window and its pool.
    if flag("is_hybrid_swa") {
        cfg.cache.sglang_pool = Some(SglangPool::Window(SwaLayout {
            window: u(&config["swa_retain_window"]) as u32,
            tokens: u(&config["swa_pool_tokens"]),
            sharing: !flag("disable_radix_cache"),
        }));
        cfg.cache.page_size = Some(u(&config["page_size"]) as u32);
    }
    if let Some(h) = cfg.engine.hicache.as_mut() {
        assert_eq!(config["radix_eviction_policy"], "lru", "{file}: eviction policy");
        h.host_tokens = u(&config["host_pool_tokens"]);
        // Copies that take no time, acknowledged at the next step (the schedules' copy lag 0).
        assert_eq!(config["copy_lag_steps"].as_u64(), Some(0), "{file}: a copy lag is not a bandwidth");
        h.link_bytes_per_s = f64::INFINITY;
    }
    // The storage schedules (tests/golden/sglang_hicache_storage) state the storage tier's.
    if config["hicache_storage_backend"].as_str() == Some("file") {
        cfg.engine.hicache_storage = Some(storage_config(file, config));
    }
    assert_eq!(cfg.kv_capacity_tokens, pool, "{file}: pool");
    let ignore_eos = config["ignore_eos"].as_bool().unwrap_or(true);
    let w = build(
        trace::read(trace_path, &ReadOptions::default()).expect("trace"),
        &BuildOptions { ignore_eos, ..BuildOptions::default() },
    )
    .expect("workload");
    assert_eq!(w.requests.len() as u64, u(&config["num_requests"]), "{file}: requests");
    // A trace with times (the priority schedules): every step takes exactly 1 s, so a request
    // sent at (k − 0.5) s is queued when step k is scheduled, as the driver queues it before step
    // k. Without times every request arrives before step 0 and the step times do not matter.
    let timed = w.requests.iter().any(|r| r.arrival_ms.is_some());
    let sends: Vec<(u32, f64)> =
        w.requests.iter().enumerate().map(|(i, r)| (i as u32, r.arrival_ms.unwrap_or(0.0) / 1e3)).collect();
    let sim_cfg = SimConfig {
        engine: cfg.engine,
        cache: cfg.cache,
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    let cost = if timed {
        Affine { base_s: 1.0, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 }
    } else {
        Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 }
    };
    // The run in a thread of its own, so that a replay that never ends (an engine waking at one
    // instant forever) fails with a message instead of hanging the suite; such a thread is left
    // to the process's exit.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let keep = Keep { schedule: true, ..Default::default() };
        let _ = tx.send(match store {
            Some(mut st) => {
                let fleet = sim::Fleet { store: Some(&mut st), ..Default::default() };
                (sim::run_in(&w, &sends, &sim_cfg, &cost, keep, fleet), Some(st))
            }
            None => (sim::run(&w, &sends, &sim_cfg, &cost, keep), None),
        });
    });
    let (r, store) = match rx.recv_timeout(Duration::from_secs(REPLAY_LIMIT_S)) {
        Ok(r) => r,
        Err(RecvTimeoutError::Timeout) => {
            return (Some(format!("{file}: the replay did not end within {REPLAY_LIMIT_S} s (a hang)")), None)
        }
        Err(RecvTimeoutError::Disconnected) => panic!("{file}: the replay panicked"),
    };
    let host = cfg.engine.hicache.map(|h| h.host_tokens);
    (replay_check(file, &lines, &r, pool, host, rules.is_none()), store)
}

/// Where the run `r` first leaves the golden schedule `lines` (of `file`), if anywhere; when
/// `say`, what was identical.
fn replay_check(
    file: &str,
    lines: &[Value],
    r: &sim::SimResult,
    pool: u64,
    host: Option<u64>,
    say: bool,
) -> Option<String> {
    let ours = our_steps(&r.schedule, pool, host);
    let golden: Vec<&Value> = lines.iter().filter(|l| l["type"] == "step").collect();
    for (k, g) in golden.iter().enumerate() {
        assert_eq!(u(&g["step"]) as usize, k, "{file}: golden steps are numbered densely");
        let want = golden_step(g);
        let Some(got) = ours.get(k) else {
            return Some(format!("{file}: cachesim ends after {} steps, SGLang has {}", ours.len(), golden.len()));
        };
        if *got != want {
            let ctx = if k > 0 {
                format!("\n  previous step (SGLang): {:?}", golden_step(golden[k - 1]))
            } else {
                String::new()
            };
            return Some(format!(
                "{file}: first divergence at step {k} ({} steps in SGLang, {} in cachesim)\n  SGLang:   {want:?}\n  cachesim: {got:?}{ctx}",
                golden.len(),
                ours.len()
            ));
        }
    }
    if ours.len() != golden.len() {
        return Some(format!("{file}: cachesim has {} steps, SGLang {}", ours.len(), golden.len()));
    }
    // Per request: first-token and finish steps, retractions, hits at each admission.
    let mut first = HashMap::new();
    let mut finish = HashMap::new();
    let mut retractions: HashMap<u32, u64> = HashMap::new();
    let mut hits: HashMap<u32, Vec<u64>> = HashMap::new();
    for (k, s) in ours.iter().enumerate() {
        for &id in &s.sampled {
            first.entry(id).or_insert(k as u64);
        }
        for &id in &s.finished {
            finish.insert(id, k as u64);
        }
        for &id in &s.retracted {
            *retractions.entry(id).or_default() += 1;
        }
        for &(id, _, _, hit) in &s.items {
            if let Some(h) = hit {
                hits.entry(id).or_default().push(h as u64);
            }
        }
    }
    for q in lines.iter().filter(|l| l["type"] == "request") {
        let id = u(&q["id"]) as u32;
        let mut admissions: Vec<u64> = q["hit_tokens_each_admission"].as_array().expect("hits").iter().map(u).collect();
        if let Some(loaded) = q["host_hit_tokens_each_admission"].as_array() {
            for (a, l) in admissions.iter_mut().zip(loaded) {
                *a += u(l);
            }
        }
        let want = (
            u(&q["first_token_step"]),
            u(&q["finish_step"]),
            u(&q["retractions"]) + q["preemptions"].as_u64().unwrap_or(0),
            admissions,
        );
        let got = (
            first.get(&id).copied().unwrap_or(u64::MAX),
            finish.get(&id).copied().unwrap_or(u64::MAX),
            retractions.get(&id).copied().unwrap_or(0),
            hits.get(&id).cloned().unwrap_or_default(),
        );
        if got != want {
            return Some(format!(
                "{file}: request {id} (first token, finish, retractions, hits): SGLang {want:?}, cachesim {got:?}"
            ));
        }
    }
    let summary = lines.iter().find(|l| l["type"] == "summary").expect("summary line");
    assert_eq!(r.records.len() as u64, u(&summary["finished"]), "{file}: finished requests");
    if say {
        println!(
            "{file}: {} steps identical ({} requests, {} retractions, {} priority preemptions)",
            ours.len(),
            r.records.len(),
            u(&summary["retractions"]),
            summary["preemptions"].as_u64().unwrap_or(0)
        );
    }
    None
}

/// The storage tier a storage schedule's config line states, with I/O that takes no time (the
/// schedules' lag 0: an item queued during a step is handled at that step's I/O point).
fn storage_config(file: &str, config: &Value) -> StorageConfig {
    let policy = match config["hicache_storage_prefetch_policy"].as_str() {
        Some("best_effort") => PrefetchPolicy::BestEffort,
        Some("wait_complete") => PrefetchPolicy::WaitComplete,
        Some("timeout") => PrefetchPolicy::Timeout,
        p => panic!("{file}: prefetch policy {p:?}"),
    };
    // `--*-lag-steps L`: an item queued during step k is handled at step k + L's I/O point, seen
    // at step k + L + 1: a latency of L steps and a half (the step's I/O point is its end).
    let lag = u(&config["query_lag_steps"]);
    for key in ["transfer_lag_steps", "backup_lag_steps"] {
        assert_eq!(u(&config[key]), lag, "{file}: {key}: one latency for every kind of I/O");
    }
    // `--read-batches-per-step R`: a read moves R batches of 128 pages a step (1 s).
    let read_batches = u(&config["read_batches_per_step"]);
    let batch_pages = u(&config["storage_batch_pages"]);
    assert_eq!(batch_pages as usize, cachesim::cache::storage::STORAGE_BATCH_PAGES, "{file}: batch");
    assert_eq!(config["step_seconds"].as_f64(), Some(1.0), "{file}: the timeout clock");
    let page = u(&config["page_size"]);
    StorageConfig {
        threshold: u(&config["controller_prefetch_threshold"]) as usize,
        timeout_base_s: config["prefetch_timeout_base"].as_f64().expect("timeout base"),
        timeout_per_page_s: config["prefetch_timeout_per_page"].as_f64().expect("timeout per page"),
        retry_interval: u(&config["hicache_storage_prefetch_retry_poll_interval"]),
        retry_max: u(&config["hicache_storage_prefetch_retry_max_attempts"]) as u32,
        // 16-byte pages at page size 1 (the driver's one-layer float64 pool).
        // (The driver writes the flag's text: a number or a string of one.)
        max_pages: match &config["storage_max_size"] {
            Value::Null => None,
            Value::String(b) => Some(b.parse::<u64>().expect("storage_max_size in bytes") / (16 * page)),
            b => Some(b.as_u64().expect("storage_max_size in bytes") / (16 * page)),
        },
        latency_s: if lag == 0 { 0.0 } else { lag as f64 + 0.5 },
        read_pages_per_s: if read_batches == 0 { f64::INFINITY } else { (read_batches * batch_pages) as f64 },
        ..StorageConfig::new(policy)
    }
}

/// (schedule file, trace path relative to the SGLang golden folder).
const CASES: [(&str, &str); 5] = [
    ("a_4096_fcfs.jsonl", "../vllm/traces/a_shared_prefix.jsonl"),
    ("a_4096_lpm.jsonl", "../vllm/traces/a_shared_prefix.jsonl"),
    ("b_1024_fcfs.jsonl", "../vllm/traces/b_preemption.jsonl"),
    ("c_8192_fcfs.jsonl", "../vllm/traces/c_chunked_prefill.jsonl"),
    ("d_2048_fcfs.jsonl.gz", "traces/d_retract.jsonl"),
];

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn every_golden_schedule_is_reproduced_by_the_default_bundle() {
    let Some(dir) = common::golden_dir("sglang") else { return };
    // Every schedule in the folder is a listed case.
    let mut listed: Vec<String> = std::fs::read_dir(dir.join("schedules"))
        .expect("schedules folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let mut known: Vec<&str> = CASES.iter().map(|c| c.0).collect();
    known.sort();
    assert_eq!(listed, known, "a golden schedule without a case here");
    let version = EngineVersion::newest(EngineKind::Sglang);
    assert_eq!(version, EngineVersion::Sglang05);
    let failures: Vec<String> =
        CASES.iter().filter_map(|(file, trace)| replay_case(&dir, file, &dir.join(trace), version, None)).collect();
    for f in &failures {
        eprintln!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden schedules diverge:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

/// The rules the goldens exercise are each needed: turning any one of them back to 0.5.1's makes
/// some golden schedule diverge (so the comparison can fail), and so does the 0.5.1 bundle. The
/// goldens have no retraction, no prompt over the input budget and no eviction that splits a
/// prompt from its outputs: `truncate_to_chunk`, `retract_until_fits` and `split_prompt` have
/// scenario tests in `src/engine/sglang/tests.rs` instead.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn each_changed_rule_is_needed_to_reproduce_the_goldens() {
    let Some(dir) = common::golden_dir("sglang") else { return };
    let newest = EngineVersion::Sglang05.rules();
    let old = EngineVersion::Sglang051.rules();
    let flips: [(&str, Rules); 3] = [
        ("ignore_eos_full_reserve", Rules { sglang_ignore_eos_full_reserve: false, ..newest }),
        ("prefill_budget_pages", Rules { sglang_prefill_budget_pages: false, ..newest }),
        ("evict_shortfall", Rules { sglang_evict_shortfall: false, ..newest }),
    ];
    let mut needed = Vec::new();
    for (name, rules) in flips.into_iter().chain([("the sglang@0.5.1 bundle", old)]) {
        let diverging: Vec<&str> = CASES
            .iter()
            .filter(|(file, trace)| {
                replay_case(&dir, file, &dir.join(trace), EngineVersion::Sglang05, Some(rules)).is_some()
            })
            .map(|c| c.0)
            .collect();
        eprintln!("without {name}: {} of {} diverge {diverging:?}", diverging.len(), CASES.len());
        needed.push((name, diverging.len()));
    }
    let unneeded: Vec<_> = needed.iter().filter(|(_, n)| *n == 0).collect();
    assert!(unneeded.is_empty(), "rules no golden schedule depends on: {unneeded:?}");
}

/// Round 3 (`round3/` in the golden folder, its README): page sizes above 1, requests without
/// `ignore_eos`, and the waiting-prefix refresh. Every listed case and schedule file: each
/// `cases.txt` case with and without `ignore_eos`, each `cases_refresh.txt` case with the refresh
/// on (the default bundle) and off (the rule turned off, as `SGLANG_ENABLE_WAITING_PREFIX_REFRESH=0`).
fn round3_files(dir: &Path) -> Vec<(String, std::path::PathBuf, Option<Rules>)> {
    let r3 = dir.join("round3");
    let names = |list: &str| -> Vec<(String, String)> {
        std::fs::read_to_string(r3.join(list))
            .unwrap_or_else(|e| panic!("{list}: {e}"))
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let mut f = l.split('|');
                (f.next().expect("name").to_string(), f.next().expect("trace").to_string())
            })
            .collect()
    };
    let off = Rules { sglang_waiting_prefix_refresh: false, ..EngineVersion::Sglang05.rules() };
    let mut files = Vec::new();
    for (name, trace) in names("cases.txt") {
        for tail in ["eos", "noeos"] {
            files.push((format!("{name}_{tail}.jsonl.gz"), r3.join(&trace), None));
        }
    }
    for (name, trace) in names("cases_refresh.txt") {
        files.push((format!("{name}_eos.jsonl.gz"), r3.join(&trace), None));
        files.push((format!("{name}_eos_norefresh.jsonl.gz"), r3.join(&trace), Some(off)));
    }
    files
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn every_round3_golden_schedule_is_reproduced() {
    let Some(dir) = common::golden_dir("sglang") else { return };
    if !dir.join("round3").is_dir() {
        assert_ne!(std::env::var("CACHESIM_REQUIRE_DATA").as_deref(), Ok("1"), "no round3/ folder");
        eprintln!("skipped: no round3/ folder in {}", dir.display());
        return;
    }
    let files = round3_files(&dir);
    let mut listed: Vec<String> = std::fs::read_dir(dir.join("round3/schedules"))
        .expect("round3/schedules folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let mut known: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
    known.sort();
    assert_eq!(listed, known, "a round-3 golden schedule without a case here");
    let diverging: Vec<String> = files
        .iter()
        .filter_map(|(file, trace, rules)| {
            replay(&dir.join("round3/schedules").join(file), trace, EngineVersion::Sglang05, *rules)
        })
        .collect();
    eprintln!("round 3: {} of {} schedules identical", files.len() - diverging.len(), files.len());
    assert!(
        diverging.is_empty(),
        "{} of {} round-3 golden schedules diverge:\n{}",
        diverging.len(),
        files.len(),
        diverging.join("\n")
    );
}

/// The waiting-prefix refresh is needed: without it some round-3 schedule diverges (the
/// `_norefresh` files show the converse). `sglang_match_waiting_whole` changes none of them.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn each_round3_rule_is_needed() {
    let Some(dir) = common::golden_dir("sglang") else { return };
    if !dir.join("round3").is_dir() {
        return;
    }
    let newest = EngineVersion::Sglang05.rules();
    let files = round3_files(&dir);
    let flip = Rules { sglang_waiting_prefix_refresh: false, ..newest };
    let n = files
        .iter()
        .filter(|(file, trace, rules)| {
            rules.is_none()
                && replay(&dir.join("round3/schedules").join(file), trace, EngineVersion::Sglang05, Some(flip))
                    .is_some()
        })
        .count();
    eprintln!("without waiting_prefix_refresh: {n} round-3 schedules diverge");
    assert!(n > 0, "no round-3 schedule depends on the waiting-prefix refresh");
}

/// SGLang 0.5.23's priority scheduling (`--enable-priority-scheduling`): the schedules in
/// `tests/golden/sglang-priority/` (written by SGLang's own `Scheduler` and `PrefillAdder` with
/// priorities set and arrivals during the run, see that folder's README) — the queue's order,
/// preemption by a more important arrival (threshold, low values first, turned off), a chunked
/// request that is never a victim, retraction by priority, and LOF under priority — are
/// reproduced step for step by the default bundle. The folder is part of the repository.
#[test]
fn every_priority_schedule_is_reproduced() {
    let dir = in_repo("sglang-priority");
    let files = listed_cases(&dir);
    assert!(files.len() >= 7, "expected the seven priority schedules, found {}", files.len());
    let diverging = diverging(&dir, files.iter());
    assert!(
        diverging.is_empty(),
        "{} of {} priority schedules diverge:\n{}",
        diverging.len(),
        files.len(),
        diverging.join("\n")
    );
}

/// A golden folder of the repository (`tests/golden/NAME`).
fn in_repo(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

/// The (schedule file, trace path) of each case in `dir/cases.txt` (`name|trace|flags`), checked
/// to be exactly the files of `dir/schedules`.
fn listed_cases(dir: &Path) -> Vec<(String, std::path::PathBuf)> {
    let cases = std::fs::read_to_string(dir.join("cases.txt")).expect("cases.txt");
    let mut listed: Vec<String> = std::fs::read_dir(dir.join("schedules"))
        .expect("schedules folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let mut files: Vec<(String, std::path::PathBuf)> = cases
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('|');
            let name = f.next().expect("name");
            let trace = f.next().expect("trace");
            // Schedules are gzipped, or (tests/golden/sglang_mamba) plain.
            let plain = format!("{name}.jsonl");
            let file = if dir.join("schedules").join(&plain).exists() { plain } else { format!("{plain}.gz") };
            (file, dir.join("traces").join(format!("{trace}.jsonl")))
        })
        .collect();
    files.sort();
    assert_eq!(listed, files.iter().map(|f| f.0.clone()).collect::<Vec<_>>(), "schedules and cases.txt differ");
    files
}

/// The first divergence of each of `files` (in `dir/schedules`) replayed by the default bundle.
fn diverging<'a>(dir: &Path, files: impl Iterator<Item = &'a (String, std::path::PathBuf)>) -> Vec<String> {
    files
        .filter_map(|(file, trace)| replay(&dir.join("schedules").join(file), trace, EngineVersion::Sglang05, None))
        .collect()
}

/// Whether schedule `name` of `dir` (over trace `trace`) replayed with its config line's `key`
/// set to `value` still matches what the engine wrote.
fn matches_with(dir: &Path, name: &str, trace: &str, key: &str, value: &Value) -> bool {
    let tmp = tempfile::tempdir().expect("temporary folder");
    let plain = dir.join("schedules").join(format!("{name}.jsonl"));
    let mut lines =
        json_lines(&if plain.exists() { plain } else { dir.join("schedules").join(format!("{name}.jsonl.gz")) });
    assert_ne!(&lines[0][key], value, "{name}: {key} already {value}");
    lines[0][key] = value.clone();
    let path = tmp.path().join(format!("{name}.jsonl"));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).expect("write");
    let trace = dir.join("traces").join(format!("{trace}.jsonl"));
    replay(&path, &trace, EngineVersion::Sglang05, None).is_none()
}

/// The priority comparison can fail: each schedule replayed with one priority flag of its config
/// line changed (preemption off, the threshold raised, the order reversed, retraction by length)
/// diverges from what SGLang wrote.
#[test]
fn each_priority_flag_changes_its_schedule() {
    let dir = in_repo("sglang-priority");
    let changes: [(&str, &str, &str, Value); 4] = [
        ("s_preempt_4096_priority", "s_preempt", "disable_priority_preemption", Value::Bool(true)),
        ("s_prefix_2048_threshold5", "s_prefix", "priority_scheduling_preemption_threshold", Value::from(10)),
        ("s_preempt_4096_lowfirst", "s_preempt", "schedule_low_priority_values_first", Value::Bool(false)),
        ("s_retract_1024_retractprio", "s_retract", "retraction_policy", Value::from("length")),
    ];
    for (name, trace, key, value) in changes {
        assert!(
            !matches_with(&dir, name, trace, key, &value),
            "{name} with {key} = {value} is reproduced as well: the comparison does not see the flag"
        );
    }
}

/// SGLang 0.5.23's hierarchical cache (`--enable-hierarchical-cache`): the schedules in
/// `tests/golden/sglang_hicache/` (written by SGLang's own scheduler over its own unified radix
/// cache with the host tier, only the copies' engine replaced, see that folder's README) — writes
/// by each policy, device tokens kept on the host, loads at admission, the host pool under
/// pressure, page sizes 1 and 16, retraction — are reproduced step for step by the default
/// bundle, each step's hits counting what was loaded and the host pool's free tokens compared
/// after each step's scheduling. The schedules whose copies lag two steps
/// (`_lag2`) stand for no bandwidth and are kept, not compared. The folder is part of the
/// repository.
#[test]
fn every_hicache_schedule_is_reproduced() {
    assert_reproduced("sglang_hicache", "HiCache", Some("_lag"));
}

/// Every schedule of the listed cases in `tests/golden/<folder>` but those whose name contains
/// `kept` (at least ten) is reproduced step for step.
fn assert_reproduced(folder: &str, what: &str, kept: Option<&str>) {
    let dir = in_repo(folder);
    let files = listed_cases(&dir);
    let compared: Vec<_> = files.iter().filter(|f| kept.is_none_or(|k| !f.0.contains(k))).collect();
    assert!(compared.len() >= 10, "expected the {what} schedules, found {}", compared.len());
    let diverging = diverging(&dir, compared.iter().copied());
    eprintln!("{what}: {} of {} schedules identical", compared.len() - diverging.len(), compared.len());
    assert!(
        diverging.is_empty(),
        "{} of {} {what} schedules diverge:\n{}",
        diverging.len(),
        compared.len(),
        diverging.join("\n")
    );
}

/// SGLang's radix cache for a model with sliding-window layers (`tests/golden/sglang_swa`):
/// every step of every schedule, the radix cache on and off, each pool's free and evictable
/// tokens after scheduling included.
#[test]
fn every_window_schedule_is_reproduced() {
    assert_reproduced("sglang_swa", "window", None);
}

/// SGLang's radix cache for a model with linear-attention layers (`tests/golden/sglang_mamba`,
/// docs/engines/sglang-mamba.md): every step of every schedule, both strategies, each pool's
/// free and evictable figures after scheduling included (the state pool's in slots).
#[test]
fn every_mamba_schedule_is_reproduced() {
    assert_reproduced("sglang_mamba", "state-pool", None);
}

/// The state-pool comparison can fail: a schedule replayed with one slot more (the request cap
/// unchanged: only the pool's free slots differ), with the other strategy, or with a pool whose
/// request cap or evictions differ leaves SGLang's.
#[test]
fn each_state_pool_setting_changes_its_schedule() {
    let dir = in_repo("sglang_mamba");
    let changes: [(&str, &str, &str, Value); 4] = [
        ("conv_nb", "m_conv", "mamba_cache_size", Value::from(65)),
        ("sib_nb_c256", "m_sibling", "mamba_radix_cache_strategy", Value::from("extra_buffer")),
        ("sib_eb_c256", "m_sibling", "mamba_radix_cache_strategy", Value::from("no_buffer")),
        ("burst_nb_m24", "m_burst", "mamba_cache_size", Value::from(25)),
    ];
    for (name, trace, key, value) in changes {
        assert!(
            !matches_with(&dir, name, trace, key, &value),
            "{name} with {key} = {value} still matches SGLang's schedule"
        );
    }
}

/// SGLang with the radix cache off (`tests/golden/sglang_noradix`): requests sent with
/// `ignore_eos` go through `add_one_req_ignore_eos` (`can_allocate_prefill`, then the
/// `req_states` check), the others through the ordinary budget; every step of every schedule.
#[test]
fn every_disabled_tree_schedule_is_reproduced() {
    assert_reproduced("sglang_noradix", "radix-off", None);
}

/// The window comparison can fail: a schedule replayed with another window or another window
/// pool leaves SGLang's.
#[test]
fn each_window_setting_changes_its_schedule() {
    let dir = in_repo("sglang_swa");
    let changes: [(&str, &str, &str, Value); 5] = [
        ("sib_w32", "w_sibling", "swa_retain_window", Value::from(40)),
        ("sib_w128_swa600", "w_sibling", "swa_retain_window", Value::from(127)),
        ("conv_w32_swa300_c256", "w_conv", "swa_pool_tokens", Value::from(320)),
        ("long_w32_swa500_r4", "w_long", "swa_pool_tokens", Value::from(480)),
        ("burst_w128_full2000", "w_burst", "swa_retain_window", Value::from(100)),
    ];
    for (name, trace, key, value) in changes {
        assert!(
            !matches_with(&dir, name, trace, key, &value),
            "{name} with {key} = {value} still matches SGLang's schedule"
        );
    }
}

/// The HiCache comparison can fail: a schedule replayed with its config line's tier turned off,
/// its write policy changed or its host pool shrunk diverges from what SGLang wrote.
#[test]
fn each_hicache_setting_changes_its_schedule() {
    let dir = in_repo("sglang_hicache");
    let changes: [(&str, &str, &str, Value); 4] = [
        ("conv_1600_wt", "h_conv", "enable_hierarchical_cache", Value::Bool(false)),
        ("conv_1600_wt", "h_conv", "hicache_write_policy", Value::from("write_back")),
        ("conv_2400_wts", "h_conv", "hicache_write_policy", Value::from("write_through")),
        ("press_2000_h3200_wb", "h_pressure", "host_pool_tokens", Value::from(2001)),
    ];
    for (name, trace, key, value) in changes {
        assert!(
            !matches_with(&dir, name, trace, key, &value),
            "{name} with {key} = {value} still matches SGLang's schedule"
        );
    }
}

/// SGLang 0.5.23's HiCache storage tier (`--hicache-storage-backend`,
/// docs/engines/hicache-storage.md): the schedules SGLang's own code wrote
/// (`tests/golden/sglang_hicache_storage`), which the model is held to, are checked whole:
/// every case of `cases.txt` is there and nothing else, with the prefetch and write policy and
/// page size its name states, its steps numbered densely, every request finished, and the
/// summary's storage totals the sums of its steps and requests.
#[test]
fn storage_schedules_are_whole() {
    let dir = in_repo("sglang_hicache_storage");
    let cases = std::fs::read_to_string(dir.join("cases.txt")).expect("cases.txt");
    let mut names: Vec<String> = cases
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| format!("{}.jsonl.gz", l.split('|').next().expect("name")))
        .collect();
    names.sort();
    let mut files: Vec<String> = std::fs::read_dir(dir.join("schedules"))
        .expect("schedules folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(names, files, "cases.txt and schedules/ disagree");
    assert!(files.len() >= 10, "expected the storage schedules, found {}", files.len());
    for file in &files {
        let lines = json_lines(&dir.join("schedules").join(file));
        let config = &lines[0];
        assert_eq!(config["type"], "config", "{file}");
        assert_eq!(config["hicache_storage_backend"], "file", "{file}");
        let words: Vec<&str> = file.trim_end_matches(".jsonl.gz").split('_').collect();
        let policy = ["be", "wc", "to"]
            .iter()
            .zip(["best_effort", "wait_complete", "timeout"])
            .find(|(w, _)| words.contains(w))
            .map(|(_, p)| p);
        assert_eq!(config["hicache_storage_prefetch_policy"].as_str(), policy, "{file}: prefetch policy");
        let write = if words.contains(&"wb") { "write_back" } else { "write_through" };
        assert_eq!(config["hicache_write_policy"], write, "{file}: write policy");
        let page = if words.contains(&"p16") { 16 } else { 1 };
        assert_eq!(u(&config["page_size"]), page, "{file}: page size");
        let steps: Vec<&Value> = lines.iter().filter(|l| l["type"] == "step").collect();
        let requests: Vec<&Value> = lines.iter().filter(|l| l["type"] == "request").collect();
        let summary = lines.last().expect("lines");
        assert_eq!(summary["type"], "summary", "{file}");
        for (k, s) in steps.iter().enumerate() {
            assert_eq!(u(&s["step"]) as usize, k, "{file}: steps are numbered densely");
        }
        assert_eq!(u(&summary["steps"]) as usize, steps.len(), "{file}: steps");
        assert_eq!(u(&summary["finished"]), u(&config["num_requests"]), "{file}: every request finished");
        assert_eq!(requests.len() as u64, u(&config["num_requests"]), "{file}: request lines");
        for key in [
            "storage_query_hit_tokens",
            "prefetch_alloc_tokens",
            "prefetch_inserted_tokens",
            "storage_pages_read",
            "storage_backup_tokens",
            "storage_pages_written",
            "storage_pages_skipped",
        ] {
            let sum: u64 = steps.iter().map(|s| u(&s[key])).sum();
            assert_eq!(sum, u(&summary[key]), "{file}: {key} over the steps");
        }
        let each = |key: &str| -> u64 { requests.iter().flat_map(|r| r[key].as_array().expect(key)).map(u).sum() };
        assert_eq!(each("storage_loaded_tokens_each_admission"), u(&summary["storage_loaded_tokens"]), "{file}");
        let issued: usize = steps.iter().map(|s| s["prefetch_issued"].as_array().expect("issued").len()).sum();
        let attempts: usize = requests.iter().map(|r| r["prefetch_attempts"].as_array().expect("attempts").len()).sum();
        assert_eq!(
            (issued as u64, attempts as u64),
            (u(&summary["prefetch_attempts"]), u(&summary["prefetch_attempts"])),
            "{file}"
        );
    }
}

/// SGLang 0.5.23's HiCache storage tier (`--hicache-storage-backend file`): the schedules of
/// `tests/golden/sglang_hicache_storage` are reproduced step for step, the storage I/O taking
/// no time (lag 0: an item queued during a step is handled at that step's I/O point), reads
/// moving 128 pages a step (`_r1`), or every I/O two steps late (`_lag2`: a latency of 2.5 s).
/// The pair on one store, `shared_A_press_wt_wc` then `shared_B_press_wt_wc`, is
/// `a_second_instance_runs_on_the_store_the_first_left`.
#[test]
fn every_storage_schedule_is_reproduced() {
    let dir = in_repo("sglang_hicache_storage");
    let trace_dir = in_repo("sglang_hicache").join("traces");
    let compared: &[(&str, &str)] = &[
        ("press_2000_h3200_wt_be_r1", "h_pressure"),
        ("press_2000_h3200_wt_wc_r1", "h_pressure"),
        ("press_2000_h3200_wt_to_r1", "h_pressure"),
        ("press_2000_h3200_wb_wc_r1", "h_pressure"),
        ("press_2000_h3200_wt_wc", "h_pressure"),
        ("conv_1600_wt_to", "h_conv"),
        ("conv_1600_wt_to_p16", "h_conv"),
        ("conv_1600_wt_be_lag2", "h_conv"),
        ("press_2000_h3200_wt_wc_cap3000", "h_pressure"),
    ];
    let mut diverging = Vec::new();
    for (name, trace) in compared {
        let path = dir.join("schedules").join(format!("{name}.jsonl.gz"));
        if let Some(d) = replay(&path, &trace_dir.join(format!("{trace}.jsonl")), EngineVersion::Sglang05, None) {
            diverging.push(d);
        }
    }
    assert!(diverging.is_empty(), "{} storage schedules diverge:\n{}", diverging.len(), diverging.join("\n"));
}

/// Two instances on one storage directory, one after the other: `shared_A` fills it, then
/// `shared_B` — a fresh engine — runs the same trace on the 6,531 pages A left, and finds them.
#[test]
fn a_second_instance_runs_on_the_store_the_first_left() {
    let dir = in_repo("sglang_hicache_storage").join("schedules");
    let trace = in_repo("sglang_hicache").join("traces").join("h_pressure.jsonl");
    let first = dir.join("shared_A_press_wt_wc.jsonl.gz");
    let a_end = json_lines(&first).iter().find(|l| l["type"] == "summary").map(|l| u(&l["storage_files_at_end"]));
    let (d, store) =
        replay_on(&first, &trace, EngineVersion::Sglang05, None, Some(Store::new(1, None, Eviction::File)));
    assert!(d.is_none(), "{}", d.unwrap_or_default());
    let store = store.expect("the store comes back");
    assert_eq!(Some(store.pages()), a_end, "the pages A left");
    let second = dir.join("shared_B_press_wt_wc.jsonl.gz");
    let (d, store) = replay_on(&second, &trace, EngineVersion::Sglang05, None, Some(store));
    assert!(d.is_none(), "{}", d.unwrap_or_default());
    // B writes nothing new: every page it backs up is there already.
    assert_eq!(store.map(|s| s.pages()), a_end);
}

/// Where each storage schedule first diverges (a report, not a check).
#[test]
#[ignore = "a report of the storage schedules' divergences"]
fn storage_schedule_divergences() {
    let dir = in_repo("sglang_hicache_storage");
    let trace_dir = in_repo("sglang_hicache").join("traces");
    let cases = std::fs::read_to_string(dir.join("cases.txt")).expect("cases.txt");
    for l in cases.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let mut f = l.split('|');
        let (name, trace) = (f.next().expect("name"), f.next().expect("trace"));
        if name.starts_with("shared_") {
            eprintln!("{name}: one of the pair on one store (a_second_instance_runs_on_the_store_the_first_left)");
            continue;
        }
        let path = dir.join("schedules").join(format!("{name}.jsonl.gz"));
        let got = std::panic::catch_unwind(|| {
            replay(&path, &trace_dir.join(format!("{trace}.jsonl")), EngineVersion::Sglang05, None)
        });
        match got {
            Ok(None) => eprintln!("{name}: identical"),
            Ok(Some(d)) => eprintln!("{d}"),
            Err(_) => eprintln!("{name}: panicked"),
        }
    }
}
