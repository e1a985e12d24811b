//! A deployment: many serving instances behind a router (data parallel), or prefill and
//! decode pools joined by a KV link. This module owns what sits above one instance: the
//! router policies ([`router`]) and the driver that runs N instances on one shared clock.
//! One instance's event loop stays in [`crate::sim`].

pub mod autoscale;
pub mod faults;
pub mod pd;
pub mod planner;
pub mod router;

use crate::error::{Error, Result};
use router::{RouterKind, RouterParams};
use serde::Serialize;

/// The most instances a deployment may have.
pub const MAX_INSTANCES: u32 = 4096;

/// The shortest period between an autoscaler's decisions (the HPA's syncs, the SLA planner's
/// adjustments), seconds: one record is kept per decision (a day at this period is 864,000).
pub const MIN_DECISION_PERIOD_S: f64 = 0.1;

/// How the deployment is laid out (data parallel: `instances` identical instances behind
/// `router`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClusterConfig {
    /// `--instances` (alias `--dp`): identical serving instances, each with its own scheduler,
    /// cache and GPUs (`--tp` each).
    pub instances: u32,
    /// `--router`: the policy in front of them.
    pub router: RouterKind,
    pub router_params: RouterParams,
    /// Prefill/decode disaggregation (`--prefill-instances`, `--decode-instances`); `--router`
    /// then picks the prefill instance and `decode_router` the decode one.
    pub pd: Option<pd::PdConfig>,
    /// `--decode-router` (default least-load, as the PD routers default).
    pub decode_router: RouterKind,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            instances: 1,
            router: RouterKind::RoundRobin,
            router_params: RouterParams::default(),
            pd: None,
            decode_router: RouterKind::LeastLoad,
        }
    }
}

impl ClusterConfig {
    /// Checks the values a user set.
    pub fn validate(&self) -> Result<()> {
        if self.instances == 0 || self.instances > MAX_INSTANCES {
            return Err(Error::invalid(
                "--instances",
                format!("{} must be between 1 and {MAX_INSTANCES}", self.instances),
            ));
        }
        self.validate_router()?;
        if let Some(pd) = &self.pd {
            if self.instances > 1 {
                return Err(Error::invalid(
                    "--instances",
                    "cannot be combined with --prefill-instances/--decode-instances (the pools set the count)",
                ));
            }
            pd.validate()?;
        }
        Ok(())
    }

