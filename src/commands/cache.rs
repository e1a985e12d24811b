//! `cachesim cache`: every cache model replayed without timing, side by side, at one or many
//! capacities.

use super::Answer;
use super::{load, plural};
use crate::cli::CacheArgs;
use cachesim::replay::{replay_all, ReplayOptions};
use cachesim::report::{cache_table, trace_summary, CacheReport};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write;

pub fn cache(args: &CacheArgs) -> anyhow::Result<Answer> {
    let w = load(&args.trace, &args.trace.build_options())?;
    let specs = args.specs()?;
    let pb = ProgressBar::new((w.requests.len() * specs.len()) as u64);
    pb.set_style(
        ProgressStyle::with_template("replaying {bar:40} {pos}/{len} requests ({per_sec}, eta {eta})")
            .expect("static template"),
    );
    let tick = || pb.inc(1);
    let results = replay_all(&w, &specs, ReplayOptions { inflight: args.inflight as usize }, &tick);
    pb.finish_and_clear();
    let mut out = String::new();
    if args.json {
        out.push_str(&serde_json::to_string_pretty(&CacheReport { trace: &w.info, results: &results })?);
        out.push('\n');
    } else {
        write!(out, "{}", trace_summary(&w.info))?;
        writeln!(
            out,
            "Replay:         arrival order, {} holding KV at once\n",
            plural(args.inflight as u64, "request")
        )?;
        write!(out, "{}", cache_table(&results))?;
    }
    Ok(Answer::text(out))
}
