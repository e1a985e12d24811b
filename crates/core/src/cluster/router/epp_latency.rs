//! `llm-d-predicted-latency`: llm-d's endpoint picker with its latency predictor on — the
//! `predicted-latency-producer` (llm-d/llm-d-inference-scheduler 520af478,
//! `pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency`) feeding the
//! profile of [`super::slo_pick`], over the predictor of [`super::latency_model`].
//!
//! - **At routing** (`Produce`, `generatePredictions`): each candidate's TTFT (and, in streaming
//!   mode, TPOT) is predicted from its scraped metrics, the prompt's length, the approximate
//!   prefix score and the prompt tokens the EPP has in flight there (without this request);
//!   headroom = the request's SLO − the prediction (`x-slo-ttft-ms`, `x-slo-tpot-ms`: per
//!   request or per priority class, `--slo-ttft-ms` / `--slo-tpot-ms` ([`SloHeader`]); without
//!   one the SLO is 0 and every headroom negative, so the lowest prediction wins). The TPOT
//!   budget on an endpoint is tightened to the strictest TPOT SLO running there
//!   (`getEndpointMinTPOTSLO`). Not streaming (the producer's
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
//! token between prompts is lost.
//!
//! **Admission** ([`LatencyProfile::admits`], the chart's `latency-slo-admitter`): a sheddable
//! request — a negative priority carrying an SLO header — is rejected when no endpoint is
//! predicted to meet its SLOs, none is idle by its metrics and none is nearly empty.

use super::latency_model::{Features, ModelOptions, Objective, Predictor};
use super::slo_pick::{self, Candidate, Strategy};
use crate::cache::ReqId;
use rand::Rng;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// The most priority classes an SLO header flag may list.
pub const MAX_CLASSES: usize = 16;

/// An SLO header's value (`--slo-ttft-ms`, `--slo-tpot-ms`): `MS` for every request, or
/// `P:MS,…` per priority class (a request of a class not listed sends no header).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SloHeader {
    all: Option<f64>,
    classes: [(i32, f64); MAX_CLASSES],
    len: usize,
}

impl SloHeader {
    /// The same header on every request.
    pub fn all(ms: f64) -> Self {
        SloHeader { all: Some(ms), classes: [(0, 0.0); MAX_CLASSES], len: 0 }
    }

    /// The header a request of priority class `class` carries, ms (0: none).
    pub fn get(&self, class: i32) -> f64 {
        self.all.or_else(|| self.classes[..self.len].iter().find(|c| c.0 == class).map(|c| c.1)).unwrap_or(0.0)
    }

    /// Every value given.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.all.into_iter().chain(self.classes[..self.len].iter().map(|c| c.1))
    }
}

impl std::str::FromStr for SloHeader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let ms = |v: &str| -> Result<f64, String> {
            v.trim().parse::<f64>().map_err(|_| format!("`{v}` is not a number of milliseconds"))
        };
        if !s.contains(':') {
            return Ok(SloHeader::all(ms(s)?));
        }
        let mut h = SloHeader { all: None, classes: [(0, 0.0); MAX_CLASSES], len: 0 };
        for pair in s.split(',') {
            let (p, v) = pair.split_once(':').ok_or_else(|| format!("`{pair}` is not PRIORITY:MS"))?;
            let p: i32 = p.trim().parse().map_err(|_| format!("`{p}` is not a priority (a whole number)"))?;
            if h.classes[..h.len].iter().any(|c| c.0 == p) {
                return Err(format!("priority {p} is given twice"));
            }
            if h.len == MAX_CLASSES {
                return Err(format!("at most {MAX_CLASSES} priority classes"));
            }
            h.classes[h.len] = (p, ms(v)?);
            h.len += 1;
        }
        Ok(h)
    }
}

