//! Human-readable and JSON reports: the trace summary, the `cachesim cache` table (one row
//! per policy and capacity) and its JSON document, and the `cachesim analyze` report.

pub mod autoscale;
pub mod classes;
pub mod cluster;
pub mod faults;

use cachesim_core::analyze::{Analysis, Unit};
use cachesim_core::metrics::Summary;
use cachesim_core::replay::ReplayResult;
use cachesim_core::text::thousands;
use cachesim_core::workload::TraceInfo;
use serde::Serialize;
use std::fmt::Write;

/// The `cachesim cache --json` document.
#[derive(Debug, Serialize)]
pub struct CacheReport<'a> {
    pub trace: &'a TraceInfo,
    pub results: &'a [ReplayResult],
}

/// Capacity for display: a token count or `unlimited`.
pub fn capacity(c: Option<u64>) -> String {
    c.map_or_else(|| "unlimited".to_string(), thousands)
}

/// The trace summary lines printed above every report.
pub fn trace_summary(t: &TraceInfo) -> String {
    trace_summary_sent(t, t.requests)
}

/// The trace summary of a run that sends `sent` of the trace's requests (`--num-prompts`).
pub fn trace_summary_sent(t: &TraceInfo, sent: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Trace:          {} ({})", t.path.display(), t.format);
    let of = if sent < t.requests { format!("{} of ", thousands(sent as u64)) } else { String::new() };
    let n =
        |count: usize, what: &str| format!("{} {what}{}", thousands(count as u64), if count == 1 { "" } else { "s" });
    let mut what = format!("{of}{} from {}", n(t.requests, "request"), n(t.records, "record"));
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
    // The host tier's columns appear only when a replay has one.
    let tiered = results.iter().any(|r| r.host_capacity_tokens.is_some());
    let disked = results.iter().any(|r| r.disk_capacity_tokens.is_some());
    let mut header = vec!["policy", "block", "page", "capacity"];
    if tiered {
        header.push("host");
    }
    if disked {
        header.push("disk");
    }
    header.extend(["requests", "prompt tok", "hit tok", "hit ratio"]);
    if tiered {
        header.extend(["host hit", "host evicted"]);
    }
    if disked {
        header.push("disk hit");
    }
    header.extend(["req hit", "evicted tok", "peak used", "block waste", "preempt", "unfit"]);
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let mut row = vec![
                r.policy.to_string(),
                r.block_size.map_or_else(dash, |b| b.to_string()),
                r.page_size.map_or_else(dash, |p| p.to_string()),
                capacity(r.capacity_tokens),
            ];
            if tiered {
                row.push(r.host_capacity_tokens.map_or_else(dash, thousands));
            }
            if disked {
                row.push(r.disk_capacity_tokens.map_or_else(dash, thousands));
            }
            row.extend([
                thousands(r.requests),
                thousands(r.prompt_tokens),
                thousands(r.hit_tokens),
                format!("{:.2}%", r.hit_ratio * 100.0),
            ]);
            if tiered {
                row.push(r.host_hit_ratio.map_or_else(dash, |h| format!("{:.2}%", h * 100.0)));
                row.push(r.host_evicted_tokens.map_or_else(dash, thousands));
            }
            if disked {
                row.push(r.disk_hit_ratio.map_or_else(dash, |h| format!("{:.2}%", h * 100.0)));
            }
            row.extend([
                format!("{:.2}%", r.mean_request_hit_ratio * 100.0),
                thousands(r.evicted_tokens),
                thousands(r.peak_used_tokens),
                r.partial_block_waste_tokens.map_or_else(dash, thousands),
                thousands(r.preemptions),
                thousands(r.unfit_requests),
            ]);
            row
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
    if let Some(b) = &a.block_references {
        let _ = writeln!(s, "\nBlock references (the trace's hash ids, in order):");
        let _ = writeln!(
            s,
            "  references           {}  ({} distinct; {} held by more than one request)",
            thousands(b.references),
            thousands(b.distinct),
            thousands(b.shared)
        );
        let _ = writeln!(
            s,
            "  repeats              {}  {}  (reusable with unlimited KV: Dynamo's \"cache efficiency\")",
            thousands(b.repeats),
            pct(b.repeat_share())
        );
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
            let cell = |p: &cachesim_core::analyze::CapacityPoint| {
                format!("{} ({:.0}%)", pct(p.hit_ratio), p.share_of_bound * 100.0)
            };
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

/// The `cachesim run --json` document: sglang's result keys at the top level.
#[derive(Debug, Serialize)]
pub struct RunReport<'a> {
    #[serde(flatten)]
    pub summary: &'a Summary,
    /// Requests sent (`--num-prompts`, else all of the trace).
    pub requests_sent: usize,
    /// Failed requests by reason (they add up to `failed`).
    pub failed_reasons: std::collections::BTreeMap<cachesim_core::engine::frontend::FailReason, u64>,
    /// Requests whose output the engine cut to fit the KV pool (SGLang, LightLLM).
    pub outputs_cut: u64,
    /// Prompt tokens served from the prefix cache / prompt tokens of completed requests.
    pub hit_ratio: f64,
    /// The overload diagnosis, `null` for a run below saturation.
    pub saturation: Option<crate::saturation::Saturation>,
    pub cache: &'a cachesim_core::cache::CacheStats,
    /// vLLM's CPU KV offloading tier (runs with `--kv-offloading-size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_tier: Option<&'a cachesim_core::engine::vllm_offload::OffloadStats>,
    /// SGLang's HiCache host tier (runs with `--enable-hierarchical-cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hicache: Option<&'a cachesim_core::cache::hicache::HostTierStats>,
    /// vLLM's LoRA adapter loads (runs with `--enable-lora`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<&'a cachesim_core::engine::vllm_lora::LoraStats>,
    pub steps: u64,
    pub trace: &'a TraceInfo,
    pub config: &'a cachesim_core::config::RunConfig,
    /// Per-instance figures (runs of more than one instance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<crate::report::cluster::InstanceRow>>,
    /// The router's figures (runs of more than one instance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<crate::report::cluster::RouterReport>,
    /// How far to trust the headline metrics: the spread of cachesim's errors on the measured
    /// runs nearest to this deployment ([`crate::trust`]).
    pub error_bars: Vec<crate::trust::Bar>,
    /// Figures per priority class, when the completed requests carry more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<Vec<classes::ClassRow>>,
    /// What the instance failures did (runs with `--fail-at` or `--mtbf-s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_failures: Option<faults::FaultsReport>,
    /// What the autoscaler did and what the fleet cost (runs with `--autoscale`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<autoscale::AutoscaleReport>,
}

impl<'a> RunReport<'a> {
    /// The report of one simulation `out` of the workload `w` under `config`.
    pub fn new(
        out: &'a cachesim_core::sim::Outcome,
        w: &'a cachesim_core::workload::Workload,
        config: &'a cachesim_core::config::RunConfig,
    ) -> Self {
        let (instances, router) = cluster_report(out, config).unzip();
        RunReport {
            summary: &out.summary,
            requests_sent: out.sent,
            failed_reasons: out.sim.failures.iter().map(|(&r, &(n, _))| (r, n)).collect(),
            outputs_cut: out.sim.outputs_cut.0,
            hit_ratio: hit_ratio(&out.summary),
            saturation: crate::saturation::diagnose(&out.summary, &out.sim.records, &out.sim.load),
            cache: &out.sim.cache,
            host_tier: out.sim.offload.as_ref(),
            hicache: out.sim.hicache.as_ref(),
            lora: out.sim.lora.as_ref(),
            steps: out.sim.steps,
            trace: &w.info,
            config,
            instances,
            router,
            error_bars: crate::trust::bars(config, w, &out.summary),
            priority_classes: classes::rows(&out.sim.records),
            instance_failures: faults_report(out, config),
            autoscaling: autoscale_report(out, config),
        }
    }
}

/// What the instance failures of a run with a failure plan did.
pub fn faults_report(
    out: &cachesim_core::sim::Outcome,
    config: &cachesim_core::config::RunConfig,
) -> Option<faults::FaultsReport> {
    let end = run_end(out, out.sim.faults.iter().map(|f| f.time_s));
    config.faults.as_ref().map(|p| faults::report(p, &out.sim, end))
}

/// When a run ended: at its last token, or at the last of `events` (a failure, a change of
/// the fleet) when that came later.
fn run_end(out: &cachesim_core::sim::Outcome, events: impl Iterator<Item = f64>) -> f64 {
    out.sim.records.iter().map(|r| r.last_token_s).chain(events).fold(0.0, f64::max)
}

/// What the autoscaler of a run with `--autoscale` did.
pub fn autoscale_report(
    out: &cachesim_core::sim::Outcome,
    config: &cachesim_core::config::RunConfig,
) -> Option<autoscale::AutoscaleReport> {
    let plan = config.autoscale.as_ref()?;
    let end = run_end(out, out.sim.scaling.changes.iter().map(|c| c.time_s));
    Some(autoscale::report(
        plan,
        &out.sim.scaling,
        &out.sim.records,
        out.sent as u64,
        end,
        config.deployment.parallel.world(),
        config.goodput,
    ))
}

/// The per-instance rows and the router's figures of a run of more than one instance.
pub fn cluster_report(
    out: &cachesim_core::sim::Outcome,
    config: &cachesim_core::config::RunConfig,
) -> Option<(Vec<crate::report::cluster::InstanceRow>, crate::report::cluster::RouterReport)> {
    config.cluster.is_cluster().then(|| {
        let rows = crate::report::cluster::rows(&out.sim.instances, out.summary.duration, config.kv_capacity_tokens);
        (rows, crate::report::cluster::router(config.cluster.router.name(), &out.sim.router))
    })
}

/// Every resolved setting and the cache outcome, before the benchmark report.
pub fn config_echo(c: &cachesim_core::config::RunConfig, o: &cachesim_core::sim::Outcome) -> String {
    let mut s = config_lines(c, &format!("seed {}", c.arrivals.seed));
    s.push_str(&cache_outcome(o));
    s
}

/// Every resolved setting, the client's line naming the seed as `seed` says (`seed 0`, or the
/// seeds of a `--seeds` run).
pub fn config_lines(c: &cachesim_core::config::RunConfig, seed: &str) -> String {
    let mut s = c.deployment_file.as_ref().map(|d| d.text()).unwrap_or_default();
    let _ = writeln!(s, "{}", c.engine.settings_line());
    let layout = cachesim_core::layout::describe(&c.deployment);
    let per_rank = if c.cache.hybrid.is_some() {
        format!(
            " ({} per token slot of a GPU's pool: one KV cache group's layers)",
            thousands(c.kv_bytes_per_token_per_rank)
        )
    } else if c.kv_bytes_per_token_per_rank != c.kv_bytes_per_token {
        format!(" ({} per GPU)", thousands(c.kv_bytes_per_token_per_rank))
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "Model / GPU:    {} on {} × {} (TP {}{}) · max_model_len {} · {} KV bytes/token{per_rank}",
        c.model.name,
        c.deployment.parallel.world(),
        c.gpu.name,
        c.tp,
        if layout.is_empty() { String::new() } else { format!(" · {layout}") },
        thousands(c.max_model_len),
        thousands(c.kv_bytes_per_token)
    );
    let model = c.efficiency.law.map_or_else(|| "roofline".to_string(), |l| format!("step law ({})", l.describe()));
    let _ = writeln!(s, "Step time:      {model} · calibration {}", c.calibration);
    let blocks = c
        .num_gpu_blocks
        .map(|b| format!(" ({} blocks of {} incl. the null block)", thousands(b), c.cache.block_size.unwrap_or(16)))
        .unwrap_or_default();
    let memory = match (c.mem_fraction_static, &c.vllm_memory) {
        (Some(f), _) => format!("mem_fraction_static {f}"),
        (None, Some(m)) => format!("gpu_memory_utilization {}", m.gpu_memory_utilization),
        (None, None) => format!("gpu_memory_utilization {}", c.gpu_memory_utilization),
    };
    let page = match (c.cache.page_size, &c.cache.hybrid) {
        (Some(p), _) => match (c.cache.window(), c.cache.states()) {
            (Some(w), _) => format!(
                " (page {p}; window pool {} tokens, window {})",
                thousands(w.tokens),
                thousands(w.window as u64)
            ),
            (None, Some(m)) => {
                format!(" (page {p}; state pool {} slots, {})", thousands(m.slots), m.strategy.name())
            }
            (None, None) => format!(" (page {p})"),
        },
        (None, Some(h)) => format!(" ({})", h.describe()),
        (None, None) => String::new(),
    };
    let _ = writeln!(
        s,
        "KV cache:       {}{page} · {} tokens{} · {memory}",
        c.cache.policy.name(),
        thousands(c.kv_capacity_tokens),
        blocks,
    );
    if let Some(m) = &c.vllm_memory {
        let _ = writeln!(s, "KV memory:      {}", m.echo());
    }
    let a = &c.arrivals;
    let arrivals = match a.rate {
        Some(cachesim_core::workload::arrivals::Rate::PerSecond(r)) => format!(
            "{r} req/s, {} process{}",
            serde_json::to_value(a.process).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            if a.burstiness != 1.0 { format!(" (burstiness {})", a.burstiness) } else { String::new() }
        ),
        Some(cachesim_core::workload::arrivals::Rate::Inf) => "all at once".into(),
        None => "at the trace's times (at once if it has none)".into(),
    };
    // How a speculative step's chunk counts in the ITL figures, where chunks carry several tokens.
    let itl = match (c.deployment.spec.is_some(), c.client_itl) {
        (true, cachesim_core::metrics::ItlCount::Token) => " · ITL per token (a chunk's gap over its tokens)",
        (true, cachesim_core::metrics::ItlCount::Chunk) => " · ITL per streamed chunk",
        (false, _) => "",
    };
    let _ = writeln!(
        s,
        "Client:         sends {arrivals} · {seed} · request overhead {} ms (send → scheduler){itl}",
        c.request_overhead_ms
    );
    if let Some(f) = &c.faults {
        let mut when: Vec<String> =
            f.fail_at.iter().map(|a| format!("instance {} at {} s", a.instance, a.time_s)).collect();
        if let Some(m) = f.mtbf_s {
            when.push(format!("each instance with MTBF {m} s (seeded)"));
        }
        if let Some(t) = f.rolling_restart_s {
            when.push(format!("a rolling restart from {t} s (drain timeout {} s)", f.drain_timeout_s));
        }
        let _ = writeln!(
            s,
            "Failures:       {} · recovery {} s · migration limit {}{}",
            when.join(", "),
            f.recovery_s,
            f.migration_limit,
            if f.migration_limit == 0 { " (lost requests fail)" } else { "" }
        );
    }
    s
}

/// The cache outcome line of a run: prompt tokens reused, evictions, peak, preemptions, steps.
pub fn cache_outcome(o: &cachesim_core::sim::Outcome) -> String {
    let mut s = String::new();
    let m = &o.summary;
    let prompt = m.total_input_tokens.max(1);
    let _ = writeln!(
        s,
        "Cache outcome:  {} of {} prompt tokens reused ({:.2}%) · {} evicted · peak {} tokens · {} preemptions · {} steps",
        thousands(m.cached_prompt_tokens),
        thousands(m.total_input_tokens),
        m.cached_prompt_tokens as f64 * 100.0 / prompt as f64,
        thousands(o.sim.cache.evicted_tokens),
        thousands(o.sim.cache.peak_used_tokens),
        thousands(m.preemptions),
        thousands(o.sim.steps)
    );
    if let Some(h) = &o.sim.offload {
        let _ = writeln!(
            s,
            "Host KV tier:   {} prompt tokens loaded ({:.2}% of prompt tokens) in {} loads · {} chunks stored, {} stores refused, {} chunks evicted · peak {} chunks · {} lookups deferred · {} flushes · copies {:.2} s to GPU, {:.2} s to host",
            thousands(h.host_hit_tokens),
            h.host_hit_tokens as f64 * 100.0 / prompt as f64,
            thousands(h.loads),
            thousands(h.tier.stored_chunks),
            thousands(h.tier.refused_stores),
            thousands(h.tier.evicted_chunks),
            thousands(h.tier.peak_chunks),
            thousands(h.deferred_lookups),
            thousands(h.flushes),
            h.load_s,
            h.store_s
        );
        if let Some(d) = &h.disk {
            let _ = writeln!(
                s,
                "LMCache disk:   {} prompt tokens loaded from it · {} chunks read for loads ({:.2} s) · {} chunks written ({:.2} s), {} writes skipped, {} chunks evicted · peak {} chunks",
                thousands(d.hit_tokens),
                thousands(d.read_chunks),
                d.read_s,
                thousands(d.written_chunks),
                d.write_s,
                thousands(d.skipped_writes),
                thousands(d.evicted_chunks),
                thousands(d.peak_chunks)
            );
        }
        if let Some(r) = &h.remote {
            let _ = writeln!(
                s,
                "LMCache remote: {} prompt tokens loaded from it · {} exists round trips ({:.2} s waited) · {} chunks read for loads ({:.2} s) · {} chunks put ({:.2} s sending), {} puts dropped as in flight · {} chunks on the server ({:.1} GiB a GPU)",
                thousands(r.hit_tokens),
                thousands(r.exists_calls),
                r.lookup_s,
                thousands(r.read_chunks),
                r.read_s,
                thousands(r.written_chunks),
                r.write_s,
                thousands(r.skipped_puts),
                thousands(r.held_chunks),
                r.held_gib_per_rank()
            );
        }
    }
    if let Some(h) = &o.sim.hicache {
        let _ = writeln!(
            s,
            "Host KV tier:   {} prompt tokens loaded ({:.2}% of prompt tokens) in {} loads, {} host runs recomputed · {} tokens written, {} writes refused · {} tokens kept on the host, {} dropped, {} host tokens evicted · peak {} host tokens · copies {:.2} s to GPU, {:.2} s to host",
            thousands(h.loaded_tokens),
            h.loaded_tokens as f64 * 100.0 / prompt as f64,
            thousands(h.loads),
            thousands(h.runs_recomputed),
            thousands(h.written_tokens),
            thousands(h.refused_writes),
            thousands(h.demoted_tokens),
            thousands(h.dropped_tokens),
            thousands(h.host_evicted_tokens),
            thousands(h.peak_host_tokens),
            h.load_s,
            h.write_s
        );
        if let Some(st) = &h.storage {
            let _ = writeln!(
                s,
                "Storage tier:   {} lookups found {} tokens · {} tokens read into the host pool · {} pages written, {} found stored",
                thousands(st.lookups),
                thousands(st.hit_tokens),
                thousands(st.inserted_tokens),
                thousands(st.pages_written),
                thousands(st.pages_skipped)
            );
        }
    }
    if let Some(l) = &o.sim.lora {
        let _ = writeln!(
            s,
            "LoRA adapters:  {} read from storage · {} copied to a GPU slot · steps waited {:.2} s for them",
            thousands(l.reads),
            thousands(l.copies),
            l.load_s
        );
    }
    s
}

/// Which benchmark client's layout to print (`--report-style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ReportStyle {
    /// `python -m sglang.bench_serving`.
    Sglang,
    /// `vllm bench serve`.
    Vllm,
}

