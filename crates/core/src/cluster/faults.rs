//! Instance failures: when instances fail (`--fail-at`, `--mtbf-s`), how long they take to
//! serve again (`--recovery-s`), and what becomes of the requests they held
//! (`--migration-limit`). A failure is a crash, not a drain: the instance's running and waiting
//! requests lose their engine state and its KV cache is gone. By default each of them fails, as
//! the benchmark clients count an errored request and go on (`sglang.bench_serving`,
//! `vllm bench serve`: `success = False`, the run continues). With a migration limit above 0
//! they continue elsewhere as NVIDIA Dynamo's request migration does
//! (`lib/llm/src/migration.rs`; Dynamo `docs/architecture/request_migration.md`): the request is sent
//! again through the router with its prompt and the tokens it has streamed so far, and generates
//! only what is left; a request may migrate that many times. While an instance is down the router
//! leaves it out, as the gateways drop a worker that fails its health check; it comes back with
//! an empty cache. A rolling restart (`--rolling-restart`, `--drain-timeout-s`) takes the
//! instances down one at a time, gracefully: an instance leaves the router's list, finishes what
//! it holds (up to the drain timeout, after which what is left is lost as in a crash), stops, and
//! serves again after the recovery time; then the next one drains. The plan is data; the event
//! loop ([`crate::sim`]) carries it out.

use super::{seconds, MAX_SECONDS};
use crate::error::{Error, Result};
use serde::Serialize;
use std::str::FromStr;

/// Default seconds from a failure until the instance serves again: a restart that loads the
/// weights again, captures CUDA graphs and warms up (an assumed round figure; set
/// `--recovery-s` from your own start-up logs).
pub const DEFAULT_RECOVERY_S: f64 = 60.0;

/// Default seconds a draining instance may take to finish its requests: Kubernetes' default
/// `terminationGracePeriodSeconds`, after which the pod is killed.
pub const DEFAULT_DRAIN_TIMEOUT_S: f64 = 30.0;

/// One planned failure (`--fail-at SECONDS:INSTANCE`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FailAt {
    /// Simulated seconds from the start of the run.
    pub time_s: f64,
    /// The instance's index (0-based, as the cluster table numbers them).
    pub instance: u32,
}

impl FromStr for FailAt {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (t, i) = s.split_once(':').ok_or_else(|| {
            format!("`{s}` is not SECONDS:INSTANCE (e.g. 120:0, instance 0 fails 120 s into the run)")
        })?;
        let time_s: f64 = t.trim().parse().map_err(|_| format!("`{t}` in `{s}` is not a number of seconds"))?;
        if !(time_s.is_finite() && (0.0..=MAX_SECONDS).contains(&time_s)) {
            return Err(format!("{time_s} s in `{s}` must be between 0 and {MAX_SECONDS:e}"));
        }
        let instance: u32 =
            i.trim().parse().map_err(|_| format!("`{i}` in `{s}` is not an instance index (0, 1, …)"))?;
        Ok(FailAt { time_s, instance })
    }
}

/// `--fail-at`'s list: comma-separated failures, in any order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FailList(pub Vec<FailAt>);

impl FromStr for FailList {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .map(FailList)
    }
}

/// When instances fail and what happens to their requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultPlan {
    /// Failures at given times, sorted by time then instance.
    pub fail_at: Vec<FailAt>,
    /// Mean seconds between failures of each instance, counted from when it starts serving;
    /// drawn from the exponential distribution seeded by `seed` (`None`: only `fail_at`).
    pub mtbf_s: Option<f64>,
    /// Seconds from a failure until the instance serves again.
    pub recovery_s: f64,
    /// How many times one request may continue on another instance (0: it fails).
    pub migration_limit: u32,
    /// A rolling restart: when instance 0 starts draining (seconds); each next instance drains
    /// when the one before serves again (`None`: none).
    pub rolling_restart_s: Option<f64>,
    /// The longest a draining instance finishes its requests before it stops anyway.
    pub drain_timeout_s: f64,
    /// Seed of the failure draws (`--seed`).
    #[serde(skip)]
    pub seed: u64,
}

