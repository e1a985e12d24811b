//! `cachesim sweep` and `cachesim merge`: sharded + merged CSVs equal the unsharded CSV byte
//! for byte (property test over grids, failures and shard counts, and end to end through the
//! binary), ranking ties are stable, a refused point is a row with its reason, unknown flags are
//! refused, and the CSV does not depend on the thread count.

use crate::common;

use cachesim::metrics::{RequestRecord, Summary, TokenLog};
use cachesim::output::Outputs;
use cachesim::sweep::identity;
use cachesim::sweep::output::{csv_records, merge, rank, stage_csv, write_csv};
use cachesim::sweep::{parse_axis, Grid, Row, Shard};
use common::{cachesim, fails, ok};
use proptest::prelude::*;
use std::path::Path;

/// A summary of `n` requests whose latencies depend on `seed` (distinct, deterministic).
fn summary(n: u32, seed: u32) -> Summary {
    let records: Vec<RequestRecord> = (0..n)
        .map(|id| RequestRecord {
            id,
            send_s: id as f64 * 0.1,
            first_token_s: id as f64 * 0.1 + 0.01 * (1 + (seed + id) % 7) as f64,
            last_token_s: id as f64 * 0.1 + 0.5,
            prompt_tokens: 100 + seed,
            output_tokens: 10 + id,
            cached_prompt_tokens: id,
            preemptions: 0,
            first_scheduled_s: id as f64 * 0.1,
            priority: 0,
        })
        .collect();
    Summary::new(&records, 0, &mut TokenLog::default())
}

fn rows(grid: &Grid, failing: &[bool]) -> Vec<Row> {
    grid.points()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(point, knobs)| Row {
            point,
            knobs,
            outcome: if failing[point % failing.len()] {
                Err(format!("point {point} refused: \"quoted\", with commas\nand a new line"))
            } else {
                Ok(summary(1 + point as u32 % 5, point as u32))
            },
            near: None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn sharded_then_merged_is_the_unsharded_csv(
        sizes in proptest::collection::vec(1usize..4, 1..4),
        zip in 0usize..3,
        failing in proptest::collection::vec(any::<bool>(), 1..5),
        count in 1usize..7,
    ) {
        let axis = |i: usize, n: usize| parse_axis(&format!("k{i}={}", (0..n).map(|v| (v * 8).to_string()).collect::<Vec<_>>().join(","))).unwrap();
        let grid = Grid {
            axes: sizes.iter().enumerate().map(|(i, &n)| axis(i, n)).collect(),
            zip: (0..zip).map(|j| axis(10 + j, 2)).collect(),
        };
        let knobs = grid.knobs().unwrap();
        let all = rows(&grid, &failing);
        let dir = tempfile::tempdir().unwrap();
        let (header, records) = csv_records(&knobs, &all);
        let whole = dir.path().join("all.csv");
        write_csv(&whole, &header, &records).unwrap();
        let id = identity::Identity::new("test", vec!["--request-rate=4".into()], &grid, all.len());
        let mut parts = Vec::new();
        // Shards written in reverse order, so the merge has to sort.
        for index in (0..count).rev() {
            let s = Shard { index, count };
            let mine: Vec<Row> = all.iter().filter(|r| s.contains(r.point)).cloned().collect();
            let (h, recs) = csv_records(&knobs, &mine);
            let p = dir.path().join(format!("s{index}.csv"));
            let mut files = Outputs::new();
            stage_csv(&mut files, &p, &h, &recs).unwrap();
            identity::stage(&mut files, &p, s, &id).unwrap();
            files.commit().unwrap();
            parts.push(p);
        }
        let (mh, mrecs) = merge(&parts).unwrap();
        let merged = dir.path().join("merged.csv");
        write_csv(&merged, &mh, &mrecs).unwrap();
        prop_assert_eq!(std::fs::read(&whole).unwrap(), std::fs::read(&merged).unwrap());
        // No temporary file is left behind: the CSVs, the shards' sidecars.
        prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2 * count + 2);
        if count > 1 && all.len() > 1 {
            // parts[count - 1] is slice 0, holding point 0: without it there is a gap.
            prop_assert!(merge(&parts[..count - 1]).is_err(), "a missing shard must be detected");
            let twice = [parts.clone(), vec![parts[count - 1].clone()]].concat();
            prop_assert!(merge(&twice).is_err(), "a shard given twice must be detected");
        }
    }
}