/// What the report header says about the load.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadEcho {
    /// Backend label (the engine).
    pub backend: String,
    /// `None` = inf; `Some(None)` style is covered by `trace_times`.
    pub request_rate: Option<f64>,
    /// Sends followed the trace's time stamps.
    pub trace_times: bool,
    pub max_concurrency: Option<u32>,
    /// `--goodput` was given: the report adds the request goodput after the request
    /// throughput, as `vllm bench serve` prints it.
    pub goodput: bool,
}

/// The values of a report's rows, read from one run's [`Summary`] or, for a `--seeds` run, from
/// every seed's (the median and its spread: `crate::seeds::report`).
pub trait Cells {
    /// A count's cell.
    fn count(&self, metric: fn(&Summary) -> u64) -> String;
    /// A two-decimal cell.
    fn float(&self, metric: fn(&Summary) -> f64) -> String;
}

impl Cells for Summary {
    fn count(&self, metric: fn(&Summary) -> u64) -> String {
        metric(self).to_string()
    }
    fn float(&self, metric: fn(&Summary) -> f64) -> String {
        format!("{:.2}", metric(self))
    }
}

fn row(s: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(s, "{:<40} {:<10}", label, value);
}

fn rowf(s: &mut String, label: &str, c: &dyn Cells, metric: fn(&Summary) -> f64) {
    row(s, label, c.float(metric));
}

