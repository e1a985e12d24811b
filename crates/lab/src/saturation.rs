//! Saying when a run measured an overloaded server. A benchmark that sends faster than the
//! engine serves reports queueing, not the engine: TTFT grows with the queue, the prefix cache
//! is thrashed by requests that all hold KV at once. [`diagnose`] looks for four signs, each
//! with a fixed threshold (docs/reference/refusals.md), and when any is present estimates the rate the
//! engine sustains and names the commands that answer the unloaded question.
//!
//! Thresholds:
//! - queue growing to the end: the mean queue wait (send → first scheduled) of the last fifth of
//!   the sends exceeds that of the first fifth by more than the mean service time (latency −
//!   wait), with at least 10 completed requests;
//! - TTFT dominated by waiting: the mean queue wait (send → first scheduled) is at least half
//!   the mean TTFT and longer than the mean service time (latency − wait);
//! - preemptions (vLLM) or retractions (SGLang): at least 10% of the completed requests;
//! - KV full: requests held at least 95% of the KV cache for at least half the busy time.

use cachesim_core::metrics::{RequestRecord, Summary};
use cachesim_core::sim::{LoadStats, KV_FULL_SHARE};
use cachesim_core::text::thousands;
use serde::Serialize;
use std::fmt::Write;

/// Completed requests needed to compare the first and last fifth of the sends.
pub const MIN_FOR_TREND: usize = 10;
/// Share of the mean TTFT spent waiting that counts as waiting-dominated.
pub const WAIT_SHARE: f64 = 0.5;
/// Preemptions per completed request that count as thrashing.
pub const PREEMPTION_SHARE: f64 = 0.10;
/// Share of the busy time with the KV cache full that counts as memory-bound.
pub const KV_FULL_TIME_SHARE: f64 = 0.5;
/// The suggested `--request-rate` is this share of the sustainable estimate (headroom).
pub const HEADROOM: f64 = 0.8;

/// One sign of overload, with the measured value and its threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signal {
    /// `queue_growing`, `ttft_waiting`, `preemptions` or `kv_full`.
    pub kind: &'static str,
    pub value: f64,
    pub threshold: f64,
    /// What it means, in one line.
    pub text: String,
}

/// The diagnosis of a saturated run (the `saturation` object of `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saturation {
    pub signals: Vec<Signal>,
    /// Completed requests per second of this run: what a saturated engine serves.
    pub sustainable_rate_rps: f64,
    /// How the estimate was made.
    pub basis: String,
    /// A rate below saturation to rerun with (`HEADROOM` × the estimate).
    pub suggested_request_rate: f64,
}

