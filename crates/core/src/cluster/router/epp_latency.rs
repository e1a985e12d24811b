//! `llm-d-predicted-latency`: llm-d's endpoint picker with its latency predictor on — the
//! `predicted-latency-producer` (llm-d/llm-d-inference-scheduler 520af478,
//! `pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency`) feeding the
//! profile of [`super::slo_pick`], over the predictor of [`super::latency_model`].
//!
//! - **At routing** (`Produce`, `generatePredictions`): each candidate's TTFT (and, in streaming
//!   mode, TPOT) is predicted from its scraped metrics, the prompt's length, the approximate
//!   prefix score and the prompt tokens the EPP has in flight there (without this request);
//!   headroom = the request's SLO − the prediction (`x-slo-ttft-ms`, `x-slo-tpot-ms`: the same
//!   for every request here, `--slo-ttft-ms` / `--slo-tpot-ms`; without one the SLO is 0 and
//!   every headroom negative, so the lowest prediction wins). Not streaming (the producer's
//!   default), TPOT headroom is 0 everywhere. More than 100 candidates get no predictions.
//! - **At dispatch** (`PreRequest`): the request joins the endpoint's running list (its idle
//!   test) and its prompt tokens the endpoint's `prefill_tokens_in_flight` until the response
//!   ends (`decrementEndpointCounter` at end of stream; a failed request at its failure, as the
//!   context's TTL would, sooner).
//! - **Samples** (`recordTTFTTrainingData`, the TPOT sample at end of stream): the features are
//!   the target's metrics at dispatch with the in-flight count including the request. Streaming,
//!   a TTFT sample at the first token and, at the end, one TPOT sample of the mean time per
//!   token after the first (with the endpoint's metrics as last seen, prefix 0); not streaming,
//!   one "TTFT" sample at the end that is the end-to-end latency, as upstream.
//!
//! Upstream counts whitespace-separated words of the prompt text; this counts its tokens. The
//! predictor standardises every column, so the unit is immaterial; only the spread of words per
//! token between prompts is lost. The chart's `latency-slo-admitter` (which rejects sheddable
//! requests when no endpoint is valid) is not modelled: no request here is sheddable.

use super::latency_model::{Features, ModelOptions, Objective, Predictor};
use super::slo_pick::{self, Candidate, Strategy};
use crate::cache::ReqId;
use rand::Rng;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// The predicted-latency flags as given (`None`: not given, the default applies).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LatencyFlags {
    /// `--slo-ttft-ms`: every request's `x-slo-ttft-ms` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<f64>,
    /// `--slo-tpot-ms`: every request's `x-slo-tpot-ms` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_tpot_ms: Option<f64>,
    /// `--latency-objective` [mean].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,
    /// `--latency-retraining-interval-s` [10].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retraining_interval_s: Option<f64>,
    /// `--latency-model-sync-interval-s` [30].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_sync_interval_s: Option<f64>,
    /// `--latency-min-samples-for-retrain` [10].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_samples_for_retrain: Option<u64>,
    /// `--latency-streaming-mode`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
    /// `--headroom-selection-strategy` [least].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
}

