//! The cluster's part of a run report: one row per instance (requests, prefix-cache hit ratio,
//! busy share, peak KV, preemptions) and the router's own figures (share of requests routed by
//! prefix, router-predicted against real hit tokens), as text and as the JSON `instances` and
//! `router` entries.

use cachesim_core::sim::{InstanceStats, RouterStats};
use cachesim_core::text::thousands;
use serde::Serialize;
use std::fmt::Write;

/// One instance's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceRow {
    pub instance: usize,
    pub role: cachesim_core::sim::Role,
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
            role: s.role,
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
        "{:>8} {:>8} {:>9} {:>8} {:>8} {:>12} {:>8} {:>11}",
        "instance", "role", "requests", "hit", "busy", "peak KV", "KV %", "preemptions"
    );
    for x in rows {
        let _ = writeln!(
            s,
            "{:>8} {:>8} {:>9} {:>7.1}% {:>7.1}% {:>12} {:>7.1}% {:>11}",
            x.instance,
            match x.role {
                cachesim_core::sim::Role::Unified => "serve",
                cachesim_core::sim::Role::Prefill => "prefill",
                cachesim_core::sim::Role::Decode => "decode",
            },
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

/// Mean and median of each TTFT part over the completed requests of a disaggregated run, as
/// text: prefill queue (arrival at the prefill instance to its first scheduling), prefill (to
/// its first token), transfer wait (to the transfer's start: the decode instance's allocation
/// and the link's queue), transfer, and the decode instance's first step (to the client's first
/// token). The client's TTFT also holds the request overhead before the arrival.
pub fn ttft_breakdown(
    records: &[cachesim_core::metrics::RequestRecord],
    times: &[cachesim_core::cluster::pd::PdTimes],
) -> String {
    let mut parts: [Vec<f64>; 5] = Default::default();
    for r in records {
        let t = &times[r.id as usize];
        let cuts =
            [t.arrived_s, r.first_scheduled_s, t.prefill_done_s, t.transfer_start_s, t.transfer_end_s, r.first_token_s];
        if cuts.iter().any(|x| x.is_nan()) {
            continue;
        }
        for (k, p) in parts.iter_mut().enumerate() {
            p.push(1e3 * (cuts[k + 1] - cuts[k]));
        }
    }
    let names = ["prefill queue", "prefill", "transfer wait", "transfer", "decode first step"];
    let mut s = String::new();
    let _ = writeln!(s, "{:-^50}", "TTFT breakdown");
    let _ = writeln!(s, "{:<20} {:>14} {:>14}", "part", "mean (ms)", "median (ms)");
    for (name, p) in names.iter().zip(parts.iter_mut()) {
        let mean = if p.is_empty() { 0.0 } else { p.iter().sum::<f64>() / p.len() as f64 };
        p.sort_by(f64::total_cmp);
        let median = cachesim_core::metrics::percentile(p, 50.0);
        let _ = writeln!(s, "{name:<20} {mean:>14.2} {median:>14.2}");
    }
    s
}

/// The deployment's line of the config echo (runs of more than one instance).
pub fn echo(c: &cachesim_core::cluster::ClusterConfig) -> String {
    let name = |k: cachesim_core::cluster::router::RouterKind| k.name();
    match &c.pd {
        None => format!("Cluster:        {} instances behind the {} router\n", c.instances, name(c.router)),
        Some(pd) => format!(
            "Cluster:        {} prefill + {} decode instances ({} hand-off) · prefill router {} · decode router {} · KV link {} × {} Gb/s, {} ms per transfer\n",
            pd.prefill,
            pd.decode,
            match pd.style {
                cachesim_core::cluster::pd::PdStyle::Vllm => "vLLM",
                cachesim_core::cluster::pd::PdStyle::Sglang => "SGLang",
            },
            name(c.router),
            name(c.decode_router),
            pd.link.links,
            pd.link.gbps,
            pd.link.latency_ms
        ),
    }
}

/// One completed request of a disaggregated run, for `--requests-csv`: the request's record
/// (seconds) and its way through the pools.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PdRequestRow {
    pub id: u32,
    pub send_s: f64,
    pub first_token_s: f64,
    pub last_token_s: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub cached_prompt_tokens: u32,
    pub preemptions: u32,
    pub first_scheduled_s: f64,
    pub prefill_instance: u32,
    pub decode_instance: u32,
    pub prefill_done_s: f64,
    pub transfer_start_s: f64,
    pub transfer_end_s: f64,
    pub transfer_bytes: u64,
}

cachesim_core::table_rows!(PdRequestRow);

/// The rows of a disaggregated run's completed requests, in completion order. Decode
/// instances are numbered after the prefill instances, as in the instance table.
pub fn pd_rows(
    records: &[cachesim_core::metrics::RequestRecord],
    times: &[cachesim_core::cluster::pd::PdTimes],
    prefill: u32,
) -> Vec<PdRequestRow> {
    records
        .iter()
        .map(|r| {
            let t = &times[r.id as usize];
            PdRequestRow {
                id: r.id,
                send_s: r.send_s,
                first_token_s: r.first_token_s,
                last_token_s: r.last_token_s,
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                cached_prompt_tokens: r.cached_prompt_tokens,
                preemptions: r.preemptions,
                first_scheduled_s: r.first_scheduled_s,
                prefill_instance: t.prefill_instance,
                decode_instance: t.decode_instance + prefill,
                prefill_done_s: t.prefill_done_s,
                transfer_start_s: t.transfer_start_s,
                transfer_end_s: t.transfer_end_s,
                transfer_bytes: t.bytes,
            }
        })
        .collect()
}
