//! `llm-d`: the endpoint picker (EPP) of llm-d's inference scheduler and the Gateway API
//! Inference Extension (read at llm-d/llm-d-inference-scheduler 520af478, May 2026, whose
//! `pkg/epp` is the extension's last EPP; paths below are under `pkg/epp/framework/plugins/`).
//! Each request's candidates are the endpoints up; every scorer gives each a score in [0, 1];
//! the total is the weighted sum (`scheduling/scheduler_profile.go` `runScorerPlugins`: no
//! division by the weights' sum); the max-score picker shuffles the candidates and takes the
//! highest total, ties at random (`scheduling/picker/maxscore`). The scorers, each with its
//! weight as a flag (the built-in default profile, `config/loader/defaults.go`: queue 2,
//! KV cache 2, prefix 3; LoRA affinity is in no default profile, weight 0):
//!
//! - **queue** (`scheduling/scorer/queuedepth`): `(max − q) / (max − min)` over the candidates'
//!   waiting queues, 1 for all when they are equal;
//! - **kv-cache utilization** (`scheduling/scorer/kvcacheutilization`): `1 − usage`, usage the
//!   share of the KV pool held by requests (vLLM's `kv_cache_usage_perc`);
//! - **prefix cache** (`scheduling/scorer/prefix` over `requestcontrol/dataproducer/
//!   approximateprefix`): the prompt text cut into blocks of `block_size` tokens × 4 characters
//!   (`averageCharactersPerToken`; the block size auto-tuned from the engine's), a trailing
//!   partial block included, at most 256 blocks, each hash chained on the previous; nothing when
//!   the text is shorter than one block. Per endpoint an LRU of the block hashes sent to it,
//!   as large as its pool in blocks (`num_gpu_blocks`), filled after each pick in block order
//!   and never refreshed by lookups. The walk stops at the first block no endpoint holds; an
//!   endpoint's score is the blocks it holds in that run over all the prompt's blocks;
//! - **precise prefix cache** (llm-d's `scheduling/scorer/preciseprefixcache`, scoring with
//!   llm-d-kv-cache's `LongestPrefixScorer`): the endpoint's KV events (vLLM's `BlockStored` /
//!   `BlockRemoved`) fill an index per endpoint; the score is the prompt's leading blocks the
//!   index holds over all its full blocks (the normalisation at 520af478; v0.8.0 normalised
//!   min-max). The events arrive `--kv-event-delay-ms` after their step ends (0 by default);
//! - **a second approximate prefix cache** (llm-d's tiered-prefix-cache guide,
//!   `guides/tiered-prefix-cache/cpu/router/tiered-prefix-cache-cpu.values.yaml`: a second
//!   `approx-prefix-cache-producer` with `autoTune: false` and its own `prefix-cache-scorer`):
//!   the same producer with the default 16-token blocks and an LRU of `lruCapacityPerServer`
//!   blocks per endpoint (`--cpu-lru-capacity-per-server`, default 31,250), which the guide
//!   sizes to the servers' CPU offloading tier; `--max-prefix-tokens-to-match` caps both
//!   producers' blocks (`maxPrefixTokensToMatch`; unset, 256 blocks);
//! - **no-hit LRU** (`scheduling/scorer/nohitlru`): for a cold request — no producer matched a
//!   block on any candidate — the endpoints that never took a cold request score
//!   `1 − k/(n − 1)` in candidate order (k = 0, 1, …), the others `1 − (never + p)/(n − 1)`
//!   (at least 0) with p their place among the endpoints that took one, least recently first;
//!   the endpoint picked for a cold request becomes the most recent (`PreRequest`). A request
//!   with a match scores 0.5 everywhere;
//! - **LoRA affinity** (`scheduling/scorer/loraaffinity`): 1 when the request's adapter is among
//!   the endpoint's running adapters, else 0.8 when running + waiting adapters are fewer than
//!   its `max_lora`, else 0.6 when the adapter waits there, else 0 (vLLM's
//!   `vllm:lora_requests_info`).
//!
//! **Staleness**: the queue, KV and LoRA figures are what the EPP last scraped: each endpoint's
//! metrics every `--refresh-metrics-interval-ms` (default 50 ms, `server/options.go`), and the
//! scorers never check their age. Here a snapshot is taken at the first request routed at or
//! after each scrape tick and kept until the next tick, so the requests of a burst all see the
//! figures their first one saw. The prefix index is the EPP's own record of where it sent
//! prompts, not the endpoints' caches: an endpoint that evicted a prefix still scores it.
//! Text = token ids rendered at `--router-chars-per-token` ([`super::text`]), not the JSON of
//! the chat messages the EPP hashes; the hashes are content fingerprints, not xxhash64.
//!
//! `llm-d-predicted-latency` ([`Epp::with_latency`]) keeps the scrapes and the approximate
//! prefix producer and replaces the weighted scorers and the max-score picker by the latency
//! predictor's profile ([`super::epp_latency`]).