fn rowc(s: &mut String, label: &str, c: &dyn Cells, metric: fn(&Summary) -> u64) {
    row(s, label, c.count(metric));
}

fn section(s: &mut String, title: &str) {
    let _ = writeln!(s, "{title:-^50}");
}

/// The TTFT and TPOT sections, alike in both clients.
fn ttft_tpot_sections(s: &mut String, c: &dyn Cells) {
    section(s, "Time to First Token");
    rowf(s, "Mean TTFT (ms):", c, |m| m.mean_ttft_ms);
    rowf(s, "Median TTFT (ms):", c, |m| m.median_ttft_ms);
    rowf(s, "P99 TTFT (ms):", c, |m| m.p99_ttft_ms);
    section(s, "Time per Output Token (excl. 1st token)");
    rowf(s, "Mean TPOT (ms):", c, |m| m.mean_tpot_ms);
    rowf(s, "Median TPOT (ms):", c, |m| m.median_tpot_ms);
    rowf(s, "P99 TPOT (ms):", c, |m| m.p99_tpot_ms);
}

/// Prompt tokens served from the prefix cache over the prompt tokens of completed requests.
pub fn hit_ratio(m: &Summary) -> f64 {
    if m.total_input_tokens == 0 {
        0.0
    } else {
        m.cached_prompt_tokens as f64 / m.total_input_tokens as f64
    }
}

