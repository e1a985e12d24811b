//! Criterion benches of whole serving runs (`cachesim run` without the printing): a
//! ShareGPT-like shared-prefix workload sent all at once through each engine's scheduler and
//! cache on the default model and GPU (throughput: simulated output tokens per wall second);
//! and, when the real data is present, the Mooncake conversation trace replayed as in the
//! docs/performance.md (all 12,031 requests and the first 1,000), loaded once as in a sweep of many runs,
//! and what loading it costs; and the whole trace on 16 instances behind each router. The
//! Mooncake runs are timed both with coalesced decode stretches (the default) and with every
//! engine step an event of its own (`_stepped`); vLLM's KV tiers on the whole trace (its own,
//! and none, LMCache's CPU backend and LMCache's with a local disk); and SGLang with HiCache on the whole trace: the
//! device tier alone, with the host tier, and with the storage tier under it, at pages of 1 and
//! 64 tokens (the tiers' cost); and SGLang on gpt-oss-20b with its window pool and with every
//! layer in one pool (the window pool's cost).

use cachesim::cluster::router::RouterKind;
use cachesim::cluster::ClusterConfig;
use cachesim::config::{resolve, RunOptions};
use cachesim::engine::sglang::hicache::{HiCacheOptions, StorageBackend};
use cachesim::engine::sglang::swa::SwaOptions;
use cachesim::engine::vllm_offload::{OffloadBackend, OffloadOptions};
use cachesim::engine::{EngineKind, EngineVersion};
use cachesim::sim::{simulate, Keep};
use cachesim::workload::arrivals::ArrivalOptions;
use cachesim::workload::gen::{self, GspSpec, DEFAULT_VOCAB};
use cachesim::workload::{BuildOptions, Workload};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// 1,024 requests: 32 system prompts of 1,024 tokens, each with 32 questions of ~128 tokens,
/// ~256 output tokens each (ShareGPT-like lengths, with shared prefixes to reuse).
fn workload() -> Workload {
    let spec = GspSpec {
        num_groups: 32,
        prompts_per_group: 32,
        system_prompt_len: 1024,
        question_len: 128,
        output_len: 256,
        range_ratio: 0.5,
        ordered: false,
        vocab: DEFAULT_VOCAB,
        seed: 11,
    };
    gen::workload("gsp.jsonl", &gen::gsp(&spec).unwrap()).unwrap()
}

fn whole_runs(c: &mut Criterion) {
    let w = workload();
    let output: u64 = w.requests.iter().map(|r| r.output_len as u64).sum();
    let mut g = c.benchmark_group("serve_gsp_1024req_output_tokens");
    g.throughput(Throughput::Elements(output));
    g.sample_size(20);
    for (name, engine) in [
        ("vllm", EngineKind::Vllm),
        ("vllm-v0", EngineKind::VllmV0),
        ("sglang", EngineKind::Sglang),
        ("lightllm", EngineKind::Lightllm),
    ] {
        let cfg = resolve(&RunOptions { engine, ..RunOptions::default() }).unwrap();
        g.bench_function(name, |b| b.iter(|| simulate(&w, &cfg, Keep::default()).unwrap().summary.completed));
    }
    g.finish();
}

