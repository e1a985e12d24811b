//! `cachesim list gpus|models|networks|engines|profiles`: what the catalog and the built-in
//! calibration hold, as an aligned table (or `--json`, the catalog's own fields), so that a
//! `--gpu`, `--model`, `--network` or `--engine-version` value can be looked up rather than
//! guessed.

use super::Answer;
use crate::cli::{ListArgs, ListWhat};
use cachesim::calibration::profile;
use cachesim::catalog::{builtin_gpus, builtin_models, builtin_networks};
use cachesim::engine::EngineVersion;
use std::fmt::Write;

/// The list `args` asks for.
pub fn list(args: &ListArgs) -> anyhow::Result<Answer> {
    if args.json {
        let doc = match args.what {
            ListWhat::Gpus => serde_json::to_value(builtin_gpus())?,
            ListWhat::Models => serde_json::to_value(builtin_models())?,
            ListWhat::Networks => serde_json::to_value(builtin_networks())?,
            ListWhat::Engines => serde_json::Value::Array(
                EngineVersion::ALL
                    .iter()
                    .map(|v| serde_json::json!({"bundle": v.name(), "engine": v.engine().name(), "summary": v.summary()}))
                    .collect(),
            ),
            ListWhat::Profiles => serde_json::to_value(profile::builtin().into_iter().map(|(_, p)| p).collect::<Vec<_>>())?,
        };
        return Ok(Answer::text(format!("{}\n", serde_json::to_string_pretty(&doc)?)));
    }
    let (head, rows): (&[&str], Vec<Vec<String>>) = match args.what {
        ListWhat::Gpus => (
            &["name", "description", "arch", "memory GB", "HBM GB/s", "BF16 TFLOPS", "FP8 TFLOPS", "NVLink GB/s"],
            builtin_gpus()
                .into_iter()
                .map(|g| {
                    vec![
                        g.name.clone(),
                        g.description.clone(),
                        g.arch.map_or("-", |a| a.name()).to_string(),
                        format!("{}", g.memory_gb),
                        format!("{}", g.mem_bw_gbps),
                        format!("{}", g.bf16_tflops),
                        g.fp8_tflops.map_or("-".to_string(), |f| f.to_string()),
                        g.nvlink_gbps.map_or("PCIe only".to_string(), |f| f.to_string()),
                    ]
                })
                .collect(),
        ),
        ListWhat::Models => (
            &["name", "Hugging Face id", "params B", "layers", "heads", "KV heads", "weights", "kind"],
            builtin_models()
                .into_iter()
                .map(|m| {
                    let kind = match (m.is_moe(), m.is_mla()) {
                        (true, true) => "MoE, MLA",
                        (true, false) => "MoE",
                        (false, true) => "MLA",
                        (false, false) => "dense",
                    };
                    vec![
                        m.name.clone(),
                        m.hf_id.clone(),
                        format!("{}", m.params_b),
                        m.layers.to_string(),
                        m.heads.to_string(),
                        m.kv_heads.to_string(),
                        format!("{:?}", m.weight_dtype).to_lowercase(),
                        kind.to_string(),
                    ]
                })
                .collect(),
        ),
        ListWhat::Networks => (
            &["name", "description", "NICs a node", "Gb/s a NIC", "latency µs"],
            builtin_networks()
                .into_iter()
                .map(|n| {
                    vec![
                        n.name.clone(),
                        n.description.clone(),
                        n.nics.to_string(),
                        format!("{}", n.gbps),
                        format!("{}", n.latency_us),
                    ]
                })
                .collect(),
        ),
        ListWhat::Engines => (
            &["--engine-version", "--engine", "what it follows"],
            EngineVersion::ALL
                .iter()
                .map(|v| vec![v.name().to_string(), v.engine().name().to_string(), v.summary().to_string()])
                .collect(),
        ),
        ListWhat::Profiles => (
            &["profile", "GPU", "engine family", "models", "how well it predicts"],
            profile::builtin()
                .into_iter()
                .map(|(_, p)| vec![p.name.clone(), p.gpu.clone(), p.engine.clone(), p.models.join(", "), p.quality()])
                .collect(),
        ),
    };
    Ok(Answer::text(table(head, &rows)))
}

/// An aligned table: each column as wide as its widest cell, left-aligned, two spaces apart.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count()))).collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    out
}