impl Serialize for SloHeader {
    /// A number for every request, else a map from priority to milliseconds.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if let Some(v) = self.all {
            return s.serialize_f64(v);
        }
        let mut m = s.serialize_map(Some(self.len))?;
        for (p, v) in &self.classes[..self.len] {
            m.serialize_entry(&p.to_string(), v)?;
        }
        m.end()
    }
}

/// The predicted-latency flags as given (`None`: not given, the default applies).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LatencyFlags {
    /// `--slo-ttft-ms`: the requests' `x-slo-ttft-ms` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<SloHeader>,
    /// `--slo-tpot-ms`: the requests' `x-slo-tpot-ms` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_tpot_ms: Option<SloHeader>,
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
    /// Its `x-slo-tpot-ms` (0: none), in its endpoint's running list.
    tpot_slo: f64,
}

/// The profile's state.
#[derive(Debug, Clone)]
pub struct LatencyProfile {
    slo_ttft_ms: Option<SloHeader>,
    slo_tpot_ms: Option<SloHeader>,
    streaming: bool,
    strategy: Strategy,
    predictor: Predictor,
    flights: FxHashMap<ReqId, Flight>,
    dispatched: Vec<u32>,
    /// Per endpoint, the TPOT SLOs of the requests dispatched there (bits of the
    /// non-negative milliseconds, which order as the values) and how many carry each.
    running_tpot: Vec<BTreeMap<u64, u32>>,
    in_flight: Vec<f64>,
    cands: Vec<Candidate>,
    feats: Vec<Features>,
    scores: Vec<f64>,
}

