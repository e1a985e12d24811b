//! Human-readable and JSON reports: the trace summary, the `cachesim cache` table (one row
//! per policy and capacity) and its JSON document, and the `cachesim analyze` report.

use crate::analyze::{Analysis, Unit};
use crate::replay::ReplayResult;
use crate::workload::TraceInfo;
use serde::Serialize;
use std::fmt::Write;

/// The `cachesim cache --json` document.
#[derive(Debug, Serialize)]
pub struct CacheReport<'a> {
    pub trace: &'a TraceInfo,
    pub results: &'a [ReplayResult],
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Capacity for display: a token count or `unlimited`.
pub fn capacity(c: Option<u64>) -> String {
    c.map_or_else(|| "unlimited".to_string(), thousands)
}

/// The trace summary lines printed above every report.
pub fn trace_summary(t: &TraceInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Trace:          {} ({})", t.path.display(), t.format);
    let mut what = format!("{} requests from {} records", thousands(t.requests as u64), thousands(t.records as u64));
    if t.sessions > 0 {
        let _ = write!(what, ", {} multi-turn sessions", thousands(t.sessions as u64));
    }
    let _ = writeln!(s, "Requests:       {what}");
    let _ = writeln!(
        s,
        "Tokens:         {} prompt, {} output ({} stored, the rest synthesised on demand)",
        thousands(t.prompt_tokens),
        thousands(t.output_tokens),
        thousands(t.stored_tokens)
    );
    if let Some(tok) = &t.tokenizer {
        let _ = writeln!(s, "Tokenizer:      {tok}");
    }
    if let Some(b) = t.trace_block_size {
        let _ = writeln!(s, "Trace blocks:   {b} tokens per hash id");
    }
    for n in &t.notes {
        let _ = writeln!(s, "Note:           {n}");
    }
    if t.skipped.total() > 0 {
        let _ = writeln!(s, "Skipped:        {} records", thousands(t.skipped.total()));
        for (reason, n) in &t.skipped.reasons {
            let _ = writeln!(s, "  {:>8}  {reason}", thousands(*n));
        }
    }
    s
}

/// The cache comparison table.
pub fn cache_table(results: &[ReplayResult]) -> String {
    let header = [
        "policy",
        "block",
        "page",
        "capacity",
        "requests",
        "prompt tok",
        "hit tok",
        "hit ratio",
        "req hit",
        "evicted tok",
        "peak used",
        "block waste",
        "preempt",
        "unfit",
    ];
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.policy.to_string(),
                r.block_size.map_or_else(dash, |b| b.to_string()),
                r.page_size.map_or_else(dash, |p| p.to_string()),
                capacity(r.capacity_tokens),
                thousands(r.requests),
                thousands(r.prompt_tokens),
                thousands(r.hit_tokens),
                format!("{:.2}%", r.hit_ratio * 100.0),
                format!("{:.2}%", r.mean_request_hit_ratio * 100.0),
                thousands(r.evicted_tokens),
                thousands(r.peak_used_tokens),
                r.partial_block_waste_tokens.map_or_else(dash, thousands),
                thousands(r.preemptions),
                thousands(r.unfit_requests),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        let _ = writeln!(s, "{}", parts.join("  ").trim_end());
    };
    line(&mut s, &mut header.iter().copied());
    let _ = writeln!(s, "{}", "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
    for row in &rows {
        line(&mut s, &mut row.iter().map(String::as_str));
    }
    s
}

/// The `cachesim analyze` report as text.
pub fn analysis_text(a: &Analysis) -> String {
    let r = &a.repetition;
    let unit = match r.unit {
        Unit::Chars => "chars",
        Unit::Tokens => "tokens",
    };
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    let mut s = String::new();
    let scope = serde_json::to_value(r.scope).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let _ = writeln!(s, "Prefix repetition (N = {}, L > {} {unit}, scope {scope}):", r.min_count, r.min_len);
    let _ = writeln!(s, "  conversations        {}", thousands(r.conversations as u64));
    let _ = writeln!(
        s,
        "  shared prefixes      {}  (pruned leaves at count ≥ N, longer than L)",
        thousands(r.leaves as u64)
    );
    let _ = writeln!(s, "  repetition           {}  (shared prefixes / conversations)", pct(r.repetition));
    let _ = writeln!(s, "  coverage             {}  (conversations under a shared prefix)", pct(r.coverage));
    let _ = writeln!(
        s,
        "  prefix length        mean {:.1}, median {:.1}, max {} {unit}",
        r.mean_prefix_len, r.median_prefix_len, r.max_prefix_len
    );
    if !r.top_prefixes.is_empty() {
        let _ = writeln!(s, "\nMost shared prefixes:\n  {:>7}  {:>8}  prefix", "count", "length");
        for p in &r.top_prefixes {
            let _ =
                writeln!(s, "  {:>7}  {:>8}  \"{}\"", thousands(p.count as u64), thousands(p.length as u64), p.text);
        }
    }
    if let Some(b) = &a.bounds {
        let _ = writeln!(s, "\nWhat a cache could gain (tokens, one request at a time, unlimited KV;");
        let _ = writeln!(s, "paged block 1 equals the radix tree there):");
        for x in &b.unlimited {
            let name = x.block_size.map_or_else(|| "radix / block 1".to_string(), |bs| format!("paged, block {bs}"));
            let _ = writeln!(s, "  {name:<16} {:>8}   peak {} tokens", pct(x.hit_ratio), thousands(x.peak_used_tokens));
        }
        let _ = writeln!(s, "\nHit ratio against KV capacity ({} bytes per token):", thousands(b.kv_bytes_per_token));
        let _ = writeln!(
            s,
            "  {:>14}  {:>9}  {:>16}  {:>16}",
            "capacity tok", "KV GB", "paged-16 (bound)", "radix (bound)"
        );
        for pair in b.capacity.chunks(2) {
            let cell =
                |p: &crate::analyze::CapacityPoint| format!("{} ({:.0}%)", pct(p.hit_ratio), p.share_of_bound * 100.0);
            let _ = writeln!(
                s,
                "  {:>14}  {:>9.3}  {:>16}  {:>16}",
                thousands(pair[0].capacity_tokens),
                pair[0].kv_gb,
                cell(&pair[0]),
                pair.get(1).map(cell).unwrap_or_default()
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
