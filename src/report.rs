//! Human-readable and JSON reports. For now: the `cachesim cache` table (one row per policy
//! and capacity) with the trace summary above it, and its JSON document.

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