/// Rounds to two significant digits, for a rate to type.
fn two_digits(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 0.0;
    }
    let scale = 10f64.powi(1 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

/// The diagnosis, or `None` when no sign of overload is present.
pub fn diagnose(m: &Summary, records: &[RequestRecord], load: &LoadStats) -> Option<Saturation> {
    let mut signals = Vec::new();
    let n = records.len();
    let wait_of = |r: &RequestRecord| (r.first_scheduled_s - r.send_s).max(0.0);
    if n >= MIN_FOR_TREND {
        // Requests in send order (ties by id, the clients' order): the first and last fifth.
        let mut order: Vec<&RequestRecord> = records.iter().collect();
        order.sort_by(|a, b| a.send_s.total_cmp(&b.send_s).then(a.id.cmp(&b.id)));
        let k = n / 5;
        let mean = |rs: &[&RequestRecord]| rs.iter().map(|r| wait_of(r)).sum::<f64>() / rs.len() as f64;
        let (early, late) = (mean(&order[..k]), mean(&order[n - k..]));
        let service = records.iter().map(|r| r.latency_s() - wait_of(r)).sum::<f64>() / n as f64;
        if late - early >= service {
            signals.push(Signal {
                kind: "queue_growing",
                value: late - early,
                threshold: service,
                text: format!(
                    "queue growing to the end: the last fifth of the sends waited {late:.2} s on average, the \
                     first fifth {early:.2} s (growth above the {service:.2} s a request takes to serve; {} \
                     waiting when the last send arrived at {:.1} s)",
                    load.backlog_at_last_send, load.last_send_s
                ),
            });
        }
    }
    if n > 0 {
        let n = n as f64;
        let wait = records.iter().map(wait_of).sum::<f64>() / n;
        let ttft = records.iter().map(RequestRecord::ttft_s).sum::<f64>() / n;
        let service = records.iter().map(|r| r.latency_s()).sum::<f64>() / n - wait;
        if ttft > 0.0 && wait >= WAIT_SHARE * ttft && wait > service {
            signals.push(Signal {
                kind: "ttft_waiting",
                value: wait / ttft,
                threshold: WAIT_SHARE,
                text: format!(
                    "TTFT is mostly queueing: mean wait {wait:.2} s of mean TTFT {ttft:.2} s ({:.0}%, threshold \
                     50%), longer than the {service:.2} s a request then takes",
                    wait / ttft * 100.0
                ),
            });
        }
        let per_request = m.preemptions as f64 / n;
        if per_request >= PREEMPTION_SHARE {
            signals.push(Signal {
                kind: "preemptions",
                value: per_request,
                threshold: PREEMPTION_SHARE,
                text: format!(
                    "{} preemptions/retractions for {} completed requests ({:.2} per request, threshold {})",
                    thousands(m.preemptions),
                    thousands(records.len() as u64),
                    per_request,
                    PREEMPTION_SHARE
                ),
            });
        }
    }
    if load.busy_s > 0.0 && load.kv_full_s >= KV_FULL_TIME_SHARE * load.busy_s {
        signals.push(Signal {
            kind: "kv_full",
            value: load.kv_full_s / load.busy_s,
            threshold: KV_FULL_TIME_SHARE,
            text: format!(
                "KV cache full (≥{:.0}% held by requests) for {:.0}% of the busy time (threshold 50%)",
                KV_FULL_SHARE * 100.0,
                load.kv_full_s / load.busy_s * 100.0
            ),
        });
    }
    if signals.is_empty() {
        return None;
    }
    let rate = m.request_throughput;
    Some(Saturation {
        signals,
        sustainable_rate_rps: rate,
        basis: format!(
            "the completed-request throughput of this run ({} requests in {:.1} s): a saturated engine \
             works at its capacity, so this is about what it serves for this request mix",
            thousands(m.completed),
            m.duration
        ),
        suggested_request_rate: two_digits(HEADROOM * rate),
    })
}

/// The diagnosis block printed after the report; `unloaded` is the `cachesim cache` command
/// answering the hit-ratio question without queueing.
pub fn text(s: &Saturation, unloaded: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Saturated:      this run measured an overloaded server, not the engine unloaded");
    for sig in &s.signals {
        let _ = writeln!(out, "  - {}", sig.text);
    }
    let _ = writeln!(out, "Sustainable:    about {:.2} req/s — {}", s.sustainable_rate_rps, s.basis);
    let _ = writeln!(
        out,
        "Unloaded:       rerun with --request-rate {} (the same other flags) for latencies below saturation;",
        s.suggested_request_rate
    );
    let _ = writeln!(out, "                `{unloaded}` for the prefix-cache hit ratio without queueing");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32, send: f64, sched: f64, first: f64, last: f64, preemptions: u32) -> RequestRecord {
        RequestRecord {
            id,
            send_s: send,
            first_token_s: first,
            last_token_s: last,
            prompt_tokens: 10,
            output_tokens: 10,
            cached_prompt_tokens: 0,
            preemptions,
            first_scheduled_s: sched,
            priority: 0,
        }
    }

    fn summary(records: &[RequestRecord]) -> Summary {
        Summary::new(records, 0, &mut cachesim_core::metrics::TokenLog::default())
    }

    #[test]
    fn an_unloaded_run_has_no_diagnosis() {
        // Each request is scheduled at once and served in 1 s.
        let recs: Vec<_> = (0..10).map(|i| rec(i, i as f64, i as f64, i as f64 + 0.1, i as f64 + 1.0, 0)).collect();
        let load = LoadStats { backlog_at_last_send: 1, last_send_s: 9.0, busy_s: 10.0, kv_full_s: 1.0 };
        assert_eq!(diagnose(&summary(&recs), &recs, &load), None);
    }

    #[test]
    fn every_sign_and_the_estimate() {
        // All sent at 0; request i waits i seconds and is served in 1 s.
        let recs: Vec<_> = (0..10).map(|i| rec(i, 0.0, i as f64, i as f64 + 0.1, i as f64 + 1.0, 1)).collect();
        let load = LoadStats { backlog_at_last_send: 10, last_send_s: 0.0, busy_s: 10.0, kv_full_s: 6.0 };
        let s = diagnose(&summary(&recs), &recs, &load).expect("saturated");
        let kinds: Vec<&str> = s.signals.iter().map(|x| x.kind).collect();
        assert_eq!(kinds, ["queue_growing", "ttft_waiting", "preemptions", "kv_full"]);
        // Mean wait 4.5 s of mean TTFT 4.6 s.
        assert!((s.signals[1].value - 4.5 / 4.6).abs() < 1e-12);
        // 10 requests in 10 s: 1 req/s sustained; 0.8 suggested.
        assert!((s.sustainable_rate_rps - 1.0).abs() < 1e-12);
        assert_eq!(s.suggested_request_rate, 0.8);
        assert_eq!(two_digits(4.56), 4.6);
        assert_eq!(two_digits(0.012345), 0.012);
        assert_eq!(two_digits(1234.0), 1200.0);
    }
}
