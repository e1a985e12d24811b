//! `cachesim gen`: synthetic workloads (`random`, `gsp`, `sessions`) as native JSONL.

use super::plural;
use super::{Answer, Document};
use crate::cli::{GenCommand, GenCommon};
use anyhow::Context;
use cachesim::text::thousands;
use cachesim::workload::gen::{self, GenRecord};
use std::io::Write;

pub fn generate(g: &GenCommand) -> anyhow::Result<Answer> {
    // `random` is drawn as it is written; `gsp` (shuffled) and `sessions` (ordered by arrival)
    // need every record before the first line.
    let (kind, common, records): (&'static str, &GenCommon, Box<dyn Iterator<Item = GenRecord> + Send>) = match g {
        GenCommand::Random(a) => (
            "random",
            &a.common,
            Box::new(gen::random_iter(&gen::RandomSpec {
                num_prompts: a.num_prompts,
                input_len: a.input_len,
                output_len: a.output_len,
                range_ratio: a.common.range_ratio.unwrap_or(0.0),
                vocab: a.common.vocab,
                seed: a.common.seed,
            })?),
        ),
        GenCommand::Gsp(a) => (
            "gsp",
            &a.common,
            Box::new(
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
                })?
                .into_iter(),
            ),
        ),
        GenCommand::Sessions(a) => (
            "sessions",
            &a.common,
            Box::new(
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
                })?
                .into_iter(),
            ),
        ),
    };
    let (json, seed) = (common.json, common.seed);
    let Some(path) = &common.output else {
        // The records go to stdout as they are drawn, the summary to stderr after them.
        let write = move |out: &mut dyn Write| -> anyhow::Result<String> {
            let n = gen::write_jsonl(records, out)?;
            Ok(summary(kind, &n, json, seed, "stdout"))
        };
        return Ok(Answer { document: Document::Stream(Box::new(write)), notes: Vec::new(), failed: None });
    };
    let mut files = cachesim::output::Outputs::new();
    super::files::check(&[], &[("--output", path)])?;
    let tmp = files.stage(path)?;
    let f = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let n = gen::write_jsonl(records, &mut w).with_context(|| format!("cannot write {}", path.display()))?;
    w.flush().with_context(|| format!("cannot write {}", path.display()))?;
    drop(w);
    files.commit()?;
    // The summary goes to stdout when the records do not.
    Ok(Answer::text(format!("{}\n", summary(kind, &n, json, seed, &path.display().to_string()))))
}

/// The line saying what was written where: text, or JSON with `--json`.
fn summary(kind: &str, n: &gen::Written, json: bool, seed: u64, dest: &str) -> String {
    if json {
        serde_json::json!({
            "kind": kind, "requests": n.requests, "prompt_ids_written": n.prompt_ids,
            "output_tokens": n.output_tokens, "seed": seed, "output": dest,
        })
        .to_string()
    } else {
        format!(
            "gen {kind}: {}, {} prompt ids written, {} output tokens → {dest}",
            plural(n.requests, "request"),
            thousands(n.prompt_ids),
            thousands(n.output_tokens)
        )
    }
}
