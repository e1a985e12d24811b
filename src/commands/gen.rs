//! `cachesim gen`: synthetic workloads (`random`, `gsp`, `sessions`) as native JSONL.

use super::plural;
use crate::cli::{GenCommand, GenCommon};
use anyhow::Context;
use cachesim::text::thousands;
use cachesim::workload::gen::{self, GenRecord};
use std::io::Write;

pub fn generate(g: &GenCommand, stdout: &mut dyn Write) -> anyhow::Result<()> {
    let (kind, common, records): (&str, &GenCommon, Vec<GenRecord>) = match g {
        GenCommand::Random(a) => (
            "random",
            &a.common,
            gen::random(&gen::RandomSpec {
                num_prompts: a.num_prompts,
                input_len: a.input_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(0.0),
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
        GenCommand::Gsp(a) => (
            "gsp",
            &a.common,
            gen::gsp(&gen::GspSpec {
                num_groups: a.num_groups,
                prompts_per_group: a.prompts_per_group,
                system_prompt_len: a.system_prompt_len,
                question_len: a.question_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(1.0),
                ordered: a.ordered,
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
        GenCommand::Sessions(a) => (
            "sessions",
            &a.common,
            gen::sessions(&gen::SessionsSpec {
                num_sessions: a.num_sessions,
                turns: a.turns,
                system_prompt_len: a.system_prompt_len,
                user_len: a.user_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(1.0),
                session_rate: a.session_rate,
                think_time_s: a.think_time_s,
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?,
        ),
    };
    let prompt_ids: u64 = records.iter().map(|r| r.prompt_ids.len() as u64).sum();
    let output: u64 = records.iter().map(|r| r.output_len as u64).sum();
    let mut files = cachesim::output::Outputs::new();
    match &common.output {
        Some(path) => {
            super::files::check(&[], &[("--output", path)])?;
            let tmp = files.stage(path)?;
            let f = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = std::io::BufWriter::new(f);
            gen::write_jsonl(&records, &mut w).with_context(|| format!("cannot write {}", path.display()))?;
            w.flush().with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => gen::write_jsonl(&records, &mut *stdout)?,
    }
    files.commit()?;
    let dest = common.output.as_ref().map_or("stdout".to_string(), |p| p.display().to_string());
    let summary = if common.json {
        serde_json::json!({
            "kind": kind, "requests": records.len(), "prompt_ids_written": prompt_ids,
            "output_tokens": output, "seed": common.seed, "output": dest,
        })
        .to_string()
    } else {
        format!(
            "gen {kind}: {}, {} prompt ids written, {} output tokens → {dest}",
            plural(records.len() as u64, "request"),
            thousands(prompt_ids),
            thousands(output)
        )
    };
    // The summary goes to stdout unless the records themselves do.
    if common.output.is_some() {
        writeln!(stdout, "{summary}")?;
    } else {
        eprintln!("{summary}");
    }
    Ok(())
}