/// The failure flags as given (`RunOptions::faults`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultOptions {
    /// `--fail-at`.
    pub fail_at: Vec<FailAt>,
    /// `--mtbf-s`.
    pub mtbf_s: Option<f64>,
    /// `--recovery-s` (default [`DEFAULT_RECOVERY_S`]).
    pub recovery_s: Option<f64>,
    /// `--migration-limit` (default 0).
    pub migration_limit: Option<u32>,
    /// `--rolling-restart`.
    pub rolling_restart_s: Option<f64>,
    /// `--drain-timeout-s` (default [`DEFAULT_DRAIN_TIMEOUT_S`]).
    pub drain_timeout_s: Option<f64>,
}

impl FaultOptions {
    /// The plan these flags give, draws seeded by `seed`; `None` when no failure or restart is
    /// asked for, in which case `--recovery-s` and `--migration-limit` must not be set (they
    /// would mean nothing), nor `--drain-timeout-s` without `--rolling-restart`.
    pub fn plan(&self, seed: u64) -> Result<Option<FaultPlan>> {
        if self.drain_timeout_s.is_some() && self.rolling_restart_s.is_none() {
            return Err(Error::invalid(
                "--drain-timeout-s",
                "means nothing without a rolling restart or autoscaling: add --rolling-restart SECONDS or --autoscale hpa",
            ));
        }
        if self.fail_at.is_empty() && self.mtbf_s.is_none() && self.rolling_restart_s.is_none() {
            for (flag, set) in
                [("--recovery-s", self.recovery_s.is_some()), ("--migration-limit", self.migration_limit.is_some())]
            {
                if set {
                    return Err(Error::invalid(
                        flag,
                        "means nothing without instance failures: add --fail-at SECONDS:INSTANCE, --mtbf-s SECONDS or \
                         --rolling-restart SECONDS",
                    ));
                }
            }
            return Ok(None);
        }
        if let Some(t) = self.rolling_restart_s {
            seconds("--rolling-restart", t, false)?;
        }
        let drain_timeout_s =
            seconds("--drain-timeout-s", self.drain_timeout_s.unwrap_or(DEFAULT_DRAIN_TIMEOUT_S), false)?;
        if let Some(m) = self.mtbf_s {
            seconds("--mtbf-s", m, true)?;
        }
        let recovery_s = seconds("--recovery-s", self.recovery_s.unwrap_or(DEFAULT_RECOVERY_S), false)?;
        let mut fail_at = self.fail_at.clone();
        fail_at.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.instance.cmp(&b.instance)));
        Ok(Some(FaultPlan {
            fail_at,
            mtbf_s: self.mtbf_s,
            recovery_s,
            migration_limit: self.migration_limit.unwrap_or(0),
            rolling_restart_s: self.rolling_restart_s,
            drain_timeout_s,
            seed,
        }))
    }
}