#[test]
fn ranking_ties_are_stable_and_failures_last() {
    let g = Grid { axes: vec![parse_axis("max-num-seqs=1..6").unwrap()], zip: vec![] };
    let mut rs: Vec<Row> = g
        .points()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(point, knobs)| Row { point, knobs, outcome: Ok(summary(3, 1)), near: None })
        .collect();
    // Points 1 and 4 tie on throughput with the rest but have a lower median TTFT: they win the
    // tie-break; point 2 failed; the other equal points keep grid order.
    let faster = summary(3, 0);
    assert_eq!(faster.output_throughput, rs[0].outcome.as_ref().unwrap().output_throughput);
    assert!(faster.median_ttft_ms < rs[0].outcome.as_ref().unwrap().median_ttft_ms);
    rs[1].outcome = Ok(faster.clone());
    rs[4].outcome = Ok(faster);
    rs[2].outcome = Err("refused".into());
    assert_eq!(rank(&rs, "output_throughput", false), [1, 4, 0, 3, 5, 2]);
    assert_eq!(rank(&rs, "output_throughput", true), [1, 4, 0, 3, 5, 2]);
    assert_eq!(rank(&rs, "median_ttft_ms", false), [0, 3, 5, 1, 4, 2]);
    assert_eq!(rank(&rs, "preemptions", true), [1, 4, 0, 3, 5, 2]);
}

#[test]
fn a_refused_point_is_a_row_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("s.csv");
    let csv_s = csv.to_str().unwrap();
    let out = ok(&["sweep", "--num-prompts", "8", "--grid", "max-model-len=200000,4096", "--csv", csv_s]);
    assert!(out.contains("failed: vllm would not start"), "{out}");
    let mut r = csv::Reader::from_path(&csv).unwrap();
    let h = r.headers().unwrap().clone();
    assert_eq!(&h[0], "point");
    assert_eq!(&h[1], "max-model-len");
    assert_eq!(&h[2], "completed");
    assert_eq!(&h[h.len() - 1], "error");
    let recs: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 2);
    assert!(recs[0][h.len() - 1].contains("would not start"));
    assert_eq!(&recs[0][2], "");
    assert_eq!(&recs[1][2], "8");
    assert_eq!(&recs[1][h.len() - 1], "");
}

#[test]
fn unknown_and_workload_flags_are_refused() {
    assert!(fails(&["sweep", "--grid", "max-num-sequences=8"]).contains("not a flag of `cachesim run`"));
    assert!(fails(&["sweep", "--grid", "trace=a.jsonl"]).contains("reads it once"));
    assert!(fails(&["sweep", "--grid", "max-num-seqs=8,x"]).contains("invalid value 'x'"));
    assert!(fails(&["sweep", "--zip", "tp=1,2", "--zip", "gpu=h100-sxm"]).contains("differ in length"));
    assert!(fails(&["sweep", "--rank-by", "speed"]).contains("unknown metric"));
    assert!(fails(&["sweep", "--rank-by", "max-num-seqs"]).contains("unknown metric"));
    assert!(fails(&["sweep", "--shard", "2/2"]).contains("0 <= I < N"));
}

/// The ranked table shows the metric it is ranked by, when that is not one of its columns.
#[test]
fn the_rank_by_metric_is_a_column() {
    let args = ["sweep", "--num-prompts", "8", "--grid", "max-num-seqs=8,16", "--rank-by", "p99_tpot_ms"];
    let out = ok(&args);
    let head = out.lines().find(|l| l.starts_with("rank")).unwrap_or_default();
    assert!(head.ends_with("failed  p99_tpot_ms"), "{out}");
    let out = ok(&["sweep", "--num-prompts", "8", "--grid", "max-num-seqs=8,16", "--rank-by", "median_ttft_ms"]);
    assert!(out.lines().any(|l| l.starts_with("rank") && l.ends_with("  failed  near #1")), "{out}");
}