/// The Mooncake runs of docs/performance.md's speed figures, per run of a sweep (the trace read once).
fn mooncake_runs(c: &mut Criterion) {
    let dir = std::env::var_os("CACHESIM_DATA").map_or_else(|| "../shared/data".into(), std::path::PathBuf::from);
    let path = dir.join("traces/mooncake/conversation_trace.jsonl");
    if !path.exists() {
        eprintln!("skipping the Mooncake benches: no {}", path.display());
        return;
    }
    // What each invocation adds: parsing the file (in memory), building the token store, and
    // sorting it (the paged cache's block ids start from that order).
    let bytes = std::fs::read(&path).unwrap();
    let parse = || cachesim::trace::parse(&path, &bytes, &Default::default()).unwrap();
    let mut g = c.benchmark_group("load_mooncake_12031_records");
    g.sample_size(20);
    g.bench_function("parse", |b| b.iter(|| parse().records_len()));
    g.bench_function("parse_and_build", |b| {
        b.iter(|| cachesim::workload::build(parse(), &BuildOptions::default()).unwrap().requests.len())
    });
    let w = cachesim::workload::build(parse(), &BuildOptions::default()).unwrap();
    let all: Vec<u32> = (0..w.store.num_seqs() as u32).collect();
    g.bench_function("sort", |b| b.iter(|| w.store.prefix_order_of(all.clone()).order.len()));
    g.finish();
    let mut g = c.benchmark_group("serve_mooncake_vllm_block16_16384blocks");
    g.sample_size(10);
    for (name, num_prompts) in [("all_12031", None), ("first_1000", Some(1000))] {
        let cfg = resolve(&RunOptions {
            block_size: 16,
            num_gpu_blocks_override: Some(16_384),
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            arrivals: ArrivalOptions { num_prompts, ..ArrivalOptions::default() },
            ..RunOptions::default()
        })
        .unwrap();
        // Coalesced decode stretches (the default) and every step an event of its own.
        for (path, keep) in [("", Keep::default()), ("_stepped", Keep { every_step: true, ..Keep::default() })] {
            g.bench_function(format!("{name}{path}"), |b| {
                b.iter(|| simulate(&w, &cfg, keep).unwrap().summary.completed)
            });
        }
    }
    g.finish();
    // The cluster speed targets: the whole trace on 16 such instances, behind each router.
    let mut g = c.benchmark_group("serve_mooncake_16_instances");
    g.sample_size(10);
    for &router in <RouterKind as clap::ValueEnum>::value_variants() {
        let cfg = resolve(&RunOptions {
            block_size: 16,
            num_gpu_blocks_override: Some(16_384),
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            cluster: ClusterConfig { instances: 16, router, ..ClusterConfig::default() },
            ..RunOptions::default()
        })
        .unwrap();
        let name = clap::ValueEnum::to_possible_value(&router).unwrap().get_name().to_string();
        for (path, keep) in [("", Keep::default()), ("_stepped", Keep { every_step: true, ..Keep::default() })] {
            g.bench_function(format!("{name}{path}"), |b| {
                b.iter(|| simulate(&w, &cfg, keep).unwrap().summary.completed)
            });
        }
    }
    g.finish();
    // vLLM's KV tiers on the whole trace (128 GiB of host memory): its own (vLLM 0.33, against
    // `all_12031` above), and, under vLLM 0.18, none, LMCache's CPU backend and LMCache's with a
    // 1 TiB local disk behind it — LMCache's both coalesced and stepped (vLLM's own tier is
    // always stepped).
    let mut g = c.benchmark_group("serve_mooncake_vllm_kv_tiers");
    g.sample_size(10);
    let tiers: [(&str, EngineVersion, Option<OffloadBackend>, Option<f64>); 4] = [
        ("native_vllm033", EngineVersion::Vllm033, Some(OffloadBackend::Native), None),
        ("none_vllm018", EngineVersion::Vllm018, None, None),
        ("lmcache_vllm018", EngineVersion::Vllm018, Some(OffloadBackend::Lmcache), None),
        ("lmcache_disk_vllm018", EngineVersion::Vllm018, Some(OffloadBackend::Lmcache), Some(1024.0)),
    ];
    for (name, version, backend, disk) in tiers {
        let cfg = resolve(&RunOptions {
            engine_version: Some(version),
            block_size: 16,
            num_gpu_blocks_override: Some(16_384),
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            offload: OffloadOptions {
                size_gib: backend.map(|_| 128.0),
                backend,
                lmcache_disk_gib: disk,
                ..OffloadOptions::default()
            },
            ..RunOptions::default()
        })
        .unwrap();
        let paths: &[(&str, Keep)] = match backend {
            Some(OffloadBackend::Lmcache) => {
                &[("", Keep::default()), ("_stepped", Keep { every_step: true, ..Keep::default() })]
            }
            _ => &[("", Keep::default())],
        };
        for &(path, keep) in paths {
            g.bench_function(format!("{name}{path}"), |b| {
                b.iter(|| simulate(&w, &cfg, keep).unwrap().summary.completed)
            });
        }
    }
    g.finish();
    // The tiers' cost: SGLang on the whole trace with the device tier alone, the host tier, and
    // the storage tier under it.
    let mut g = c.benchmark_group("serve_mooncake_sglang_hicache");
    g.sample_size(10);
    for page_size in [1, 64] {
        for (tiers, enable, storage_backend) in
            [("device", false, None), ("host", true, None), ("storage", true, Some(StorageBackend::File))]
        {
            let cfg = resolve(&RunOptions {
                engine: EngineKind::Sglang,
                page_size,
                max_total_tokens: Some(262_144),
                max_running_requests: Some(256),
                chunked_prefill_size: Some(8192),
                hicache: HiCacheOptions { enable, ratio: enable.then_some(1.0), storage_backend, ..Default::default() },
                ..RunOptions::default()
            })
            .unwrap();
            g.bench_function(format!("{tiers}_page{page_size}"), |b| {
                b.iter(|| simulate(&w, &cfg, Keep::default()).unwrap().summary.completed)
            });
        }
    }
    g.finish();
    // SGLang's window pool on gpt-oss-20b against the same model with every layer in one pool.
    let mut g = c.benchmark_group("serve_mooncake_sglang_window");
    g.sample_size(10);
    for (pools, disable) in [("one_pool", true), ("window_pool", false)] {
        let cfg = resolve(&RunOptions {
            engine: EngineKind::Sglang,
            model: "gpt-oss-20b".into(),
            max_total_tokens: Some(262_144),
            max_running_requests: Some(256),
            chunked_prefill_size: Some(8192),
            sglang_swa: SwaOptions { disable, ..Default::default() },
            ..RunOptions::default()
        })
        .unwrap();
        g.bench_function(pools, |b| b.iter(|| simulate(&w, &cfg, Keep::default()).unwrap().summary.completed));
    }
    g.finish();
    // vLLM's hybrid manager: one KV cache group (Llama), sliding-window groups (gpt-oss) and
    // Mamba groups (Qwen3-Next, prefix caching on and off), each sized by its own memory.
    let mut g = c.benchmark_group("serve_mooncake_vllm_hybrid");
    g.sample_size(10);
    // The sliding groups' decode stretches coalesce (while no head is refused): `_stepped`
    // steps every step.
    let stepped = Keep { every_step: true, ..Keep::default() };
    for (name, model, tp, policy, keep) in [
        ("one_group", "llama-3.1-8b", 1, None, Keep::default()),
        ("sliding", "gpt-oss-20b", 1, None, Keep::default()),
        ("sliding_stepped", "gpt-oss-20b", 1, None, stepped),
        ("mamba", "qwen3-next-80b-a3b", 4, None, Keep::default()),
        ("mamba_no_prefix_caching", "qwen3-next-80b-a3b", 4, Some(cachesim::cache::Policy::None), Keep::default()),
    ] {
        let cfg = resolve(&RunOptions {
            model: model.into(),
            tp,
            policy,
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            ..RunOptions::default()
        })
        .unwrap();
        g.bench_function(name, |b| b.iter(|| simulate(&w, &cfg, keep).unwrap().summary.completed));
    }
    g.finish();
}

criterion_group!(benches, whole_runs, mooncake_runs);
criterion_main!(benches);
