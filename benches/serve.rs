//! Criterion benches of whole serving runs (`cachesim run` without the printing): a
//! ShareGPT-like shared-prefix workload sent all at once through each engine's scheduler and
//! cache on the default model and GPU. Throughput is simulated output tokens per wall second.

use cachesim::config::{resolve, RunOptions};
use cachesim::engine::EngineKind;
use cachesim::sim::{simulate, Keep};
use cachesim::workload::gen::{self, GspSpec, DEFAULT_VOCAB};
use cachesim::workload::Workload;
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

criterion_group!(benches, whole_runs);
criterion_main!(benches);