impl FaultPlan {
    /// Checks the plan against the deployment: every instance named exists, and failures are
    /// modelled for data-parallel instances only.
    pub fn validate(&self, instances: u32, pd: bool, engine: crate::engine::EngineKind) -> Result<()> {
        // The flag that asked for failures.
        let flag = match (self.fail_at.is_empty(), self.mtbf_s.is_some()) {
            (false, _) => "--fail-at",
            (true, true) => "--mtbf-s",
            (true, false) => "--rolling-restart",
        };
        if engine == crate::engine::EngineKind::VllmV0 {
            return Err(Error::invalid(
                flag,
                "instance failures are not modelled for vLLM V0: its multi-step batches and asynchronous output \
                 processing hold tokens the client has not seen, which a migration would have to replay",
            ));
        }
        if pd {
            return Err(Error::invalid(
                flag,
                "instance failures are modelled for data-parallel instances (--instances), not yet for prefill/decode pools",
            ));
        }
        if let Some(f) = self.fail_at.iter().find(|f| f.instance >= instances) {
            return Err(Error::invalid(
                "--fail-at",
                format!(
                    "instance {} does not exist: the deployment has {instances} instance{} (0 to {})",
                    f.instance,
                    if instances == 1 { "" } else { "s" },
                    instances - 1
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_items_say_what_is_wrong() {
        let l: FailList = "120:0, 30.5:2".parse().unwrap();
        assert_eq!(l.0, vec![FailAt { time_s: 120.0, instance: 0 }, FailAt { time_s: 30.5, instance: 2 }]);
        for (bad, says) in [
            ("120", "not SECONDS:INSTANCE"),
            ("x:0", "not a number of seconds"),
            ("-1:0", "must be between 0"),
            ("inf:0", "must be between 0"),
            ("1:-1", "not an instance index"),
        ] {
            let e = bad.parse::<FailList>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_plan_is_sorted_checked_and_its_companions_need_a_failure() {
        use crate::engine::EngineKind;
        let at = |time_s, instance| FailAt { time_s, instance };
        let opts = |fail_at: &[FailAt], mtbf_s, recovery_s, migration_limit| FaultOptions {
            fail_at: fail_at.to_vec(),
            mtbf_s,
            recovery_s,
            migration_limit,
            ..FaultOptions::default()
        };
        let p = opts(&[at(9.0, 1), at(3.0, 2), at(3.0, 0)], None, None, Some(2)).plan(7).unwrap().unwrap();
        assert_eq!(p.fail_at, vec![at(3.0, 0), at(3.0, 2), at(9.0, 1)]);
        assert_eq!((p.recovery_s, p.migration_limit, p.seed), (DEFAULT_RECOVERY_S, 2, 7));
        assert!(p.validate(3, false, EngineKind::Vllm).is_ok());
        let e = p.validate(2, false, EngineKind::Sglang).unwrap_err().to_string();
        assert!(e.contains("instance 2 does not exist") && e.contains("0 to 1"), "{e}");
        assert!(p.validate(3, true, EngineKind::Vllm).unwrap_err().to_string().contains("prefill/decode"));
        assert!(p.validate(3, false, EngineKind::VllmV0).unwrap_err().to_string().contains("vLLM V0"));
        assert_eq!(FaultOptions::default().plan(0).unwrap(), None);
        let e = opts(&[], None, Some(5.0), None).plan(0).unwrap_err().to_string();
        assert!(e.contains("--recovery-s") && e.contains("means nothing"), "{e}");
        let e = opts(&[], None, None, Some(1)).plan(0).unwrap_err().to_string();
        assert!(e.contains("--migration-limit"), "{e}");
        for m in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(opts(&[], Some(m), None, None).plan(0).is_err(), "{m}");
        }
        assert!(opts(&[at(1.0, 0)], None, Some(-1.0), None).plan(0).is_err());
        assert!(opts(&[], Some(3600.0), Some(0.0), None).plan(0).unwrap().is_some());
        // A rolling restart alone is a plan; its drain timeout needs it.
        let rolling = FaultOptions { rolling_restart_s: Some(10.0), ..FaultOptions::default() };
        let p = rolling.plan(0).unwrap().unwrap();
        assert_eq!((p.rolling_restart_s, p.drain_timeout_s, p.recovery_s), (Some(10.0), 30.0, DEFAULT_RECOVERY_S));
        assert!(p.validate(2, false, EngineKind::VllmV0).unwrap_err().to_string().contains("--rolling-restart"));
        let e = FaultOptions { drain_timeout_s: Some(5.0), ..FaultOptions::default() }.plan(0).unwrap_err().to_string();
        assert!(e.contains("--drain-timeout-s") && e.contains("--rolling-restart"), "{e}");
        for bad in [-1.0, f64::NAN] {
            assert!(FaultOptions { rolling_restart_s: Some(bad), ..FaultOptions::default() }.plan(0).is_err());
            let o = FaultOptions { drain_timeout_s: Some(bad), ..rolling.clone() };
            assert!(o.plan(0).is_err());
        }
    }
}