    fn validate_router(&self) -> Result<()> {
        let p = &self.router_params;
        let share = |flag: &str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid(flag, format!("{v} must be between 0 and 1")))
            }
        };
        let positive = |flag: &str, v: f64| {
            if v.is_finite() && (0.0..=1e9).contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid(flag, format!("{v} must be a number between 0 and 1e9")))
            }
        };
        let count = |flag: &str, v: u64| {
            if v >= 1 {
                Ok(())
            } else {
                Err(Error::invalid(flag, "0 must be at least 1"))
            }
        };
        share("--cache-threshold", p.cache_threshold)?;
        positive("--balance-rel-threshold", p.balance_rel_threshold)?;
        positive("--eviction-interval-secs", p.eviction_interval_secs)?;
        positive("--aibrix-eviction-secs", p.aibrix_eviction_secs)?;
        positive("--aibrix-std-dev-factor", p.aibrix_std_dev_factor)?;
        positive("--overlap-score-weight", p.overlap_score_weight)?;
        let w = p.epp_weights;
        positive("--queue-scorer-weight", w.queue)?;
        positive("--kv-cache-utilization-scorer-weight", w.kv_cache)?;
        positive("--prefix-cache-scorer-weight", w.prefix)?;
        positive("--lora-affinity-scorer-weight", w.lora)?;
        positive("--refresh-metrics-interval-ms", p.refresh_metrics_interval_ms)?;
        positive("--precise-prefix-cache-scorer-weight", w.precise)?;
        positive("--cpu-prefix-cache-scorer-weight", w.cpu_prefix)?;
        positive("--no-hit-lru-scorer-weight", w.no_hit_lru)?;
        count("--cpu-lru-capacity-per-server", p.cpu_lru_capacity_per_server as u64)?;
        if let Some(t) = p.max_prefix_tokens_to_match {
            count("--max-prefix-tokens-to-match", t as u64)?;
        }
        // The EPP's settings mean nothing to another router (nor to llm-d-predicted-latency,
        // which replaces the weighted scorers: below).
        let llm_d = [self.router, self.decode_router]
            .iter()
            .any(|r| matches!(r, RouterKind::LlmD | RouterKind::LlmDPredictedLatency));
        let epp_flag = w.first_set().or_else(|| {
            [
                (p.max_prefix_tokens_to_match.is_some(), "--max-prefix-tokens-to-match"),
                (
                    !router::epp::is_default_lru_capacity(&p.cpu_lru_capacity_per_server),
                    "--cpu-lru-capacity-per-server",
                ),
                (!p.epp_release.is_default(), "--epp-release"),
            ]
            .into_iter()
            .find_map(|(set, flag)| set.then_some(flag))
        });
        if let (Some(flag), false) = (epp_flag, llm_d) {
            return Err(Error::invalid(flag, "sets llm-d's endpoint picker and means nothing without --router llm-d"));
        }
        if !router::epp::is_default_lru_capacity(&p.cpu_lru_capacity_per_server) && w.cpu_prefix == 0.0 {
            return Err(Error::invalid(
                "--cpu-lru-capacity-per-server",
                "sizes the CPU-tier prefix producer, which runs only with --cpu-prefix-cache-scorer-weight above 0",
            ));
        }
        if let Some(d) = p.kv_event_delay_ms {
            positive("--kv-event-delay-ms", d)?;
            let reads = self.router == RouterKind::KvAware || (self.router == RouterKind::LlmD && w.precise > 0.0);
            if !reads {
                return Err(Error::invalid(
                    "--kv-event-delay-ms",
                    "delays the KV events a router's indexer reads: give --router kv-aware, or --router llm-d with \
                     --precise-prefix-cache-scorer-weight",
                ));
            }
        }
        if self.reads_kv_events() && self.pd.is_some() {
            return Err(Error::invalid(
                "--kv-event-delay-ms",
                "a router reading KV events is not modelled with prefill/decode pools",
            ));
        }
        let l = &p.predicted_latency;
        if let Some(flag) = l.first_flag().filter(|_| self.router != RouterKind::LlmDPredictedLatency) {
            return Err(Error::invalid(
                flag,
                "is llm-d's latency predictor's and means nothing without --router llm-d-predicted-latency",
            ));
        }
        for v in l.slo_ttft_ms.iter().flat_map(|h| h.values()) {
            positive("--slo-ttft-ms", v)?;
        }
        if let Some(h) = l.slo_tpot_ms {
            for v in h.values() {
                positive("--slo-tpot-ms", v)?;
            }
            if !l.streaming {
                return Err(Error::invalid(
                    "--slo-tpot-ms",
                    "is read in streaming mode only (the producer neutralises TPOT otherwise): add --latency-streaming-mode",
                ));
            }
        }
        if let Some(v) = l.retraining_interval_s {
            seconds("--latency-retraining-interval-s", v, true)?;
        }
        if let Some(v) = l.model_sync_interval_s {
            seconds("--latency-model-sync-interval-s", v, true)?;
        }
        if let Some(v) = l.min_samples_for_retrain {
            count("--latency-min-samples-for-retrain", v)?;
        }
        if self.router == RouterKind::LlmDPredictedLatency && !w.is_default() {
            return Err(Error::invalid(
                "--router",
                "llm-d-predicted-latency replaces the scorers whose weights are set (--queue-scorer-weight, \
                 --kv-cache-utilization-scorer-weight, --prefix-cache-scorer-weight, --lora-affinity-scorer-weight, \
                 --precise-prefix-cache-scorer-weight, --cpu-prefix-cache-scorer-weight, --no-hit-lru-scorer-weight): \
                 they mean nothing with it",
            ));
        }
        let latency_router = [self.router, self.decode_router].contains(&RouterKind::LlmDPredictedLatency);
        if latency_router && self.pd.is_some() {
            return Err(Error::invalid(
                "--router",
                "llm-d-predicted-latency is not modelled with prefill/decode pools (llm-d's prefill profile and its \
                 samples from the prefill endpoint are not)",
            ));
        }
        count("--router-chars-per-token", p.chars_per_token as u64)?;
        count("--prefix-chunk-chars", p.prefix_chunk_chars as u64)?;
        count("--aibrix-block-size", p.aibrix_block_chars as u64)?;
        count("--aibrix-block-number", p.aibrix_block_number as u64)?;
        count("--block-size", p.kv_block_size as u64)?;
        Ok(())
    }

    /// Whether the router reads the instances' KV events (`kv-aware` with `--kv-event-delay-ms`,
    /// `llm-d`'s precise prefix scorer).
    pub fn reads_kv_events(&self) -> bool {
        let p = &self.router_params;
        (self.router == RouterKind::KvAware && p.kv_event_delay_ms.is_some())
            || (self.router == RouterKind::LlmD && p.epp_weights.precise > 0.0)
    }

    /// More than one instance.
    pub fn is_cluster(&self) -> bool {
        self.instances > 1 || self.pd.is_some()
    }

    /// Instances in all.
    pub fn total_instances(&self) -> u32 {
        self.pd.map_or(self.instances, |p| p.prefill + p.decode)
    }
}

/// The longest time a fleet setting may be or take (about 31 years): beyond it a figure is a
/// typing slip, not a plan.
pub(crate) const MAX_SECONDS: f64 = 1e9;

/// A fleet flag's seconds, refused unless finite, at most [`MAX_SECONDS`], and above 0
/// (`above_zero`) or 0 or more.
pub(crate) fn seconds(flag: &str, v: f64, above_zero: bool) -> Result<f64> {
    if v.is_finite() && v <= MAX_SECONDS && (v > 0.0 || (!above_zero && v == 0.0)) {
        return Ok(v);
    }
    let low = if above_zero { "above 0" } else { "0 or more" };
    Err(Error::invalid(flag, format!("{v} must be a number of seconds {low}, at most {MAX_SECONDS:e}")))
}