use super::aibrix::BlockIndex;
use super::epp_latency::{LatencyProfile, Metrics};
use super::kv_index::KvEvents;
use super::text::{chunks, mix};
use super::{Arrival, Basis, Decision, InstanceView, Router, RouterParams};
use crate::cache::ReqId;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// `averageCharactersPerToken`: the EPP's characters per token when it sizes blocks.
const CHARS_PER_TOKEN: u32 = 4;
/// `maxPrefixBlocksToMatch`.
const MAX_BLOCKS: usize = 256;
/// The per-endpoint LRU size when the endpoint's pool is not known or the producer is not
/// auto-tuned (`defaultLRUCapacityPerServer`).
pub const DEFAULT_LRU_BLOCKS: u32 = 31_250;
/// Tokens per block of a producer that is not auto-tuned (`defaultBlockSizeTokens`).
const DEFAULT_BLOCK_TOKENS: u32 = 16;
/// Endpoints the no-hit LRU scorer tracks (`defaultLRUSize`).
const NO_HIT_LRU_SIZE: usize = 1024;

/// Scorer weights (a weight of 0 leaves the scorer out).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EppWeights {
    pub queue: f64,
    pub kv_cache: f64,
    pub prefix: f64,
    pub lora: f64,
    /// The precise prefix-cache scorer's (in no default profile: 0).
    pub precise: f64,
    /// The second approximate prefix-cache scorer's, over the CPU-tier producer (0: no such
    /// producer).
    pub cpu_prefix: f64,
    /// The no-hit LRU scorer's (in no default profile: 0).
    pub no_hit_lru: f64,
}

impl Default for EppWeights {
    /// The built-in default profile's.
    fn default() -> Self {
        EppWeights { queue: 2.0, kv_cache: 2.0, prefix: 3.0, lora: 0.0, precise: 0.0, cpu_prefix: 0.0, no_hit_lru: 0.0 }
    }
}

impl EppWeights {
    /// Whether these are the default profile's weights.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The flag of the first weight set otherwise than the default profile's.
    pub fn first_set(&self) -> Option<&'static str> {
        let d = Self::default();
        [
            (self.queue != d.queue, "--queue-scorer-weight"),
            (self.kv_cache != d.kv_cache, "--kv-cache-utilization-scorer-weight"),
            (self.prefix != d.prefix, "--prefix-cache-scorer-weight"),
            (self.lora != d.lora, "--lora-affinity-scorer-weight"),
            (self.precise != d.precise, "--precise-prefix-cache-scorer-weight"),
            (self.cpu_prefix != d.cpu_prefix, "--cpu-prefix-cache-scorer-weight"),
            (self.no_hit_lru != d.no_hit_lru, "--no-hit-lru-scorer-weight"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// The EPP's default scrape interval, ms.
pub const DEFAULT_REFRESH_MS: f64 = 50.0;

/// Whether `blocks` is the default `lruCapacityPerServer`.
pub fn is_default_lru_capacity(blocks: &u32) -> bool {
    *blocks == DEFAULT_LRU_BLOCKS
}

/// Whether `ms` is the default scrape interval.
pub fn is_default_interval(ms: &f64) -> bool {
    *ms == DEFAULT_REFRESH_MS
}

/// One endpoint's metrics as last scraped.
#[derive(Debug, Clone, Default)]
struct Scraped {
    waiting: u32,
    running: u32,
    kv_usage: f64,
    running_loras: Vec<u16>,
    waiting_loras: Vec<u16>,
    max_lora: u32,
}

impl Scraped {
    fn metrics(&self) -> Metrics {
        Metrics { waiting: self.waiting, running: self.running, kv: self.kv_usage }
    }
}

/// The latency profile's view of the endpoints up: each with its scraped metrics and its
/// prefix score (`matched` blocks of the prompt's `blocks`).
fn endpoints<'a>(
    scraped: &'a [Scraped],
    matched: &'a [u32],
    blocks: f64,
    view: &'a dyn InstanceView,
) -> impl Iterator<Item = (usize, Metrics, f64)> + 'a {
    (0..scraped.len())
        .filter(|&i| view.available(i))
        .map(move |i| (i, scraped[i].metrics(), matched[i] as f64 / blocks))
}

/// One approximate prefix producer (`requestcontrol/dataproducer/approximateprefix`): the
/// prompt's chained block hashes, and per endpoint an LRU of the hashes the EPP sent to it.
struct Producer {
    /// Tokens per hashed block.
    block_tokens: u32,
    /// Most blocks hashed (`maxPrefixTokensToMatch` / block, else `maxPrefixBlocksToMatch`).
    max_blocks: usize,
    /// Per-endpoint LRU size; `None`: the endpoint's pool in blocks (`autoTune`).
    capacity: Option<usize>,
    /// Per endpoint, the block hashes sent to it (created at its first pick).
    index: Vec<Option<BlockIndex>>,
    hashes: Vec<u64>,
    matched: Vec<u32>,
}

impl Producer {
    fn new(block_tokens: u32, max_tokens: Option<u32>, capacity: Option<usize>, n: usize) -> Self {
        let block_tokens = block_tokens.max(1);
        Producer {
            block_tokens,
            max_blocks: max_tokens.map_or(MAX_BLOCKS, |t| (t / block_tokens).max(1) as usize),
            capacity,
            index: (0..n).map(|_| None).collect(),
            hashes: Vec::new(),
            matched: vec![0; n],
        }
    }

