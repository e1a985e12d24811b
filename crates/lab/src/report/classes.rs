//! Figures per priority class, after the benchmark report of a run whose requests carry more
//! than one `priority` (the trace's key or `--priority-mix`): completed requests and the TTFT,
//! TPOT and E2E statistics of each class, computed as the clients compute them for all requests
//! (TPOT excludes the first token, numpy linear percentiles). ITL is pooled over every request
//! by the clients and is not split here.

use cachesim_core::metrics::{RequestRecord, Stats};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One priority class's figures (milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassRow {
    pub priority: i32,
    pub completed: u64,
    pub mean_ttft_ms: f64,
    pub median_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub median_tpot_ms: f64,
    pub p99_tpot_ms: f64,
    pub median_e2e_latency_ms: f64,
    pub p99_e2e_latency_ms: f64,
}

/// The rows, lowest priority value (served first) first; `None` when the completed requests are
/// of one class.
pub fn rows(records: &[RequestRecord]) -> Option<Vec<ClassRow>> {
    let mut by: BTreeMap<i32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        by.entry(r.priority).or_default().push(r);
    }
    if by.len() < 2 {
        return None;
    }
    let rows = by
        .into_iter()
        .map(|(priority, rs)| {
            let t = Stats::of(&mut rs.iter().map(|r| r.ttft_s()).collect::<Vec<_>>()).ms();
            let p = Stats::of(&mut rs.iter().filter_map(|r| r.tpot_s()).collect::<Vec<_>>()).ms();
            let e = Stats::of(&mut rs.iter().map(|r| r.latency_s()).collect::<Vec<_>>()).ms();
            ClassRow {
                priority,
                completed: rs.len() as u64,
                mean_ttft_ms: t.mean,
                median_ttft_ms: t.median,
                p99_ttft_ms: t.p99,
                median_tpot_ms: p.median,
                p99_tpot_ms: p.p99,
                median_e2e_latency_ms: e.median,
                p99_e2e_latency_ms: e.p99,
            }
        })
        .collect();
    Some(rows)
}

/// The text block, its heading saying which classes `engine` serves first.
pub fn text(rows: &[ClassRow], engine: &cachesim_core::engine::EngineConfig) -> String {
    let order = match (engine.engine, engine.sglang_priority) {
        (_, Some(p)) if p.low_values_first => {
            "lower is served first under --enable-priority-scheduling --schedule-low-priority-values-first"
        }
        (_, Some(_)) => "higher is served first under --enable-priority-scheduling",
        (cachesim_core::engine::EngineKind::Sglang, None) => {
            "served in arrival order; --enable-priority-scheduling serves higher first"
        }
        _ => "lower is served first under --scheduling-policy priority",
    };
    let mut s = format!(
        "Per priority class ({order}):\n  priority  completed  mean TTFT  median TTFT  P99 TTFT  median TPOT  P99 TPOT  median E2E   P99 E2E  (ms)\n",
    );
    for r in rows {
        writeln!(
            s,
            "  {:>8}  {:>9}  {:>9.2}  {:>11.2}  {:>8.2}  {:>11.2}  {:>8.2}  {:>10.2}  {:>8.2}",
            r.priority,
            r.completed,
            r.mean_ttft_ms,
            r.median_ttft_ms,
            r.p99_ttft_ms,
            r.median_tpot_ms,
            r.p99_tpot_ms,
            r.median_e2e_latency_ms,
            r.p99_e2e_latency_ms
        )
        .expect("writing to a String");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32, priority: i32, ttft: f64, last: f64, out: u32) -> RequestRecord {
        RequestRecord {
            id,
            send_s: 0.0,
            first_token_s: ttft,
            last_token_s: last,
            prompt_tokens: 10,
            output_tokens: out,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: 0.0,
            priority,
        }
    }

    #[test]
    fn classes_by_hand() {
        assert_eq!(rows(&[rec(0, 3, 0.1, 0.5, 5), rec(1, 3, 0.2, 0.6, 5)]), None, "one class: no block");
        let rs = [rec(0, 1, 0.1, 0.5, 5), rec(1, 1, 0.3, 0.7, 3), rec(2, -2, 0.05, 0.25, 1)];
        let rows = rows(&rs).unwrap();
        assert_eq!(rows.iter().map(|r| (r.priority, r.completed)).collect::<Vec<_>>(), vec![(-2, 1), (1, 2)]);
        let one = &rows[1];
        assert!((one.mean_ttft_ms - 200.0).abs() < 1e-9 && (one.median_ttft_ms - 200.0).abs() < 1e-9);
        // TPOTs: (0.5 − 0.1) / 4 = 100 ms and (0.7 − 0.3) / 2 = 200 ms; p99 = 100 + 0.99 × 100.
        assert!((one.median_tpot_ms - 150.0).abs() < 1e-9 && (one.p99_tpot_ms - 199.0).abs() < 1e-9);
        // One output token: no TPOT, counted as numpy counts an empty list ([0]).
        assert_eq!(rows[0].median_tpot_ms, 0.0);
        assert!((rows[0].p99_e2e_latency_ms - 250.0).abs() < 1e-9);
        assert!(text(&rows, &cachesim_core::engine::EngineConfig::new(cachesim_core::engine::EngineVersion::Vllm033))
            .lines()
            .nth(2)
            .unwrap()
            .trim_start()
            .starts_with("-2"));
    }
}
