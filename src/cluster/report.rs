//! The cluster's part of a run report: one row per instance (requests, prefix-cache hit ratio,
//! busy share, peak KV, preemptions) and the router's own figures (share of requests routed by
//! prefix, router-predicted against real hit tokens), as text and as the JSON `instances` and
//! `router` entries.

use crate::report::thousands;
use crate::sim::{InstanceStats, RouterStats};
use serde::Serialize;
use std::fmt::Write;

/// One instance's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceRow {
    pub instance: usize,
    pub requests: u64,
    /// Prompt tokens reused from the instance's cache ÷ prompt tokens (completed requests).
    pub hit_ratio: f64,
    /// Busy time ÷ the run's duration.
    pub busy_share: f64,
    pub peak_kv_tokens: u64,
    /// Peak KV held ÷ the instance's capacity.
    pub peak_kv_share: f64,
    pub preemptions: u64,
    pub steps: u64,
}

/// The router's JSON entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouterReport {
    pub policy: String,
    pub routed_by_prefix: u64,
    pub routed_by_load: u64,
    /// Routed by prefix ÷ routed.
    pub prefix_share: f64,
    pub predicted_hit_tokens: u64,
    pub real_hit_tokens: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The rows of `stats`, over a run of `duration_s` seconds on instances of `capacity` KV tokens.
pub fn rows(stats: &[InstanceStats], duration_s: f64, capacity: u64) -> Vec<InstanceRow> {
    stats
        .iter()
        .enumerate()
        .map(|(i, s)| InstanceRow {
            instance: i,
            requests: s.requests,
            hit_ratio: ratio(s.cached_prompt_tokens, s.prompt_tokens),
            busy_share: if duration_s > 0.0 { s.busy_s / duration_s } else { 0.0 },
            peak_kv_tokens: s.peak_kv_tokens,
            peak_kv_share: ratio(s.peak_kv_tokens, capacity),
            preemptions: s.preemptions,
            steps: s.steps,
        })
        .collect()
}

/// The router's entry.
pub fn router(policy: &str, r: &RouterStats) -> RouterReport {
    RouterReport {
        policy: policy.to_string(),
        routed_by_prefix: r.by_prefix,
        routed_by_load: r.by_load,
        prefix_share: ratio(r.by_prefix, r.by_prefix + r.by_load),
        predicted_hit_tokens: r.predicted_hit_tokens,
        real_hit_tokens: r.real_hit_tokens,
    }
}

/// The per-instance table and the router's line, as text.
pub fn text(rows: &[InstanceRow], r: &RouterReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:=^50}", " Instances ");
    let _ = writeln!(
        s,
        "{:>8} {:>9} {:>8} {:>8} {:>12} {:>8} {:>11}",
        "instance", "requests", "hit", "busy", "peak KV", "KV %", "preemptions"
    );
    for x in rows {
        let _ = writeln!(
            s,
            "{:>8} {:>9} {:>7.1}% {:>7.1}% {:>12} {:>7.1}% {:>11}",
            x.instance,
            thousands(x.requests),
            100.0 * x.hit_ratio,
            100.0 * x.busy_share,
            thousands(x.peak_kv_tokens),
            100.0 * x.peak_kv_share,
            thousands(x.preemptions)
        );
    }
    let _ = writeln!(
        s,
        "Router {}: {} of {} requests routed by prefix ({:.1}%); hit tokens predicted {}, real {}",
        r.policy,
        thousands(r.routed_by_prefix),
        thousands(r.routed_by_prefix + r.routed_by_load),
        100.0 * r.prefix_share,
        thousands(r.predicted_hit_tokens),
        thousands(r.real_hit_tokens)
    );
    let _ = writeln!(s, "{:=^50}", "");
    s
}