    /// Hashes `a`'s prompt ([`Self::hashes`]; nothing when it is shorter than one block) and
    /// counts per endpoint the blocks of the longest run some endpoint holds ([`Self::matched`]).
    fn observe(&mut self, a: &Arrival<'_>, chars_per_token: u32) {
        self.hashes.clear();
        let block_chars = self.block_tokens * CHARS_PER_TOKEN;
        let total_chars = a.prompt_len as u64 * chars_per_token as u64;
        if total_chars >= block_chars as u64 {
            let mut parent = 0u64;
            for c in chunks(a.store, a.seq, a.prompt_len, chars_per_token, block_chars, false).take(self.max_blocks) {
                parent = mix(parent.rotate_left(17) ^ c.key);
                self.hashes.push(parent);
            }
        }
        self.matched.fill(0);
        for &h in &self.hashes {
            let mut any = false;
            for (i, idx) in self.index.iter().enumerate() {
                if idx.as_ref().is_some_and(|x| x.peek(h).is_some()) {
                    self.matched[i] += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Endpoint `i`'s score: its matched blocks over the prompt's.
    fn score(&self, i: usize) -> f64 {
        self.matched[i] as f64 / self.hashes.len().max(1) as f64
    }

    /// PreRequest: the prompt's blocks recorded for the endpoint chosen, in block order.
    fn record(&mut self, instance: usize, view: &dyn InstanceView, now: f64) {
        if self.hashes.is_empty() {
            return;
        }
        let capacity = self.capacity;
        let idx = self.index[instance].get_or_insert_with(|| {
            let pool = view.pool_blocks(instance) as usize;
            let blocks = capacity.unwrap_or(if pool > 0 { pool } else { DEFAULT_LRU_BLOCKS as usize });
            BlockIndex::new(blocks, f64::INFINITY, 1)
        });
        for &h in &self.hashes {
            idx.add(h, 0, now);
        }
    }
}

/// The EPP for `n` endpoints.
pub struct Epp {
    weights: EppWeights,
    chars_per_token: u32,
    interval_s: f64,
    rng: rand::rngs::StdRng,
    scraped: Vec<Scraped>,
    next_scrape: Vec<f64>,
    /// The approximate prefix producer auto-tuned to the engines' pool and block size.
    prefix: Producer,
    /// The second producer, for the CPU tier (with `--cpu-prefix-cache-scorer-weight`).
    cpu: Option<Producer>,
    /// The no-hit LRU scorer's endpoints, least recently picked for a cold request first.
    cold_picks: Vec<usize>,
    /// Scratch: the no-hit LRU scores by endpoint, the candidates up.
    no_hit: Vec<f64>,
    up: Vec<usize>,
    order: Vec<(usize, f64)>,
    /// The precise scorer's: the endpoints' KV events as its indexer receives them.
    events: Option<KvEvents>,
    keys: Vec<u32>,
    /// The predicted-latency profile instead of the weighted scorers
    /// (`llm-d-predicted-latency`, [`super::epp_latency`]).
    latency: Option<Box<LatencyProfile>>,
}

impl Epp {
    /// The picker for `n` endpoints.
    pub fn new(p: RouterParams, n: usize) -> Self {
        Epp {
            weights: p.epp_weights,
            chars_per_token: p.chars_per_token.max(1),
            interval_s: p.refresh_metrics_interval_ms / 1e3,
            rng: rand::rngs::StdRng::seed_from_u64(p.seed),
            scraped: vec![Scraped::default(); n],
            next_scrape: vec![0.0; n],
            prefix: Producer::new(p.epp_release.block_tokens(p.kv_block_size), p.max_prefix_tokens_to_match, None, n),
            cpu: (p.epp_weights.cpu_prefix > 0.0).then(|| {
                let capacity = Some(p.cpu_lru_capacity_per_server.max(1) as usize);
                let block = p.epp_release.block_tokens(DEFAULT_BLOCK_TOKENS);
                Producer::new(block, p.max_prefix_tokens_to_match, capacity, n)
            }),
            cold_picks: Vec::new(),
            no_hit: vec![0.0; n],
            up: Vec::with_capacity(n),
            order: Vec::with_capacity(n),
            events: (p.epp_weights.precise > 0.0).then(|| KvEvents::new(p.kv_event_delay_ms.unwrap_or(0.0), n)),
            keys: Vec::new(),
            latency: None,
        }
    }

    /// The picker for `n` endpoints with the latency predictor's profile (the approximate
    /// prefix producer feeds it; the scorers' weights are not read).
    pub fn with_latency(p: RouterParams, n: usize) -> Self {
        Epp { latency: Some(Box::new(LatencyProfile::new(&p.predicted_latency, p.seed, n))), ..Epp::new(p, n) }
    }

    /// Takes endpoint `i`'s metrics when a scrape has happened since the last look.
    fn scrape(&mut self, i: usize, now: f64, view: &dyn InstanceView) {
        if now < self.next_scrape[i] {
            return;
        }
        let s = &mut self.scraped[i];
        s.waiting = view.waiting(i);
        s.running = view.queued(i).saturating_sub(s.waiting);
        s.kv_usage = view.kv_usage(i);
        s.max_lora = view.lora_adapters(i, &mut s.running_loras, &mut s.waiting_loras);
        self.next_scrape[i] =
            if self.interval_s > 0.0 { ((now / self.interval_s).floor() + 1.0) * self.interval_s } else { now };
    }

    /// What a routing decision reads first: the scrapes due, and the approximate prefix
    /// producers' match of `a`'s prompt (for their scorers, the no-hit LRU scorer or the
    /// latency profile).
    fn observe(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) {
        for i in 0..self.scraped.len() {
            if view.available(i) {
                self.scrape(i, a.now, view);
            }
        }
        if self.weights.prefix > 0.0 || self.latency.is_some() {
            self.prefix.observe(a, self.chars_per_token);
        } else {
            self.prefix.hashes.clear();
            self.prefix.matched.fill(0);
        }
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.observe(a, self.chars_per_token);
        }
    }

    /// The no-hit LRU scores of the candidates `up` for a request that is `cold`, into `out`
    /// (indexed by endpoint), `cold_picks` the endpoints given a cold request, least recent first.
    fn no_hit_scores(cold_picks: &[usize], cold: bool, up: &[usize], out: &mut [f64]) {
        if !cold {
            up.iter().for_each(|&i| out[i] = 0.5);
            return;
        }
        if up.len() == 1 {
            out[up[0]] = 1.0;
            return;
        }
        let n = (up.len() - 1) as f64;
        let never = up.iter().filter(|i| !cold_picks.contains(i)).count();
        let mut k = 0;
        for &i in up {
            out[i] = match cold_picks.iter().position(|&j| j == i) {
                Some(p) => (1.0 - (never + p) as f64 / n).max(0.0),
                None => {
                    k += 1;
                    1.0 - (k - 1) as f64 / n
                }
            };
        }
    }

    /// The LoRA affinity score of endpoint `i` for adapter `lora`.
    fn lora_score(&self, i: usize, lora: u16) -> f64 {
        let s = &self.scraped[i];
        if lora != 0 && s.running_loras.contains(&lora) {
            1.0
        } else if ((s.running_loras.len() + s.waiting_loras.len()) as u32) < s.max_lora {
            0.8
        } else if lora != 0 && s.waiting_loras.contains(&lora) {
            0.6
        } else {
            0.0
        }
    }
}

impl Router for Epp {
    fn admit(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> bool {
        let Some(l) = self.latency.as_ref() else { return true };
        let class = a.priority.unwrap_or(0);
        if !l.sheddable(class) {
            return true;
        }
        self.observe(a, view);
        let blocks = self.prefix.hashes.len().max(1) as f64;
        let up = endpoints(&self.scraped, &self.prefix.matched, blocks, view);
        self.latency.as_mut().is_none_or(|l| l.admits(a.now, a.prompt_len as f64, class, up))
    }

    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        let n = self.scraped.len();
        self.observe(a, view);
        let w = self.weights;
        self.up.clear();
        self.up.extend((0..n).filter(|&i| view.available(i)));
        let (min_q, max_q) =
            self.up.iter().map(|&i| self.scraped[i].waiting).fold((u32::MAX, 0), |(lo, hi), q| (lo.min(q), hi.max(q)));
        let blocks = self.prefix.hashes.len().max(1) as f64;
        if let Some(e) = self.events.as_mut() {
            view.block_keys(a.seq, a.prompt_len, &mut self.keys);
            e.catch_up(a.now);
        }
        // Cold: no producer matched a block on any candidate (the no-hit LRU scorer's test).
        let matched_any = |p: &Producer, up: &[usize]| up.iter().any(|&i| p.matched[i] > 0);
        let cold = w.no_hit_lru > 0.0
            && !matched_any(&self.prefix, &self.up)
            && !self.cpu.as_ref().is_some_and(|c| matched_any(c, &self.up));
        if w.no_hit_lru > 0.0 {
            Self::no_hit_scores(&self.cold_picks, cold, &self.up, &mut self.no_hit);
        }
        self.order.clear();
        let mut narrowed = false;
        if let Some(l) = self.latency.as_mut() {
            let class = a.priority.unwrap_or(0);
            let up = endpoints(&self.scraped, &self.prefix.matched, blocks, view);
            let (i, affinity) = l.pick(a.now, a.prompt_len as f64, class, up, &mut self.rng);
            l.dispatch(a.id, i, a.prompt_len as f64, class, a.now);
            self.order.push((i, 0.0));
            narrowed = affinity;
        }
        for &i in self.up.iter().filter(|_| self.latency.is_none()) {
            let s = &self.scraped[i];
            let queue = if max_q == min_q { 1.0 } else { (max_q - s.waiting) as f64 / (max_q - min_q) as f64 };
            let kv = (1.0 - s.kv_usage).clamp(0.0, 1.0);
            let prefix = self.prefix.score(i);
            let cpu = self.cpu.as_ref().map_or(0.0, |c| c.score(i));
            let no_hit = if w.no_hit_lru > 0.0 { self.no_hit[i] } else { 0.0 };
            let lora = if w.lora > 0.0 { self.lora_score(i, a.lora) } else { 0.0 };
            let precise = match &self.events {
                Some(e) if !self.keys.is_empty() => e.overlap(i, &self.keys) as f64 / self.keys.len() as f64,
                _ => 0.0,
            };
            let total = w.queue * queue
                + w.kv_cache * kv
                + w.prefix * prefix
                + w.cpu_prefix * cpu
                + w.no_hit_lru * no_hit
                + w.lora * lora
                + w.precise * precise.min(1.0);
            self.order.push((i, total));
        }
        // The max-score picker: shuffle, then a stable sort by total, highest first.
        if self.latency.is_none() {
            self.order.shuffle(&mut self.rng);
            self.order.sort_by(|x, y| y.1.total_cmp(&x.1));
        }
        let instance = self.order.first().map_or(0, |&(i, _)| i);
        let matched = self.prefix.matched[instance];
        // PreRequest: each producer records the prompt's blocks for the endpoint chosen; the
        // no-hit LRU scorer makes it the most recent after a cold request.
        self.prefix.record(instance, view, a.now);
        if let Some(c) = self.cpu.as_mut() {
            c.record(instance, view, a.now);
        }
        if cold {
            self.cold_picks.retain(|&j| j != instance);
            if self.cold_picks.len() == NO_HIT_LRU_SIZE {
                self.cold_picks.remove(0);
            }
            self.cold_picks.push(instance);
        }
        let block_tokens = self.prefix.block_tokens as u64;
        let block_chars = block_tokens * CHARS_PER_TOKEN as u64;
        let predicted = (matched as u64 * block_chars / self.chars_per_token as u64).min(a.prompt_len as u64);
        let held = self.events.as_ref().map_or(0, |e| e.overlap(instance, &self.keys));
        let basis = match &self.latency {
            Some(_) if narrowed => Basis::Prefix,
            Some(_) => Basis::Load,
            None if matched > 0 || held > 0 => Basis::Prefix,
            None => Basis::Load,
        };
        let predicted = predicted.max((held * block_tokens).min(a.prompt_len as u64));
        Decision { instance, basis, predicted_hit_tokens: predicted }
    }

    fn kv_index(&mut self) -> Option<&mut KvEvents> {
        self.events.as_mut()
    }

    fn prefill_done(&mut self, id: ReqId, _instance: usize, now: f64) {
        if let Some(l) = self.latency.as_mut() {
            l.first_token(id, now);
        }
    }

    fn response_ended(&mut self, id: ReqId, instance: usize, tokens: u32, now: f64, view: &dyn InstanceView) {
        if self.latency.is_some() {
            self.scrape(instance, now, view);
            let m = self.scraped[instance].metrics();
            if let Some(l) = self.latency.as_mut() {
                l.ended(id, tokens, now, m);
            }
        }
    }

    fn finished(&mut self, id: ReqId, _instance: usize, _now: f64) {
        if let Some(l) = self.latency.as_mut() {
            l.finished(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::TokenStore;

    /// Endpoints with set queues, KV usage and LoRA adapters.
    struct Fleet {
        waiting: Vec<u32>,
        usage: Vec<f64>,
        loras: Vec<(Vec<u16>, Vec<u16>, u32)>,
    }

    impl InstanceView for Fleet {
        fn num_instances(&self) -> usize {
            self.waiting.len()
        }
        fn cached_prefix(&self, _i: usize, _seq: u32, _known: usize) -> usize {
            0
        }
        fn held_tokens(&self, _i: usize) -> u64 {
            0
        }
        fn queued(&self, i: usize) -> u32 {
            self.waiting[i]
        }
        fn waiting(&self, i: usize) -> u32 {
            self.waiting[i]
        }
        fn kv_usage(&self, i: usize) -> f64 {
            self.usage[i]
        }
        fn lora_adapters(&self, i: usize, running: &mut Vec<u16>, waiting: &mut Vec<u16>) -> u32 {
            let (r, w, m) = &self.loras[i];
            running.clone_from(r);
            waiting.clone_from(w);
            *m
        }
        fn block_keys(&self, _seq: u32, _known: usize, out: &mut Vec<u32>) {
            out.clear();
            out.extend([7, 8, 9, 10]);
        }
    }

    /// Every scorer off.
    const ZERO: EppWeights = EppWeights {
        queue: 0.0,
        kv_cache: 0.0,
        prefix: 0.0,
        lora: 0.0,
        precise: 0.0,
        cpu_prefix: 0.0,
        no_hit_lru: 0.0,
    };

    fn params(w: EppWeights, interval_ms: f64) -> RouterParams {
        RouterParams { epp_weights: w, refresh_metrics_interval_ms: interval_ms, ..RouterParams::default() }
    }

    fn route(r: &mut Epp, store: &TokenStore, seq: u32, now: f64, lora: u16, v: &Fleet) -> usize {
        r.route(&Arrival { id: seq, seq, prompt_len: store.seq_len(seq), store, now, lora, priority: None }, v).instance
    }

    /// Three endpoints, waiting 0 / 4 / 8, KV 90 % / 10 % / 10 %: queue scores 1, 0.5, 0; KV
    /// 0.1, 0.9, 0.9. Queue 2 + KV 2: 2.2, 2.8, 1.8 — the middle one.
    #[test]
    fn the_weighted_sum_picks() {
        let store = TokenStore::from_seqs(&[vec![1u32, 2, 3]]);
        let v = Fleet { waiting: vec![0, 4, 8], usage: vec![0.9, 0.1, 0.1], loras: vec![Default::default(); 3] };
        let w = EppWeights { prefix: 0.0, ..EppWeights::default() };
        let mut r = Epp::new(params(w, 50.0), 3);
        assert_eq!(route(&mut r, &store, 0, 0.0, 0, &v), 1);
        // Queue alone: the empty queue.
        let mut q = Epp::new(params(EppWeights { queue: 1.0, ..ZERO }, 50.0), 3);
        assert_eq!(route(&mut q, &store, 0, 0.0, 0, &v), 0);
    }

    /// LoRA affinity: adapter 7 runs on endpoint 2 (1.0); endpoint 0 has a free slot (0.8);
    /// endpoint 1 is full with 7 waiting (0.6).
    #[test]
    fn lora_affinity_scores_active_then_capacity_then_waiting() {
        let store = TokenStore::from_seqs(&[vec![1u32, 2, 3]]);
        let loras = vec![(vec![1], vec![], 2), (vec![1], vec![7], 2), (vec![7, 3], vec![], 2)];
        let v = Fleet { waiting: vec![0; 3], usage: vec![0.0; 3], loras };
        let only = EppWeights { lora: 1.0, ..ZERO };
        let r = {
            let mut r = Epp::new(params(only, 50.0), 3);
            assert_eq!(route(&mut r, &store, 0, 0.0, 7, &v), 2);
            r
        };
        assert_eq!((r.lora_score(0, 7), r.lora_score(1, 7), r.lora_score(2, 7)), (0.8, 0.6, 1.0));
        assert_eq!(r.lora_score(1, 9), 0.0, "full, and the adapter nowhere there");
    }

    /// A burst inside one scrape interval sees one snapshot: every request goes where the
    /// first did; after the next tick the figures are new.
    #[test]
    fn metrics_are_as_stale_as_the_last_scrape() {
        let store = TokenStore::from_seqs(&[vec![1u32, 2, 3]]);
        let mut v = Fleet { waiting: vec![0, 5], usage: vec![0.0; 2], loras: vec![Default::default(); 2] };
        let queue = EppWeights { queue: 1.0, ..ZERO };
        let mut r = Epp::new(params(queue, 50.0), 2);
        assert_eq!(route(&mut r, &store, 0, 0.0, 0, &v), 0);
        v.waiting = vec![9, 0];
        assert_eq!(route(&mut r, &store, 0, 0.049, 0, &v), 0, "the scrape at 0 still stands");
        assert_eq!(route(&mut r, &store, 0, 0.050, 0, &v), 1, "the 50 ms scrape sees the new queues");
        let mut fresh = Epp::new(params(queue, 0.0), 2);
        v.waiting = vec![0, 5];
        assert_eq!(route(&mut fresh, &store, 0, 0.0, 0, &v), 0);
        v.waiting = vec![9, 0];
        assert_eq!(route(&mut fresh, &store, 0, 0.001, 0, &v), 1, "interval 0: always fresh");
    }

    /// The precise scorer reads the endpoints' KV events: endpoint 2's step stored blocks 7 and 8
    /// (ending at 1.0, 20 ms of lag); from 1.02 its score is 2 of the prompt's 4 blocks, and a
    /// block held without block 7 before it (endpoint 1) scores nothing.
    #[test]
    fn the_precise_scorer_reads_kv_events() {
        let store = TokenStore::from_seqs(&[vec![1u32, 2, 3]]);
        let v = Fleet { waiting: vec![0; 3], usage: vec![0.0; 3], loras: vec![Default::default(); 3] };
        let w = EppWeights { precise: 1.0, ..ZERO };
        let p = RouterParams { kv_event_delay_ms: Some(20.0), ..params(w, 50.0) };
        let mut r = Epp::new(p, 3);
        assert_eq!(r.kv_index().map(|e| e.delay_s()), Some(0.02));
        r.kv_index().unwrap().receive(2, 1.02, &[(7, true), (8, true)]);
        r.kv_index().unwrap().receive(1, 1.0, &[(8, true), (9, true)]);
        let d =
            r.route(&Arrival { id: 0, seq: 0, prompt_len: 3, store: &store, now: 1.01, lora: 0, priority: None }, &v);
        assert_eq!(d.basis, Basis::Load, "nothing of the prompt's first block is known yet");
        let d =
            r.route(&Arrival { id: 1, seq: 0, prompt_len: 3, store: &store, now: 1.02, lora: 0, priority: None }, &v);
        assert_eq!((d.instance, d.basis), (2, Basis::Prefix));
        r.instance_down(2, 2.0);
        let d =
            r.route(&Arrival { id: 2, seq: 0, prompt_len: 3, store: &store, now: 2.0, lora: 0, priority: None }, &v);
        assert_eq!(d.basis, Basis::Load, "a worker that went down left the index");
    }

    /// The prefix index is the EPP's record of its own picks: a prompt sent to endpoint 1 is
    /// sent there again; a prompt shorter than one block (16 tokens × 4 characters at 4
    /// characters a token) scores 0 everywhere.
    #[test]
    fn prefixes_follow_the_picks() {
        let long: Vec<u32> = (0..64).collect();
        let mut other = long.clone();
        other.extend(100..132);
        let store = TokenStore::from_seqs(&[long, other, vec![1, 2, 3]]);
        let v = Fleet { waiting: vec![0; 4], usage: vec![0.0; 4], loras: vec![Default::default(); 4] };
        let mut r = Epp::new(params(EppWeights::default(), 50.0), 4);
        let first = route(&mut r, &store, 0, 0.0, 0, &v);
        for k in 1..20 {
            assert_eq!(route(&mut r, &store, 1, k as f64, 0, &v), first, "the shared 4 blocks of 6 win");
        }
        r.prefix
            .observe(&Arrival { id: 2, seq: 2, prompt_len: 3, store: &store, now: 0.0, lora: 0, priority: None }, 4);
        assert!(r.prefix.hashes.is_empty());
    }

    /// The no-hit LRU scorer alone, four idle endpoints, prompts no producer matches (the prefix
    /// scorer off): the never-used endpoints in index order first, then the least recently
    /// picked; after two cold picks (0, then 1) the never-used 2 and 3 score 1 and 2/3, the used
    /// 0 and 1 score 1/3 and 0. A prompt the producer matches scores 0.5 everywhere and leaves
    /// the order alone.
    #[test]
    fn no_hit_lru_spreads_cold_requests_least_recent_first() {
        let store = TokenStore::from_seqs(&[(0..64).collect::<Vec<u32>>(), (100..164).collect()]);
        let v = Fleet { waiting: vec![0; 4], usage: vec![0.0; 4], loras: vec![Default::default(); 4] };
        let w = EppWeights { no_hit_lru: 1.0, ..ZERO };
        let mut r = Epp::new(params(w, 50.0), 4);
        let picks: Vec<usize> = (0..8).map(|k| route(&mut r, &store, 0, k as f64, 0, &v)).collect();
        assert_eq!(picks, [0, 1, 2, 3, 0, 1, 2, 3], "round the endpoints, least recent first");
        let mut scores = vec![0.0; 4];
        r.cold_picks = vec![0, 1];
        Epp::no_hit_scores(&r.cold_picks, true, &[0, 1, 2, 3], &mut scores);
        let want = [1.0 - 2.0 / 3.0, 0.0, 1.0, 1.0 - 1.0 / 3.0];
        assert_eq!(scores, want);
        Epp::no_hit_scores(&r.cold_picks, false, &[0, 1, 2, 3], &mut scores);
        assert_eq!(scores, [0.5; 4]);
        Epp::no_hit_scores(&r.cold_picks, true, &[2], &mut scores);
        assert_eq!(scores[2], 1.0, "a lone candidate");
        // With the prefix producer on, the second prompt of the same blocks is warm: it follows
        // the first and the cold order does not move.
        let w = EppWeights { prefix: 1.0, no_hit_lru: 1.0, ..ZERO };
        let mut r = Epp::new(params(w, 50.0), 4);
        let first = route(&mut r, &store, 0, 0.0, 0, &v);
        assert_eq!(route(&mut r, &store, 0, 1.0, 0, &v), first);
        assert_eq!(r.cold_picks, [first]);
        assert_ne!(route(&mut r, &store, 1, 2.0, 0, &v), first, "another cold prompt goes elsewhere");
    }

    /// The CPU-tier producer: an LRU of `--cpu-lru-capacity-per-server` blocks of 16 tokens per
    /// endpoint, scored beside the GPU producer. Two 64-token prompts (4 blocks each) with
    /// nothing in common: with a capacity of 4 blocks, recording the second on the same endpoint
    /// evicts the first, so it scores 0 there again; with room for both it keeps 1.
    #[test]
    fn the_cpu_producer_keeps_what_its_lru_holds() {
        let store = TokenStore::from_seqs(&[(0..64).collect::<Vec<u32>>(), (100..164).collect()]);
        let v = Fleet { waiting: vec![0; 2], usage: vec![0.0; 2], loras: vec![Default::default(); 2] };
        let w = EppWeights { cpu_prefix: 1.0, ..ZERO };
        let arrival =
            |seq: u32| Arrival { id: seq, seq, prompt_len: 64, store: &store, now: 0.0, lora: 0, priority: None };
        for (capacity, kept) in [(4, 0.0), (8, 1.0)] {
            let p = RouterParams { cpu_lru_capacity_per_server: capacity, ..params(w, 50.0) };
            let mut r = Epp::new(p, 2);
            let cpu = r.cpu.as_mut().unwrap();
            cpu.observe(&arrival(0), 4);
            assert_eq!(cpu.hashes.len(), 4);
            cpu.record(0, &v, 0.0);
            cpu.observe(&arrival(1), 4);
            cpu.record(0, &v, 0.0);
            cpu.observe(&arrival(0), 4);
            assert_eq!((cpu.score(0), cpu.score(1)), (kept, 0.0), "capacity {capacity}");
        }
    }

    /// llm-d-router 44582a8f4 floors the producers' blocks at 64 tokens: a 64-token prompt is
    /// one block there and four at 520af478; `--max-prefix-tokens-to-match` caps the blocks.
    #[test]
    fn the_release_sets_the_block_floor() {
        let store = TokenStore::from_seqs(&[(0..64).collect::<Vec<u32>>()]);
        let a = Arrival { id: 0, seq: 0, prompt_len: 64, store: &store, now: 0.0, lora: 0, priority: None };
        let blocks = |release, max: Option<u32>| {
            let p = RouterParams {
                epp_release: release,
                max_prefix_tokens_to_match: max,
                ..params(EppWeights::default(), 50.0)
            };
            let mut r = Epp::new(p, 1);
            r.prefix.observe(&a, 4);
            r.prefix.hashes.len()
        };
        use crate::cluster::router::EppRelease;
        assert_eq!(blocks(EppRelease::May2026, None), 4);
        assert_eq!(blocks(EppRelease::June2026, None), 1);
        assert_eq!(blocks(EppRelease::May2026, Some(32)), 2);
        assert_eq!(blocks(EppRelease::May2026, Some(8)), 1, "at least one block");
    }

    /// The predicted-latency profile learns which endpoint is slow. Endpoint 0 has 8 requests
    /// waiting, endpoint 1 none, and each request ends 100 ms + 100 ms × the queue after its
    /// dispatch. Before the first model (loaded at 30 s) every prediction is 10 ms, the scores
    /// are flat and the picks even; after it, without an SLO (all headroom negative, every
    /// endpoint idle), the predictions are 900 and 100 ms: scores 0.01 and 1.01, so the slow
    /// endpoint is picked about 1 time in 102. With an SLO of 500 ms it is in the negative tier,
    /// explored 1 time in 100.
    #[test]
    fn the_latency_profile_learns_the_slow_endpoint() {
        let store = TokenStore::from_seqs(&[vec![1u32, 2, 3]]);
        let v = Fleet { waiting: vec![8, 0], usage: vec![0.0; 2], loras: vec![Default::default(); 2] };
        for slo in [None, Some(500.0)] {
            let slo = slo.map(super::super::epp_latency::SloHeader::all);
            let flags = super::super::epp_latency::LatencyFlags { slo_ttft_ms: slo, ..Default::default() };
            let mut r = Epp::with_latency(RouterParams { predicted_latency: flags, ..RouterParams::default() }, 2);
            let mut picks = [[0u32; 2]; 2];
            for k in 0..6000u32 {
                let now = k as f64 * 0.01;
                let d =
                    r.route(&Arrival { id: k, seq: 0, prompt_len: 3, store: &store, now, lora: 0, priority: None }, &v);
                let end = now + 0.1 + 0.1 * v.waiting[d.instance] as f64;
                r.prefill_done(k, d.instance, end);
                r.response_ended(k, d.instance, 10, end, &v);
                r.finished(k, d.instance, end);
                picks[usize::from(now >= 31.0)][d.instance] += 1;
            }
            let [before, after] = picks;
            assert!(before[0].abs_diff(before[1]) < 300, "{slo:?} {before:?}");
            assert!(after[0] < 60 && after[1] > 2800, "{slo:?} {after:?}");
            let l = r.latency.as_ref().unwrap();
            assert_eq!(l.samples(), (1000, 0), "two buckets of 500; not streaming, no TPOT sample");
        }
    }
}