impl LatencyFlags {
    /// Whether none is given.
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }

    /// The first flag given (for a refusal).
    pub fn first_flag(&self) -> Option<&'static str> {
        [
            (self.slo_ttft_ms.is_some(), "--slo-ttft-ms"),
            (self.slo_tpot_ms.is_some(), "--slo-tpot-ms"),
            (self.objective.is_some(), "--latency-objective"),
            (self.retraining_interval_s.is_some(), "--latency-retraining-interval-s"),
            (self.model_sync_interval_s.is_some(), "--latency-model-sync-interval-s"),
            (self.min_samples_for_retrain.is_some(), "--latency-min-samples-for-retrain"),
            (self.streaming, "--latency-streaming-mode"),
            (self.strategy.is_some(), "--headroom-selection-strategy"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// An endpoint's scraped metrics, as the profile reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    pub waiting: u32,
    pub running: u32,
    pub kv: f64,
}

/// A request the EPP dispatched and has not seen end.
#[derive(Debug, Clone, Copy)]
struct Flight {
    instance: usize,
    dispatched_s: f64,
    /// The TTFT sample's features (the in-flight count includes the request).
    at_dispatch: Features,
    /// Whole milliseconds to the first token, once seen.
    ttft_ms: Option<f64>,
}

/// The profile's state.
#[derive(Debug, Clone)]
pub struct LatencyProfile {
    slo_ttft_ms: f64,
    slo_tpot_ms: f64,
    streaming: bool,
    strategy: Strategy,
    predictor: Predictor,
    flights: FxHashMap<ReqId, Flight>,
    dispatched: Vec<u32>,
    in_flight: Vec<f64>,
    cands: Vec<Candidate>,
    feats: Vec<Features>,
    scores: Vec<f64>,
}

/// The predictor client's `LATENCY_MAX_BULK_SIZE`: a call for more endpoints is refused.
const MAX_BULK: usize = 100;

/// Whole milliseconds from `from` to `to` seconds (Go's `Duration.Milliseconds`).
fn whole_ms(from: f64, to: f64) -> f64 {
    ((to - from) * 1e3).floor()
}

impl LatencyProfile {
    pub fn new(f: &LatencyFlags, seed: u64, n: usize) -> Self {
        let opts = ModelOptions {
            objective: f.objective.unwrap_or_default(),
            retrain_s: f.retraining_interval_s.unwrap_or(10.0),
            sync_s: f.model_sync_interval_s.unwrap_or(30.0),
            min_samples: f.min_samples_for_retrain.unwrap_or(10),
            seed,
        };
        LatencyProfile {
            slo_ttft_ms: f.slo_ttft_ms.unwrap_or(0.0),
            slo_tpot_ms: f.slo_tpot_ms.unwrap_or(0.0),
            streaming: f.streaming,
            strategy: f.strategy.unwrap_or_default(),
            predictor: Predictor::new(opts),
            flights: FxHashMap::default(),
            dispatched: vec![0; n],
            in_flight: vec![0.0; n],
            cands: Vec::with_capacity(n),
            feats: vec![Features::default(); n],
            scores: Vec::with_capacity(n),
        }
    }

    /// Picks among `endpoints` (instance, its metrics, its prefix score) for a prompt of
    /// `input` tokens at `now`: the endpoint, and whether a prefix-affinity filter narrowed the
    /// choice.
    pub fn pick(
        &mut self,
        now: f64,
        input: f64,
        endpoints: impl Iterator<Item = (usize, Metrics, f64)>,
        rng: &mut impl Rng,
    ) -> (usize, bool) {
        self.predictor.advance(now);
        self.cands.clear();
        for (i, m, prefix) in endpoints {
            let f = Features {
                kv: m.kv,
                input,
                waiting: m.waiting,
                running: m.running,
                in_flight: self.in_flight[i],
                prefix,
            };
            self.feats[i] = f;
            self.cands.push(Candidate {
                instance: i,
                prefix,
                kv: m.kv,
                waiting: m.waiting,
                dispatched: self.dispatched[i],
                ttft_ms: None,
                ttft_headroom: 0.0,
                tpot_headroom: 0.0,
            });
        }
        if self.cands.len() <= MAX_BULK {
            for c in &mut self.cands {
                let f = &self.feats[c.instance];
                let ttft = self.predictor.ttft(f);
                c.ttft_ms = Some(ttft);
                c.ttft_headroom = self.slo_ttft_ms - ttft;
                if self.streaming {
                    c.tpot_headroom = self.slo_tpot_ms - self.predictor.tpot(f);
                }
            }
        }
        let strict = slo_pick::affinity(&mut self.cands, slo_pick::STRICT_AFFINITY, rng);
        slo_pick::tiers(&mut self.cands, rng);
        let loose = slo_pick::affinity(&mut self.cands, slo_pick::LOOSE_AFFINITY, rng);
        slo_pick::score(&self.cands, self.strategy, &mut self.scores);
        let k = slo_pick::pick(&self.scores, rng);
        (self.cands.get(k).map_or(0, |c| c.instance), strict || loose)
    }

    /// Request `id` of `input` prompt tokens goes to `instance` at `now` (after [`Self::pick`]).
    pub fn dispatch(&mut self, id: ReqId, instance: usize, input: f64, now: f64) {
        self.dispatched[instance] += 1;
        self.in_flight[instance] += input;
        let at_dispatch = Features { in_flight: self.in_flight[instance], ..self.feats[instance] };
        self.flights.insert(id, Flight { instance, dispatched_s: now, at_dispatch, ttft_ms: None });
    }

    /// Its first token reached the EPP at `now`.
    pub fn first_token(&mut self, id: ReqId, now: f64) {
        if let Some(f) = self.flights.get_mut(&id) {
            let ms = whole_ms(f.dispatched_s, now);
            f.ttft_ms = Some(ms);
            if self.streaming {
                self.predictor.record_ttft(now, f.at_dispatch, ms);
            }
        }
    }

    /// Its response ended at `now` after `tokens` output tokens; `last_seen`: the endpoint's
    /// metrics as the EPP last read them.
    pub fn ended(&mut self, id: ReqId, tokens: u32, now: f64, last_seen: Metrics) {
        let Some(f) = self.flights.get(&id) else { return };
        let e2e = whole_ms(f.dispatched_s, now);
        if !self.streaming {
            self.predictor.record_ttft(now, f.at_dispatch, e2e);
        } else if let (Some(ttft), true) = (f.ttft_ms, tokens > 1) {
            let features = Features {
                kv: last_seen.kv,
                waiting: last_seen.waiting,
                running: last_seen.running,
                prefix: 0.0,
                ..f.at_dispatch
            };
            self.predictor.record_tpot(now, features, (e2e - ttft) / (tokens - 1) as f64);
        }
    }

    /// It left the endpoint (ended or failed).
    pub fn finished(&mut self, id: ReqId) {
        if let Some(f) = self.flights.remove(&id) {
            self.dispatched[f.instance] -= 1;
            self.in_flight[f.instance] = (self.in_flight[f.instance] - f.at_dispatch.input).max(0.0);
        }
    }

    /// Samples the predictor holds (TTFT, TPOT).
    pub fn samples(&self) -> (u64, u64) {
        self.predictor.samples()
    }
}
