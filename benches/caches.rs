//! Criterion benches: per-cache admit/finish throughput on a shared-prefix workload, radix
//! tree insert+match, the host tiers under eviction (vLLM's offloading under the paged cache,
//! SGLang's HiCache under the radix cache), HiCache's storage backend (every request's prompt
//! pages written, then looked up), and whole replays of the bundled sample. Throughput is
//! reported in requests (or tokens) per second.

use cachesim::cache::storage::store::Store;
use cachesim::cache::{CacheSpec, Policy};
use cachesim::replay::{replay, ReplayOptions, ReplaySpec};
use cachesim::trace::ReadOptions;
use cachesim::workload::gen::{self, GspSpec, DEFAULT_VOCAB};
use cachesim::workload::{BuildOptions, Workload};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn gsp_workload() -> Workload {
    let spec = GspSpec {
        num_groups: 16,
        prompts_per_group: 16,
        system_prompt_len: 1024,
        question_len: 128,
        output_len: 64,
        range_ratio: 1.0,
        ordered: false,
        vocab: DEFAULT_VOCAB,
        seed: 7,
    };
    gen::workload("gsp.jsonl", &gen::gsp(&spec).unwrap()).unwrap()
}

fn spec(policy: Policy, capacity: Option<u64>) -> CacheSpec {
    CacheSpec {
        policy,
        block_size: Some(16),
        page_size: Some(1),
        capacity_tokens: capacity,
        hybrid: None,
        sglang_pool: None,
    }
}

fn cache_ops(c: &mut Criterion) {
    let w = gsp_workload();
    let tokens: u64 = w.requests.iter().map(|r| r.final_kv_tokens() as u64).sum();
    let mut g = c.benchmark_group("replay_gsp_256req");
    g.throughput(Throughput::Elements(w.requests.len() as u64));
    for policy in Policy::ALL {
        for (label, cap) in [("unlimited", None), ("64k", Some(65_536))] {
            g.bench_with_input(BenchmarkId::new(policy.name(), label), &cap, |b, &cap| {
                b.iter(|| replay(&w, spec(policy, cap), ReplayOptions { inflight: 8 }, &|| ()))
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("replay_gsp_tokens");
    g.throughput(Throughput::Elements(tokens));
    g.bench_function("paged_block16_evicting", |b| {
        b.iter(|| replay(&w, spec(Policy::Paged, Some(32_768)), ReplayOptions { inflight: 4 }, &|| ()))
    });
    g.bench_function("radix_evicting", |b| {
        b.iter(|| replay(&w, spec(Policy::Radix, Some(32_768)), ReplayOptions { inflight: 4 }, &|| ()))
    });
    // The same with a 64k-token host tier: every eviction keeps a host copy, hits load it back
    // (vLLM's own tier, LMCache's CPU backend in 256-token chunks, with its local disk of 256k
    // tokens below it, SGLang's HiCache).
    for (label, policy, lmcache_chunk, disk_tokens) in [
        ("paged_block16_evicting_host_tier", Policy::Paged, None, None),
        ("paged_block16_evicting_lmcache", Policy::Paged, Some(256), None),
        ("paged_block16_evicting_lmcache_disk", Policy::Paged, Some(256), Some(262_144)),
        ("radix_evicting_hicache", Policy::Radix, None, None),
    ] {
        let cache = spec(policy, Some(32_768));
        let tiered = ReplaySpec { cache, host_tokens: Some(65_536), lmcache_chunk, disk_tokens };
        g.bench_function(label, |b| b.iter(|| replay(&w, tiered, ReplayOptions { inflight: 4 }, &|| ())));
    }
    g.finish();
}

/// The storage backend's trie: each request's prompt pages written (the shared system prompts
/// found held after the first), then every prompt looked up from its start.
fn storage_store(c: &mut Criterion) {
    let w = gsp_workload();
    let tokens: u64 = w.requests.iter().map(|r| r.prompt_len as u64).sum();
    let mut g = c.benchmark_group("storage_store_gsp_prompt_tokens");
    g.throughput(Throughput::Elements(tokens));
    for page in [1usize, 16] {
        g.bench_function(format!("write_then_hit_page{page}"), |b| {
            b.iter(|| {
                let mut s = Store::new(page, None, Default::default());
                let mut held = 0;
                for r in &w.requests {
                    let end = r.prompt_len as usize / page * page;
                    s.write(&w.store, r.seq, 0, end);
                }
                for r in &w.requests {
                    held += s.hit(&w.store, r.seq, 0, r.prompt_len as usize / page * page);
                }
                held
            })
        });
    }
    g.finish();
}

fn sample_replay(c: &mut Criterion) {
    let w = cachesim::load_workload(None, &ReadOptions::default(), &BuildOptions::default()).unwrap();
    let mut g = c.benchmark_group("replay_bundled_sample");
    g.throughput(Throughput::Elements(w.requests.len() as u64));
    for policy in Policy::ALL {
        g.bench_function(policy.name(), |b| {
            b.iter(|| replay(&w, spec(policy, None), ReplayOptions::default(), &|| ()))
        });
    }
    g.finish();
}

criterion_group!(benches, cache_ops, storage_store, sample_replay);
criterion_main!(benches);
