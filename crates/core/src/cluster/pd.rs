//! Prefill/decode disaggregation (ENGINE_SPEC §6): the two hand-off styles and the KV link.
//!
//! - `vllm` (§6.1, NixlConnector behind the toy proxy): the prefill instance runs the request
//!   with max_tokens = 1 (the proxy drops that token) and keeps its blocks until the decode
//!   instance has read them; the decode instance, chosen when the prefill returns, looks up its
//!   own prefix cache, allocates the rest of the prompt (waiting, FIFO, while it has no room),
//!   pulls only the blocks it does not hold, then recomputes the prompt's last token as a small
//!   step and decodes. cachesim lands the pulled KV in the decode cache and lets the engine's
//!   own admission find it: the step recomputes the prompt's tail past the last full block
//!   (under one block) rather than exactly one token.
//! - `sglang` (§6.2): the router picks both instances at arrival; the decode instance
//!   pre-allocates the whole prompt (FIFO, the head blocks the rest) before the prefill instance
//!   may start (bootstrap); the prefill instance samples the first token and ships it with the
//!   KV; the decode instance merges the request into its decode batch. cachesim models the
//!   decode side's first step as a one-token extend (its cost is one decode slot) and does not
//!   model `num_reserved_decode_tokens` (512) in the pre-allocation rule.
//!
//! The link: transfers queue FIFO on `links` lanes (NICs); one takes
//! `latency + bytes / bandwidth` on the first free lane, bytes = prompt tokens not already on the
//! decode instance × KV bytes per token (all layers, all TP ranks: each rank sends its share over
//! its own NIC, so `links` is the NICs used in parallel). Default: one 400 Gb/s NIC at the
//! 25 GB/s one transfer reaches before chunking (§6.3, ROCm/mori #351) and 1 ms set-up
//! (assumed; no published figure).

use crate::error::{Error, Result};
use serde::Serialize;

/// Who picks the decode instance and when the KV moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum PdStyle {
    /// vLLM's proxy + NixlConnector: decode chosen after prefill, pulls the KV it lacks.
    Vllm,
    /// SGLang's PD router: both chosen at arrival, decode pre-allocates, prefill pushes.
    Sglang,
}

/// The KV link between the pools.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvLink {
    /// `--kv-link-gbps`: effective bandwidth of one lane, Gb/s.
    pub gbps: f64,
    /// `--kv-link-latency-ms`: fixed cost of one transfer.
    pub latency_ms: f64,
    /// `--kv-links`: lanes (NICs) used in parallel.
    pub links: u32,
}

impl Default for KvLink {
    fn default() -> Self {
        KvLink { gbps: 200.0, latency_ms: 1.0, links: 1 }
    }
}

impl KvLink {
    /// Seconds one transfer of `bytes` occupies its lanes.
    pub fn transfer_s(&self, bytes: u64) -> f64 {
        self.latency_ms / 1e3 + bytes as f64 * 8.0 / (self.gbps * 1e9 * self.links as f64)
    }
}

/// A disaggregated deployment's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PdConfig {
    /// `--prefill-instances`.
    pub prefill: u32,
    /// `--decode-instances`.
    pub decode: u32,
    /// `--pd-style`.
    pub style: PdStyle,
    pub link: KvLink,
    /// Per-pool `--max-num-seqs` / `--max-num-batched-tokens` (`None`: the shared value).
    pub prefill_max_num_seqs: Option<u32>,
    pub prefill_max_num_batched_tokens: Option<u32>,
    pub decode_max_num_seqs: Option<u32>,
    pub decode_max_num_batched_tokens: Option<u32>,
}

impl PdConfig {
    /// Checks the values a user set.
    pub fn validate(&self) -> Result<()> {
        for (flag, v) in [("--prefill-instances", self.prefill), ("--decode-instances", self.decode)] {
            if v == 0 || v > super::MAX_INSTANCES {
                return Err(Error::invalid(flag, format!("{v} must be between 1 and {}", super::MAX_INSTANCES)));
            }
        }
        if !(self.link.gbps.is_finite() && self.link.gbps > 0.0 && self.link.gbps <= 1e6) {
            return Err(Error::invalid(
                "--kv-link-gbps",
                format!("{} must be above 0 and at most 1000000", self.link.gbps),
            ));
        }
        if !(self.link.latency_ms.is_finite() && (0.0..=3.6e6).contains(&self.link.latency_ms)) {
            return Err(Error::invalid(
                "--kv-link-latency-ms",
                format!("{} must be between 0 and 3600000", self.link.latency_ms),
            ));
        }
        if self.link.links == 0 || self.link.links > 1024 {
            return Err(Error::invalid("--kv-links", format!("{} must be between 1 and 1024", self.link.links)));
        }
        Ok(())
    }
}

/// One request's way through a disaggregated deployment (seconds; `NaN` when not reached).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PdTimes {
    pub prefill_instance: u32,
    pub decode_instance: u32,
    /// Reached the prefill instance's queue.
    pub arrived_s: f64,
    /// Prefill done (its first token sampled on the prefill instance).
    pub prefill_done_s: f64,
    pub transfer_start_s: f64,
    pub transfer_end_s: f64,
    pub bytes: u64,
}

impl Default for PdTimes {
    fn default() -> Self {
        PdTimes {
            prefill_instance: u32::MAX,
            decode_instance: u32::MAX,
            arrived_s: f64::NAN,
            prefill_done_s: f64::NAN,
            transfer_start_s: f64::NAN,
            transfer_end_s: f64::NAN,
            bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time_by_hand() {
        // 1 GB over 2 lanes of 100 Gb/s: 8e9 bits / 2e11 b/s = 0.04 s, plus 1 ms.
        let l = KvLink { gbps: 100.0, latency_ms: 1.0, links: 2 };
        assert!((l.transfer_s(1_000_000_000) - 0.041).abs() < 1e-12);
    }
}
