//! The token totals of a case's rebuilt workload against its report's: the requests the client
//! would send (the seeded sample of [`arrivals::schedule`], so exactly the simulated ones),
//! summed, must come within [`TOLERANCE_PCT`] of the report's `total_input_tokens` and
//! `total_output_tokens` — else the case is an error naming it and both totals. A metric the
//! case skips (its reason among the assumptions) is not checked.
//!
//! The real runs rarely state their seed or tokenizer, so a ShareGPT case states a rule instead
//! of per-request edits: its seed is the first one, counting from 0, whose sample (cl100k token
//! counts, the client's filter, the case's data file) falls within the tolerance on both totals
//! ([`first_seed_within`]); the case file records the seed and the rule, and a test re-derives it.

use super::case::LoadedCase;
use cachesim_core::error::{Error, Result};
use cachesim_core::workload::arrivals::{self, ArrivalOptions, Rate};
use cachesim_core::workload::Workload;

/// How far (percent) a rebuilt workload's totals may miss the report's.
pub const TOLERANCE_PCT: f64 = 1.0;

/// Total prompt and output tokens of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub input: u64,
    pub output: u64,
}

impl Totals {
    /// (this − measured) / measured × 100, for input and output.
    pub fn error_pct(self, input: f64, output: f64) -> (f64, f64) {
        ((self.input as f64 - input) / input * 100.0, (self.output as f64 - output) / output * 100.0)
    }

    /// Both totals within `tol_pct` of the measured ones.
    pub fn within(self, input: f64, output: f64, tol_pct: f64) -> bool {
        let (i, o) = self.error_pct(input, output);
        i.abs() <= tol_pct && o.abs() <= tol_pct
    }
}

/// The totals of the requests the client sends from `w` with `num_prompts` and `seed` (the
/// send times do not matter, so every request is sent at once).
pub fn sample_totals(w: &Workload, num_prompts: Option<usize>, seed: u64) -> Result<Totals> {
    let o = ArrivalOptions { rate: Some(Rate::Inf), num_prompts, seed, ..ArrivalOptions::default() };
    let sends = arrivals::schedule(w, &o)?;
    let (mut input, mut output) = (0u64, 0u64);
    for (id, _) in sends {
        let r = &w.requests[id as usize];
        input += r.prompt_len as u64;
        output += r.output_len as u64;
    }
    Ok(Totals { input, output })
}

/// The first seed in `seeds` whose sample's totals fall within `tol_pct` of `input` and
/// `output`, with those totals.
pub fn first_seed_within(
    w: &Workload,
    num_prompts: Option<usize>,
    input: f64,
    output: f64,
    tol_pct: f64,
    seeds: std::ops::Range<u64>,
) -> Result<Option<(u64, Totals)>> {
    for seed in seeds {
        let t = sample_totals(w, num_prompts, seed)?;
        if t.within(input, output, tol_pct) {
            return Ok(Some((seed, t)));
        }
    }
    Ok(None)
}

/// Checks the totals of `case`'s rebuilt workload `w`, sent with `arrivals` (its resolved
/// `--num-prompts` and `--seed`), against its report: an error naming the case and both pairs
/// of totals when either misses by more than [`TOLERANCE_PCT`]. Totals the report lacks or the
/// case skips are not checked; returns the rebuilt totals.
pub fn check(case: &LoadedCase, w: &Workload, arrivals: &ArrivalOptions) -> Result<Totals> {
    let t = sample_totals(w, arrivals.num_prompts, arrivals.seed)?;
    let skip = |m: &str| case.case.skip_metrics.iter().any(|s| s == m);
    let measured = |m: &str| if skip(m) { None } else { case.measured.get(m) };
    let (mi, mo) = (measured("total_input_tokens"), measured("total_output_tokens"));
    let miss =
        |rebuilt: u64, m: Option<f64>| m.is_some_and(|m| ((rebuilt as f64 - m) / m * 100.0).abs() > TOLERANCE_PCT);
    if miss(t.input, mi) || miss(t.output, mo) {
        let show = |m: Option<f64>| m.map_or_else(|| "not reported".to_string(), |m| format!("{m:.0}"));
        return Err(Error::Report {
            path: case.file.clone(),
            message: format!(
                "case {}: the rebuilt workload's totals ({} input / {} output tokens) miss the report's ({} / {}) \
                 by more than {TOLERANCE_PCT} % (seed {}); state a sampling rule that matches them, or skip the \
                 totals with the reason among the assumptions",
                case.case.case,
                t.input,
                t.output,
                show(mi),
                show(mo),
                arrivals.seed
            ),
        });
    }
    Ok(t)
}
