//! Criterion benches of sweep throughput (`cachesim sweep` without the printing): grid points
//! per wall second through [`cachesim::sweep::run_all`], on 1 and on 2 rayon threads, over
//! (a) the bundled sample (40 multi-turn sessions) with the seed's ten-configuration grid,
//! max-num-seqs 16, 24, 32, 48, 64 × max-num-batched-tokens 2048, 4096 at 20 req/s, and
//! (b) when the real data is present, 1,000 ShareGPT first-turn requests (docs/guide/sweep.md's
//! figures) with 20 configurations, max-num-seqs 16..160:16 × max-num-batched-tokens 2048, 8192
//! at 20 req/s. The trace is read and tokenised once, outside the timing, as a sweep does.

use cachesim::config::{resolve, RunConfig, RunOptions};
use cachesim::sweep::{run_all, Point};
use cachesim::workload::arrivals::{ArrivalOptions, Rate};
use cachesim::workload::{BuildOptions, Turns, Workload};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// One resolved configuration per (max-num-seqs, max-num-batched-tokens) pair.
fn configs(seqs: &[u32], tokens: &[u32], num_prompts: Option<usize>) -> Vec<RunConfig> {
    let mut out = Vec::new();
    for &s in seqs {
        for &t in tokens {
            out.push(
                resolve(&RunOptions {
                    max_num_seqs: Some(s),
                    max_num_batched_tokens: Some(t),
                    arrivals: ArrivalOptions {
                        rate: Some(Rate::PerSecond(20.0)),
                        num_prompts,
                        ..ArrivalOptions::default()
                    },
                    ..RunOptions::default()
                })
                .unwrap(),
            );
        }
    }
    out
}

/// Benches the sweep of `cfgs` over `w` on 1 and 2 threads, in points per second.
fn bench_points(c: &mut Criterion, group: &str, w: &Workload, cfgs: &[RunConfig], samples: usize) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(cfgs.len() as u64));
    g.sample_size(samples);
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        g.bench_with_input(BenchmarkId::new("threads", threads), &threads, |b, _| {
            b.iter(|| {
                let jobs: Vec<(usize, Point, cachesim::Result<RunConfig>)> =
                    cfgs.iter().enumerate().map(|(k, c)| (k, Point::new(), Ok(c.clone()))).collect();
                pool.install(|| run_all(w, jobs, &|| ())).len()
            })
        });
    }
    g.finish();
}

fn sample_sweep(c: &mut Criterion) {
    let w = cachesim::load_workload(None, &Default::default(), &BuildOptions::default()).unwrap();
    let cfgs = configs(&[16, 24, 32, 48, 64], &[2048, 4096], None);
    bench_points(c, "sweep_sample_10_points", &w, &cfgs, 30);
}

fn sharegpt_sweep(c: &mut Criterion) {
    let dir = std::env::var_os("CACHESIM_DATA").map_or_else(|| "../shared/data".into(), std::path::PathBuf::from);
    let path = dir.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    if !path.exists() {
        eprintln!("skipping the ShareGPT sweep bench: no {}", path.display());
        return;
    }
    let build = BuildOptions { turns: Turns::First, ..BuildOptions::default() };
    let w = cachesim::load_workload(Some(&path), &Default::default(), &build).unwrap();
    let seqs: Vec<u32> = (1..=10).map(|k| 16 * k).collect();
    let cfgs = configs(&seqs, &[2048, 8192], Some(1000));
    bench_points(c, "sweep_sharegpt1000_20_points", &w, &cfgs, 10);
}

criterion_group!(benches, sample_sweep, sharegpt_sweep);
criterion_main!(benches);