/// cachesim's addition to both layouts: the prefix-cache hit rate in the engines' wording
/// (vLLM logs "Prefix cache hit rate: X%"), in percent with two decimals.
fn hit_rate_section(s: &mut String, c: &dyn Cells) {
    section(s, "Prefix Cache");
    rowf(s, "Prefix cache hit rate (%):", c, |m| hit_ratio(m) * 100.0);
}

/// Python's `repr` of a float as the clients print the rate (`20.0`, `0.5`).
fn py_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// The report in the chosen client's exact layout (ENGINE_SPEC §7.3).
pub fn bench_report(style: ReportStyle, load: &LoadEcho, m: &Summary) -> String {
    bench_layout(style, load, m)
}

/// The chosen client's layout with the cells `m` gives (one run's values, or the seeds' spread).
pub fn bench_layout(style: ReportStyle, load: &LoadEcho, m: &dyn Cells) -> String {
    let mut s = String::new();
    match style {
        ReportStyle::Sglang => {
            let _ = writeln!(s);
            let _ = writeln!(s, "{:=^50}", " Serving Benchmark Result ");
            row(&mut s, "Backend:", &load.backend);
            let rate = if load.trace_times {
                "trace".to_string()
            } else {
                load.request_rate.map_or_else(|| "inf".to_string(), py_float)
            };
            row(&mut s, "Traffic request rate:", rate);
            row(
                &mut s,
                "Max request concurrency:",
                load.max_concurrency.map_or_else(|| "not set".to_string(), |c| c.to_string()),
            );
            rowc(&mut s, "Successful requests:", m, |m| m.completed);
            rowf(&mut s, "Benchmark duration (s):", m, |m| m.duration);
            rowc(&mut s, "Total input tokens:", m, |m| m.total_input_tokens);
            rowc(&mut s, "Total input text tokens:", m, |m| m.total_input_tokens);
            rowc(&mut s, "Total generated tokens:", m, |m| m.total_output_tokens);
            rowc(&mut s, "Total generated tokens (retokenized):", m, |m| m.total_output_tokens);
            rowf(&mut s, "Request throughput (req/s):", m, |m| m.request_throughput);
            if load.goodput {
                rowf(&mut s, "Request goodput (req/s):", m, |m| m.request_goodput.unwrap_or(0.0));
            }
            rowf(&mut s, "Input token throughput (tok/s):", m, |m| m.input_throughput);
            rowf(&mut s, "Output token throughput (tok/s):", m, |m| m.output_throughput);
            rowf(&mut s, "Peak output token throughput (tok/s):", m, |m| m.peak_output_throughput);
            rowc(&mut s, "Peak concurrent requests:", m, |m| m.peak_concurrent_requests);
            rowf(&mut s, "Total token throughput (tok/s):", m, |m| m.total_throughput);
            rowf(&mut s, "Concurrency:", m, |m| m.concurrency);
            section(&mut s, "End-to-End Latency");
            rowf(&mut s, "Mean E2E Latency (ms):", m, |m| m.mean_e2e_latency_ms);
            rowf(&mut s, "Median E2E Latency (ms):", m, |m| m.median_e2e_latency_ms);
            rowf(&mut s, "P90 E2E Latency (ms):", m, |m| m.p90_e2e_latency_ms);
            rowf(&mut s, "P99 E2E Latency (ms):", m, |m| m.p99_e2e_latency_ms);
            ttft_tpot_sections(&mut s, m);
            section(&mut s, "Inter-Token Latency");
            rowf(&mut s, "Mean ITL (ms):", m, |m| m.mean_itl_ms);
            rowf(&mut s, "Median ITL (ms):", m, |m| m.median_itl_ms);
            rowf(&mut s, "P95 ITL (ms):", m, |m| m.p95_itl_ms);
            rowf(&mut s, "P99 ITL (ms):", m, |m| m.p99_itl_ms);
            rowf(&mut s, "Max ITL (ms):", m, |m| m.max_itl_ms);
            hit_rate_section(&mut s, m);
        }
        ReportStyle::Vllm => {
            let _ = writeln!(s, "{:=^50}", " Serving Benchmark Result ");
            rowc(&mut s, "Successful requests:", m, |m| m.completed);
            rowc(&mut s, "Failed requests:", m, |m| m.failed);
            if let Some(c) = load.max_concurrency {
                row(&mut s, "Maximum request concurrency:", c);
            }
            if let (Some(r), false) = (load.request_rate, load.trace_times) {
                row(&mut s, "Request rate configured (RPS):", format!("{r:.2}"));
            }
            rowf(&mut s, "Benchmark duration (s):", m, |m| m.duration);
            rowc(&mut s, "Total input tokens:", m, |m| m.total_input_tokens);
            rowc(&mut s, "Total generated tokens:", m, |m| m.total_output_tokens);
            rowf(&mut s, "Request throughput (req/s):", m, |m| m.request_throughput);
            if load.goodput {
                rowf(&mut s, "Request goodput (req/s):", m, |m| m.request_goodput.unwrap_or(0.0));
            }
            rowf(&mut s, "Output token throughput (tok/s):", m, |m| m.output_throughput);
            rowf(&mut s, "Peak output token throughput (tok/s):", m, |m| m.peak_output_throughput);
            rowf(&mut s, "Peak concurrent requests:", m, |m| m.peak_concurrent_requests as f64);
            rowf(&mut s, "Total token throughput (tok/s):", m, |m| m.total_throughput);
            ttft_tpot_sections(&mut s, m);
            section(&mut s, "Inter-token Latency");
            rowf(&mut s, "Mean ITL (ms):", m, |m| m.mean_itl_ms);
            rowf(&mut s, "Median ITL (ms):", m, |m| m.median_itl_ms);
            rowf(&mut s, "P99 ITL (ms):", m, |m| m.p99_itl_ms);
            hit_rate_section(&mut s, m);
        }
    }
    let _ = writeln!(s, "{}", "=".repeat(50));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        let mut log = cachesim_core::metrics::TokenLog::default();
        let r = cachesim_core::metrics::RequestRecord {
            id: 0,
            send_s: 0.0,
            first_token_s: 0.25,
            last_token_s: 1.25,
            prompt_tokens: 200,
            output_tokens: 101,
            cached_prompt_tokens: 50,
            preemptions: 0,
            first_scheduled_s: 0.0,
            priority: 0,
        };
        for k in 0..101 {
            log.token(0.25 + k as f64 * 0.01, (k > 0).then(|| 0.25 + (k - 1) as f64 * 0.01));
        }
        Summary::new(&[r], 0, &mut log)
    }

    /// The exact sglang bench_serving layout (ENGINE_SPEC §7.3): 40-char labels, 10-char values.
    #[test]
    fn golden_sglang_layout() {
        let load = LoadEcho {
            backend: "vllm".into(),
            request_rate: Some(20.0),
            trace_times: false,
            max_concurrency: None,
            goodput: false,
        };
        let got = bench_report(ReportStyle::Sglang, &load, &summary());
        let want = [
            "",
            "============ Serving Benchmark Result ============",
            "Backend:                                 vllm      ",
            "Traffic request rate:                    20.0      ",
            "Max request concurrency:                 not set   ",
            "Successful requests:                     1         ",
            "Benchmark duration (s):                  1.25      ",
            "Total input tokens:                      200       ",
            "Total input text tokens:                 200       ",
            "Total generated tokens:                  101       ",
            "Total generated tokens (retokenized):    101       ",
            "Request throughput (req/s):              0.80      ",
            "Input token throughput (tok/s):          160.00    ",
            "Output token throughput (tok/s):         80.80     ",
            "Peak output token throughput (tok/s):    75.00     ",
            "Peak concurrent requests:                1         ",
            "Total token throughput (tok/s):          240.80    ",
            "Concurrency:                             1.00      ",
            "----------------End-to-End Latency----------------",
            "Mean E2E Latency (ms):                   1250.00   ",
            "Median E2E Latency (ms):                 1250.00   ",
            "P90 E2E Latency (ms):                    1250.00   ",
            "P99 E2E Latency (ms):                    1250.00   ",
            "---------------Time to First Token----------------",
            "Mean TTFT (ms):                          250.00    ",
            "Median TTFT (ms):                        250.00    ",
            "P99 TTFT (ms):                           250.00    ",
            "-----Time per Output Token (excl. 1st token)------",
            "Mean TPOT (ms):                          10.00     ",
            "Median TPOT (ms):                        10.00     ",
            "P99 TPOT (ms):                           10.00     ",
            "---------------Inter-Token Latency----------------",
            "Mean ITL (ms):                           10.00     ",
            "Median ITL (ms):                         10.00     ",
            "P95 ITL (ms):                            10.00     ",
            "P99 ITL (ms):                            10.00     ",
            "Max ITL (ms):                            10.00     ",
            "-------------------Prefix Cache-------------------",
            "Prefix cache hit rate (%):               25.00     ",
            "==================================================",
        ];
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
    }

    /// The exact `vllm bench serve` layout, with its conditional rows.
    #[test]
    fn golden_vllm_layout() {
        let load = LoadEcho {
            backend: "vllm".into(),
            request_rate: Some(20.0),
            trace_times: false,
            max_concurrency: Some(8),
            goodput: false,
        };
        let got = bench_report(ReportStyle::Vllm, &load, &summary());
        let want = [
            "============ Serving Benchmark Result ============",
            "Successful requests:                     1         ",
            "Failed requests:                         0         ",
            "Maximum request concurrency:             8         ",
            "Request rate configured (RPS):           20.00     ",
            "Benchmark duration (s):                  1.25      ",
            "Total input tokens:                      200       ",
            "Total generated tokens:                  101       ",
            "Request throughput (req/s):              0.80      ",
            "Output token throughput (tok/s):         80.80     ",
            "Peak output token throughput (tok/s):    75.00     ",
            "Peak concurrent requests:                1.00      ",
            "Total token throughput (tok/s):          240.80    ",
            "---------------Time to First Token----------------",
            "Mean TTFT (ms):                          250.00    ",
            "Median TTFT (ms):                        250.00    ",
            "P99 TTFT (ms):                           250.00    ",
            "-----Time per Output Token (excl. 1st token)------",
            "Mean TPOT (ms):                          10.00     ",
            "Median TPOT (ms):                        10.00     ",
            "P99 TPOT (ms):                           10.00     ",
            "---------------Inter-token Latency----------------",
            "Mean ITL (ms):                           10.00     ",
            "Median ITL (ms):                         10.00     ",
            "P99 ITL (ms):                            10.00     ",
            "-------------------Prefix Cache-------------------",
            "Prefix cache hit rate (%):               25.00     ",
            "==================================================",
        ];
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