/// A metric with error bars gets the `near #1` column: a point far below rank 1 is told apart
/// from it, one close to it is not; p99 TPOT has no residuals, so no column.
#[test]
fn points_within_the_error_of_the_best_are_marked() {
    let args = ["sweep", "--num-prompts", "100", "--request-rate", "inf", "--grid", "max-num-seqs=8,64,256"];
    let out = ok(&args);
    let rows: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("rank")).skip(1).take(3).collect();
    assert!(rows[0].ends_with(" yes") && rows[1].ends_with(" yes") && rows[2].ends_with(" no"), "{out}");
    assert!(rows[2].contains("   8  "), "max-num-seqs 8 ranks last: {out}");
    assert!(out.contains("near #1: 2 of 3 points cannot be told apart from rank 1 on output_throughput"), "{out}");
    let out = ok(&[&args[..], &["--rank-by", "p99_tpot_ms"]].concat());
    assert!(!out.contains("near #1"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    let marks: Vec<Option<bool>> =
        v["results"].as_array().unwrap().iter().map(|r| r["within_error_of_best"].as_bool()).collect();
    assert_eq!(marks, [Some(true), Some(true), Some(false)], "{v}");
}

#[test]
fn sharded_runs_merge_into_the_unsharded_csv_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let base = [
        "sweep",
        "--num-prompts",
        "12",
        "--request-rate",
        "20",
        "--grid",
        "max-num-seqs=2,4,8",
        "--grid",
        "block=16,32",
    ];
    let run = |extra: &[&str], threads: &str| {
        common::ok_at_threads(&[&base[..], extra].concat(), threads);
    };
    run(&["--csv", &p("all1.csv")], "1");
    run(&["--csv", &p("all2.csv")], "2");
    run(&["--csv", &p("all4.csv")], "4");
    for i in 0..4 {
        run(&["--shard", &format!("{i}/4"), "--csv", &p(&format!("s{i}.csv"))], "2");
    }
    let out = cachesim(&["merge", &p("s2.csv"), &p("s0.csv"), &p("s3.csv"), &p("s1.csv"), "--csv", &p("merged.csv")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all = std::fs::read(p("all1.csv")).unwrap();
    assert_eq!(all, std::fs::read(p("all2.csv")).unwrap(), "thread count changed the CSV");
    assert_eq!(all, std::fs::read(p("all4.csv")).unwrap(), "thread count changed the CSV");
    assert_eq!(all, std::fs::read(p("merged.csv")).unwrap(), "merged shards differ from the unsharded CSV");
    assert_eq!(String::from_utf8(all).unwrap().lines().count(), 7);
    // A slice of another sweep (another base rate), with the same columns, is refused by name.
    let other_csv = p("other1.csv");
    let other = [&base[..4], &["30"], &base[5..], &["--shard", "1/4", "--csv", &other_csv]].concat();
    common::ok_at_threads(&other, "2");
    let out = cachesim(&["merge", &p("s0.csv"), &p("other1.csv"), &p("s2.csv"), &p("s3.csv"), "--csv", &p("m2.csv")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("other1.csv") && err.contains("--request-rate=30"), "{err}");
    assert!(!Path::new(&p("m2.csv")).exists());
}

/// The rate search on a case solved by hand: 20 requests of 100 distinct prompt tokens and one
/// output token, sent at constant gaps g = 1 / rate, priced by an affine step model: a request
/// alone takes T = 0.01 s host + 100 × 1 ms = 0.11 s, its TTFT. For g >= T nobody waits; for g
/// a little under T each request waits for its predecessor's step, one per step, so request k
/// (0-based) has TTFT T + k (T − g) and the largest is T + 19 (T − g). Under the SLO
/// max TTFT <= T + δ the boundary is g* = T − δ / 19, i.e. rate* = 1 / (T − δ / 19).
#[test]
fn rate_search_finds_the_analytic_boundary() {
    use cachesim::cache::{CacheSpec, Policy};
    use cachesim::cost::Affine;
    use cachesim::engine::{EngineConfig, EngineKind, EngineVersion};
    use cachesim::plan::{search, SearchOptions, Slo};
    use cachesim::sim::{run, Keep, SimConfig};

    let mut doc = String::new();
    for i in 0..20u32 {
        let ids: Vec<u32> = (0..100).map(|t| i * 1000 + t).collect();
        doc += &serde_json::json!({"prompt_ids": ids, "output_len": 1}).to_string();
        doc.push('\n');
    }
    let file = cachesim::trace::parse(std::path::Path::new("t.jsonl"), doc.as_bytes(), &Default::default()).unwrap();
    let w = cachesim::workload::build(file, &Default::default()).unwrap();
    let version = EngineVersion::newest(EngineKind::Vllm);
    let cfg = SimConfig {
        engine: EngineConfig::new(version),
        cache: CacheSpec {
            policy: Policy::Paged,
            block_size: Some(16),
            page_size: None,
            capacity_tokens: None,
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    let cost = Affine { base_s: 0.01, per_prefill_token_s: 0.001, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 };
    let (t, delta) = (0.11, 0.0019);
    let slo: Slo = format!("ttft_max={}", (t + delta) * 1e3).parse().unwrap();
    let eval = |rate: f64| {
        let sends: Vec<(u32, f64)> = (0..20u32).map(|i| (i, i as f64 / rate)).collect();
        let mut sim = run(&w, &sends, &cfg, &cost, Keep::default());
        let s = Summary::new(&sim.records, sim.failed, &mut sim.log);
        Ok((slo.check(&sim.records, &s).0, s.max_itl_ms))
    };
    // The affine model as described: alone, TTFT is exactly T.
    let slow = eval(1.0).unwrap();
    assert!(slow.0);
    let boundary = 1.0 / (t - delta / 19.0);
    // The simulator agrees with the hand analysis on both sides of the boundary.
    assert!(eval(boundary * 0.9999).unwrap().0);
    assert!(!eval(boundary * 1.0001).unwrap().0);
    for tolerance in [0.05, 0.01, 0.001] {
        let o = SearchOptions { start_rate: 1.0, tolerance, ..Default::default() };
        let found = search(&o, eval).unwrap();
        let r = found.max_rate.unwrap();
        assert!(r <= boundary + 1e-9 && boundary < r * (1.0 + tolerance), "tol {tolerance}: {r} vs {boundary}");
        assert!(found.fails_at.unwrap() > boundary);
        assert!(found.simulations >= 5 && found.simulations < 25, "{}", found.simulations);
    }
}

#[test]
fn plan_json_gives_max_rate_and_simulations_per_configuration() {
    let out = ok(&[
        "plan",
        "--num-prompts",
        "40",
        "--slo",
        "ttft_p99=300,tpot_p99=50",
        "--grid",
        "max-num-seqs=4,16",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, seqs) in results.iter().zip(["4", "16"]) {
        assert_eq!(r["max-num-seqs"], seqs);
        assert!(r["simulations"].as_u64().unwrap() >= 2, "{r}");
        let rate = r["max_rate"].as_f64().unwrap();
        let at = &r["at_max_rate"];
        assert_eq!(at["rate"].as_f64().unwrap(), rate);
        assert!(at["slo_values"]["p99_ttft_ms"].as_f64().unwrap() <= 300.0);
        // Just above the bracket's lower end the SLO fails (within the 1 % tolerance).
        assert!(r["fails_at"].as_f64().unwrap() <= rate * 1.01 + 1e-9, "{r}");
    }
    // More room to batch sustains more load.
    assert!(results[1]["max_rate"].as_f64().unwrap() > results[0]["max_rate"].as_f64().unwrap());
    assert!(fails(&["plan", "--slo", "ttft_p99=300", "--request-rate", "5"]).contains("drop --request-rate"));
    assert!(fails(&["plan", "--slo", "ttft_p99=300", "--grid", "request-rate=1,2"]).contains("cannot vary"));
}

#[test]
fn plan_can_keep_the_traces_own_arrival_pattern() {
    let out = ok(&["plan", "--trace-shape", "--slo", "ttft_p99=100", "--grid", "max-num-seqs=4,16", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["arrivals"], "trace");
    let rates: Vec<f64> = v["results"].as_array().unwrap().iter().map(|r| r["max_rate"].as_f64().unwrap()).collect();
    for r in v["results"].as_array().unwrap() {
        assert!(r["at_max_rate"]["slo_values"]["p99_ttft_ms"].as_f64().unwrap() <= 100.0);
        assert!(r["fails_at"].as_f64().unwrap() <= r["max_rate"].as_f64().unwrap() * 1.01 + 1e-9);
    }
    assert!(rates[1] > rates[0], "{rates:?}");
    // Without time stamps there is no shape to keep.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.jsonl");
    ok(&["gen", "random", "--num-prompts", "5", "-o", f.to_str().unwrap()]);
    let err = fails(&["plan", "--trace", f.to_str().unwrap(), "--trace-shape", "--slo", "ttft_p99=100"]);
    assert!(err.contains("no time stamps"), "{err}");
    assert!(
        fails(&["plan", "--trace-shape", "--slo", "ttft_p99=100", "--grid", "time-scale=1,2"]).contains("cannot vary")
    );
}

/// Off a terminal (stderr is a pipe here), a sweep says on stderr how many points and requests
/// it runs before the first, then one line per tenth of the points, the same lines at any thread
/// count; stdout holds the table alone.
#[test]
fn stderr_counts_the_points_and_shows_progress_off_a_terminal() {
    let args = ["sweep", "--request-rate", "20", "--grid", "max-num-seqs=8,16,24,32,48"];
    let run = |threads: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
            .args(args)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // A line carries its time estimate only after 10 s, which a loaded machine may reach.
        let stderr = String::from_utf8(out.stderr).unwrap();
        let stderr: String = stderr.lines().map(|l| format!("{}\n", l.split(", ").next().unwrap())).collect();
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let (stdout, stderr) = run("2");
    let expected = "simulating: 5 points × 160 requests\n\
                    simulating: 20% (1 of 5 points)\nsimulating: 40% (2 of 5 points)\n\
                    simulating: 60% (3 of 5 points)\nsimulating: 80% (4 of 5 points)\n\
                    simulating: 100% (5 of 5 points)\n";
    assert_eq!(stderr, expected);
    assert!(!stdout.contains("simulating"), "{stdout}");
    assert_eq!(run("1").1, expected);
    // A point sends its --num-prompts (the most of them when the grid varies it).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["sweep", "--grid", "num-prompts=10,40", "--grid", "max-num-seqs=8"])
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stderr).unwrap().starts_with("simulating: 2 points × 40 requests\n"));
    assert!(
        fails(&["sweep", "--grid", "max-num-seqs=1..11", "--max-points", "10"]).contains("more than --max-points (10)")
    );
}