/// The admitter's "cold" endpoint: KV-cache usage below this.
const COLD_KV: f64 = 0.02;

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
            slo_ttft_ms: f.slo_ttft_ms,
            slo_tpot_ms: f.slo_tpot_ms,
            streaming: f.streaming,
            strategy: f.strategy.unwrap_or_default(),
            predictor: Predictor::new(opts),
            flights: FxHashMap::default(),
            dispatched: vec![0; n],
            running_tpot: vec![BTreeMap::new(); n],
            in_flight: vec![0.0; n],
            cands: Vec::with_capacity(n),
            feats: vec![Features::default(); n],
            scores: Vec::with_capacity(n),
        }
    }

    /// The SLO headers (TTFT, TPOT) a request of priority class `class` carries, ms (0: none).
    fn slos(&self, class: i32) -> (f64, f64) {
        let get = |h: &Option<SloHeader>| h.as_ref().map_or(0.0, |h| h.get(class));
        (get(&self.slo_ttft_ms), get(&self.slo_tpot_ms))
    }

    /// The TPOT a request with SLO `slo` may have on endpoint `i`: its SLO, tightened to the
    /// strictest SLO running there (`getEndpointMinTPOTSLO`; a request without one, 0, sits
    /// first and so leaves the budget alone, as upstream's heap does).
    fn tpot_budget(&self, i: usize, slo: f64) -> f64 {
        match self.running_tpot[i].keys().next().map(|&b| f64::from_bits(b)) {
            Some(min) if min > 0.0 => slo.min(min),
            _ => slo,
        }
    }

    /// Whether a request of class `class` is sheddable: a negative priority
    /// (`Objectives.Priority < 0`) and an SLO header.
    pub fn sheddable(&self, class: i32) -> bool {
        let (ttft, tpot) = self.slos(class);
        class < 0 && (ttft > 0.0 || tpot > 0.0)
    }

    /// The `latency-slo-admitter` (`requestcontrol/admitter/latencyslo` `AdmitRequest`): a
    /// sheddable request is rejected unless some endpoint is predicted to meet its SLOs (TTFT
    /// below its SLO and, streaming, TPOT below its budget), runs no request by its own
    /// metrics, or has under 2 % of its KV in use; without predictions it is taken.
    pub fn admits(
        &mut self,
        now: f64,
        input: f64,
        class: i32,
        endpoints: impl Iterator<Item = (usize, Metrics, f64)>,
    ) -> bool {
        if !self.sheddable(class) {
            return true;
        }
        self.predict(now, input, class, endpoints);
        let (ttft_slo, _) = self.slos(class);
        self.cands.iter().all(|c| c.ttft_ms.is_none())
            || self.cands.iter().any(|c| {
                // Not streaming, TPOT is neutral (headroom 0) and valid.
                let tpot_valid = !self.streaming || c.tpot_headroom > 0.0;
                let valid = c.ttft_ms.is_some_and(|t| t < ttft_slo) && tpot_valid;
                valid || self.feats[c.instance].running == 0 || c.kv < COLD_KV
            })
    }

    /// The candidates `endpoints` (instance, its metrics, its prefix score) for a prompt of
    /// `input` tokens of class `class` at `now`, with their predictions ([`Self::cands`]).
    fn predict(&mut self, now: f64, input: f64, class: i32, endpoints: impl Iterator<Item = (usize, Metrics, f64)>) {
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
            let (ttft_slo, tpot_slo) = self.slos(class);
            for k in 0..self.cands.len() {
                let i = self.cands[k].instance;
                let f = &self.feats[i];
                let ttft = self.predictor.ttft(f);
                let tpot_headroom =
                    if self.streaming { self.tpot_budget(i, tpot_slo) - self.predictor.tpot(f) } else { 0.0 };
                let c = &mut self.cands[k];
                c.ttft_ms = Some(ttft);
                c.ttft_headroom = ttft_slo - ttft;
                c.tpot_headroom = tpot_headroom;
            }
        }
    }

    /// Picks among `endpoints` (instance, its metrics, its prefix score) for a prompt of
    /// `input` tokens of priority class `class` at `now`: the endpoint, and whether a
    /// prefix-affinity filter narrowed the choice.
    pub fn pick(
        &mut self,
        now: f64,
        input: f64,
        class: i32,
        endpoints: impl Iterator<Item = (usize, Metrics, f64)>,
        rng: &mut impl Rng,
    ) -> (usize, bool) {
        self.predict(now, input, class, endpoints);
        let strict = slo_pick::affinity(&mut self.cands, slo_pick::STRICT_AFFINITY, rng);
        slo_pick::tiers(&mut self.cands, rng);
        let loose = slo_pick::affinity(&mut self.cands, slo_pick::LOOSE_AFFINITY, rng);
        slo_pick::score(&self.cands, self.strategy, &mut self.scores);
        let k = slo_pick::pick(&self.scores, rng);
        (self.cands.get(k).map_or(0, |c| c.instance), strict || loose)
    }

    /// Request `id` of `input` prompt tokens and priority class `class` goes to `instance` at
    /// `now` (after [`Self::pick`]).
    pub fn dispatch(&mut self, id: ReqId, instance: usize, input: f64, class: i32, now: f64) {
        self.dispatched[instance] += 1;
        self.in_flight[instance] += input;
        let tpot_slo = self.slos(class).1;
        *self.running_tpot[instance].entry(tpot_slo.to_bits()).or_insert(0) += 1;
        let at_dispatch = Features { in_flight: self.in_flight[instance], ..self.feats[instance] };
        self.flights.insert(id, Flight { instance, dispatched_s: now, at_dispatch, ttft_ms: None, tpot_slo });
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
            let running = &mut self.running_tpot[f.instance];
            if let Some(k) = running.get_mut(&f.tpot_slo.to_bits()) {
                *k -= 1;
                if *k == 0 {
                    running.remove(&f.tpot_slo.to_bits());
                }
            }
            self.in_flight[f.instance] = (self.in_flight[f.instance] - f.at_dispatch.input).max(0.0);
        }
    }

    /// Samples the predictor holds (TTFT, TPOT).
    pub fn samples(&self) -> (u64, u64) {
        self.predictor.samples()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// `MS` for all, `P:MS,…` per class (others none), and what is refused.
    #[test]
    fn slo_headers_parse_per_class() {
        let all: SloHeader = "500".parse().unwrap();
        assert_eq!((all.get(0), all.get(7)), (500.0, 500.0));
        let per: SloHeader = "0:500, 1:5000".parse().unwrap();
        assert_eq!((per.get(0), per.get(1), per.get(2)), (500.0, 5000.0, 0.0));
        assert_eq!(serde_json::to_string(&per).unwrap(), r#"{"0":500.0,"1":5000.0}"#);
        assert_eq!(serde_json::to_string(&all).unwrap(), "500.0");
        for bad in ["fast", "0:500,0:600", "x:5", "1:y", "1=5"] {
            assert!(bad.parse::<SloHeader>().is_err(), "{bad}");
        }
    }

    /// Streaming, before any model (every prediction 10 ms): a class-1 request with a TPOT SLO
    /// of 5 ms runs on endpoint 0, so a class-0 request (100 ms) may have 5 ms there — short by
    /// 5 — and 100 on endpoint 1: the tier filter sends it to endpoint 1 (all but one time in
    /// a hundred). Once the class-1 request ends, both endpoints are positive again.
    #[test]
    fn a_strict_tpot_slo_running_on_an_endpoint_holds_new_requests_to_it() {
        let flags = LatencyFlags {
            slo_tpot_ms: Some("0:100,1:5".parse().unwrap()),
            streaming: true,
            ..LatencyFlags::default()
        };
        let mut to_free = 0;
        let idle = || [(0, Metrics::default(), 0.0), (1, Metrics::default(), 0.0)].into_iter();
        for seed in 0..200 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut l = LatencyProfile::new(&flags, seed, 2);
            l.dispatch(1, 0, 10.0, 1, 0.0);
            assert_eq!((l.tpot_budget(0, 100.0), l.tpot_budget(1, 100.0)), (5.0, 100.0));
            let (i, _) = l.pick(0.0, 10.0, 0, idle(), &mut rng);
            to_free += usize::from(i == 1);
            l.finished(1);
            assert_eq!(l.tpot_budget(0, 100.0), 100.0, "the strict request left");
        }
        assert!(to_free >= 195, "{to_free} of 200");
        // A request without a TPOT SLO running there leaves the budget alone (upstream's heap
        // keeps its 0 first).
        let mut l = LatencyProfile::new(&flags, 0, 2);
        l.dispatch(1, 0, 10.0, 1, 0.0);
        l.dispatch(2, 0, 10.0, 9, 0.0);
        assert_eq!(l.tpot_budget(0, 100.0), 100.0);
    }
    /// The admitter, before any model (every prediction 10 ms): a request of priority −1 with
    /// a TTFT SLO of 5 ms is met nowhere, so it is shed while both endpoints are busy and
    /// warm; an idle endpoint, a nearly empty one, a looser SLO (50 ms), a priority of 0 or no
    /// header lets it in.
    #[test]
    fn the_admitter_sheds_only_sheddable_requests_nobody_can_serve() {
        let flags = LatencyFlags { slo_ttft_ms: Some("-1:5,-2:50,0:5".parse().unwrap()), ..LatencyFlags::default() };
        let busy = Metrics { waiting: 0, running: 3, kv: 0.5 };
        let admits = |a: Metrics, b: Metrics, class: i32| {
            let mut l = LatencyProfile::new(&flags, 0, 2);
            l.admits(0.0, 10.0, class, [(0, a, 0.0), (1, b, 0.0)].into_iter())
        };
        assert!(!admits(busy, busy, -1), "10 ms predicted against 5: shed");
        assert!(admits(busy, Metrics { running: 0, ..busy }, -1), "an idle endpoint");
        assert!(admits(busy, Metrics { kv: 0.01, ..busy }, -1), "a cold endpoint");
        assert!(admits(busy, busy, -2), "10 ms meets 50");
        assert!(admits(busy, busy, 0), "priority 0 is not sheddable");
        assert!(admits(busy, busy, -3), "no header: not sheddable");
    }
}
