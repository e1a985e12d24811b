//! One deployment and workload run under consecutive seeds (`cachesim run --seeds N`): the seeds
//! themselves ([`list`]), what the seed draws in a run — so that a run it does not touch is
//! refused rather than repeated ([`varied`]) —, a run's configuration at another seed
//! ([`with_seed`]), each seed's output file names ([`seed_path`]), the spread of a metric over
//! the seeds ([`spread`]) and the report of them all ([`report`]).

pub mod report;
pub mod spread;

use cachesim_core::cluster::router::RouterKind;
use cachesim_core::config::RunConfig;
use cachesim_core::engine::{EngineKind, SchedulePolicy};
use cachesim_core::error::{Error, Result};
use cachesim_core::workload::arrivals::Rate;
use cachesim_core::workload::Workload;
use std::path::{Path, PathBuf};

/// The seeds `first`, `first` + 1, …, `first` + `n` − 1; refuses a list past the largest seed.
pub fn list(first: u64, n: u32) -> Result<Vec<u64>> {
    let last = first.checked_add(u64::from(n.max(1)) - 1).ok_or_else(|| {
        Error::invalid("--seeds", format!("--seed {first} with --seeds {n} runs past the largest seed, 2^64 − 1"))
    })?;
    Ok((first..=last).collect())
}

/// `cfg` with every seeded part drawing from `seed`: the client's sample and send times, the
/// routers' choices and SGLang's random schedule policy (the three places `--seed` reaches).
pub fn with_seed(cfg: &RunConfig, seed: u64) -> RunConfig {
    let mut c = cfg.clone();
    c.arrivals.seed = seed;
    c.engine.seed = seed;
    c.cluster.router_params.seed = seed;
    c
}

/// Whether a router of `kind` over `n` instances draws random numbers (a random pick, or a
/// random tie-break among equally good instances).
fn router_draws(kind: RouterKind, n: u32) -> bool {
    n > 1 && matches!(kind, RouterKind::Random | RouterKind::PrefixHash | RouterKind::Aibrix | RouterKind::KvAware)
}

/// What the seed draws in a run of `w` under `cfg`, in words, one item each; empty when the seed
/// changes nothing. Follows `workload::arrivals::schedule` (sample and send times), the routers
/// and the SGLang scheduler, the only readers of the seed.
pub fn varied(cfg: &RunConfig, w: &Workload) -> Vec<String> {
    let mut v = Vec::new();
    let a = &cfg.arrivals;
    let timed = w.requests.iter().all(|r| r.arrival_ms.is_some());
    let ordered = timed || w.requests.iter().any(|r| r.session.is_some());
    if w.sample.is_some() {
        v.push("which ShareGPT conversations are sent and in what order (the client's seeded shuffle)".to_string());
    } else if a.num_prompts.is_some() && !ordered {
        v.push("which requests of the untimed trace --num-prompts sends, and in what order".to_string());
    }
    if let Some(Rate::PerSecond(r)) = a.rate {
        let process =
            serde_json::to_value(a.process).ok().and_then(|p| p.as_str().map(String::from)).unwrap_or_default();
        v.push(format!("the send times ({r} req/s, {process} process)"));
    }
    let cl = &cfg.cluster;
    match cl.pd {
        Some(pd) => {
            if router_draws(cl.router, pd.prefill) {
                v.push(format!("the {} router's choices among the prefill instances", cl.router.name()));
            }
            if router_draws(cl.decode_router, pd.decode) {
                v.push(format!("the {} router's choices among the decode instances", cl.decode_router.name()));
            }
        }
        None if router_draws(cl.router, cl.instances) => v.push(format!("the {} router's choices", cl.router.name())),
        None => {}
    }
    if cfg.engine.engine == EngineKind::Sglang && cfg.engine.schedule_policy == SchedulePolicy::Random {
        v.push("the order of SGLang's waiting queue (--schedule-policy random)".to_string());
    }
    v
}

/// The refusal of `--seeds n` for a run of `w` the seed does not touch (`varied` is empty).
pub fn refuse_unseeded(n: u32, cfg: &RunConfig, w: &Workload) -> Error {
    let timed = w.requests.iter().all(|r| r.arrival_ms.is_some());
    let sends = match cfg.arrivals.rate {
        None if timed => "the trace's own time stamps set the send times (no --request-rate)",
        None => "every request is sent at once (the trace has no times and there is no --request-rate)",
        Some(Rate::Inf) => "every request is sent at once (--request-rate inf)",
        Some(Rate::PerSecond(_)) => "the send times are drawn",
    };
    Error::invalid(
        "--seeds",
        format!(
            "{n} seeds would run the same simulation {n} times: the seed changes nothing here — {sends}, every \
             request is sent in the trace's order, and neither the router ({}) nor the scheduler draws a random \
             number. Give a --request-rate (seeded send times), --num-prompts on an untimed trace (a seeded \
             sample), ShareGPT with --turns first (the client's seeded shuffle) or a random router",
            cfg.cluster.router.name()
        ),
    )
}

/// `path` with `.seed{seed}` before its extension: `requests.csv` → `requests.seed7.csv`,
/// `out` → `out.seed7`, so that the plot keeps its format and each seed its own file.
pub fn seed_path(path: &Path, seed: u64) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(e) => format!("{stem}.seed{seed}.{}", e.to_string_lossy()),
        None => format!("{stem}.seed{seed}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_their_limit() {
        assert_eq!(list(5, 3).unwrap(), [5, 6, 7]);
        assert_eq!(list(u64::MAX, 1).unwrap(), [u64::MAX]);
        let e = list(u64::MAX - 1, 3).unwrap_err().to_string();
        assert!(e.contains("--seeds") && e.contains("past the largest seed"), "{e}");
    }

    #[test]
    fn per_seed_file_names() {
        assert_eq!(seed_path(Path::new("out/requests.csv"), 7), Path::new("out/requests.seed7.csv"));
        assert_eq!(seed_path(Path::new("plot.svg"), 0), Path::new("plot.seed0.svg"));
        assert_eq!(seed_path(Path::new("table"), 12), Path::new("table.seed12"));
    }

    /// Every seeded field follows `--seed`: the configuration resolved at seed 9 is the one at
    /// seed 0 with [`with_seed`] 9 (a new seeded field would break this).
    #[test]
    fn with_seed_is_resolving_at_that_seed() {
        let mut o = cachesim_core::config::RunOptions {
            calibration: cachesim_core::config::Calibration::None,
            ..Default::default()
        };
        let at0 = cachesim_core::config::resolve(&o).unwrap();
        o.arrivals.seed = 9;
        o.cluster.router_params.seed = 9;
        let at9 = cachesim_core::config::resolve(&o).unwrap();
        let j = |c: &RunConfig| serde_json::to_string(c).unwrap();
        assert_eq!(j(&with_seed(&at0, 9)), j(&at9));
        assert_ne!(j(&at0), j(&at9));
    }
}
