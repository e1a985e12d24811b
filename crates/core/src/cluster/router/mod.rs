//! The router seam: a policy that picks, once per request and at its arrival, the instance
//! that serves it, from the router's own approximate state (its in-flight counts, its own
//! prefix index) — never the engines' true caches, except for the idealised `kv-aware` policy,
//! which reads them through [`InstanceView`] as NVIDIA Dynamo's KV router reads its workers'
//! KV events. Policies are a closed enum at the edge ([`RouterKind`]) and a small trait inside
//! ([`Router`]). Character-based routers (sglang's gateway, production-stack, AIBrix) see a
//! request's token ids rendered as text at [`RouterParams::chars_per_token`] characters per
//! token (ENGINE_SPEC §5; the trace has ids, not text): a token is one symbol `chars_per_token`
//! characters wide, each of its characters naming the token (two different tokens differ in
//! every character), so a character-level match always stops at a token boundary and a
//! 128-character chunk covers the tokens its characters fall in ([`text`]).
//!
//! One file per policy: [`cache_aware`] (sglang's gateway, over the approximate tree of
//! [`approx_tree`]), [`prefix_hash`] (vLLM production-stack), [`aibrix`] (AIBrix),
//! [`kv_aware`] (NVIDIA Dynamo's KV router), [`epp`] (llm-d's endpoint picker; with its
//! latency predictor [`epp_latency`], over [`slo_pick`], [`latency_model`] and
//! [`bayes_ridge`]). Upstream files, versions and what cachesim does
//! differently are in `docs/engines/routers.md`.

pub mod active;
pub mod aibrix;
pub mod approx_tree;
pub mod bayes_ridge;
pub mod cache_aware;
pub mod epp;
pub mod epp_latency;
pub mod kv_aware;
pub mod kv_index;
pub mod latency_model;
pub mod prefix_hash;
pub mod slo_pick;
#[cfg(test)]
mod tests;
pub mod text;

use crate::cache::ReqId;
use crate::workload::{SeqId, TokenStore};
use serde::Serialize;

/// Router policies (`--router`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    /// In turn, instance 0, 1, …, N−1, 0, …
    RoundRobin,
    /// Uniformly at random (seeded).
    Random,
    /// Fewest in-flight requests by the router's own count (ties: lowest index).
    LeastLoad,
    /// sglang model gateway's `cache_aware` policy: approximate radix tree over request text,
    /// imbalance rule, cache threshold.
    CacheAware,
    /// vLLM production-stack's `prefixaware` routing: a trie of 128-character chunk hashes,
    /// random choice among the endpoints holding the longest prefix.
    PrefixHash,
    /// AIBrix gateway's `prefix-cache` policy: chained 128-character block hashes in an LRU
    /// index, imbalance and standard-deviation rules.
    Aibrix,
    /// NVIDIA Dynamo's KV router on the instances' true caches: the lowest
    /// `overlap weight × prefill blocks + decode blocks`.
    KvAware,
    /// llm-d's endpoint picker: weighted queue, KV-utilization, approximate-prefix, precise
    /// prefix (KV events) and LoRA affinity scorers over metrics scraped every 50 ms, the
    /// highest total (ties at random).
    #[cfg_attr(feature = "clap", value(name = "llm-d"))]
    #[serde(rename = "llm-d")]
    LlmD,
    /// llm-d's endpoint picker with its latency predictor: TTFT (and TPOT) predicted per
    /// endpoint by a model retrained on the fleet's own requests, prefix-affinity and
    /// SLO-headroom filters, the least headroom that still meets --slo-ttft-ms (weighted random).
    #[cfg_attr(feature = "clap", value(name = "llm-d-predicted-latency"))]
    #[serde(rename = "llm-d-predicted-latency")]
    LlmDPredictedLatency,
}

impl RouterKind {
    /// Every policy, in `--router`'s order.
    pub const ALL: [RouterKind; 9] = [
        RouterKind::RoundRobin,
        RouterKind::Random,
        RouterKind::LeastLoad,
        RouterKind::CacheAware,
        RouterKind::PrefixHash,
        RouterKind::Aibrix,
        RouterKind::KvAware,
        RouterKind::LlmD,
        RouterKind::LlmDPredictedLatency,
    ];

    /// The policy's name, as `--router` takes it and reports print it.
    pub fn name(self) -> &'static str {
        match self {
            RouterKind::RoundRobin => "round-robin",
            RouterKind::Random => "random",
            RouterKind::LeastLoad => "least-load",
            RouterKind::CacheAware => "cache-aware",
            RouterKind::PrefixHash => "prefix-hash",
            RouterKind::Aibrix => "aibrix",
            RouterKind::KvAware => "kv-aware",
            RouterKind::LlmD => "llm-d",
            RouterKind::LlmDPredictedLatency => "llm-d-predicted-latency",
        }
    }
}

/// What sglang's cache-aware policy does with a request that matches no worker well
/// (`--cache-aware-fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum CacheAwareFallback {
    /// The least-loaded worker (`sgl-model-gateway/src/policies/cache_aware.rs`, current).
    LeastLoad,
    /// The worker with the smallest tree, fewest cached characters (`sgl-router/src/router.rs`
    /// before mid-2025, `Tree::get_smallest_tenant`).
    SmallestTree,
}

/// Which release of llm-d's endpoint picker the approximate prefix producers follow
/// (`--epp-release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EppRelease {
    /// llm-d-inference-scheduler 520af478 (May 2026): blocks of the engines' size (auto-tuned)
    /// or 16 tokens.
    #[default]
    #[cfg_attr(feature = "clap", value(name = "520af478"))]
    #[serde(rename = "520af478")]
    May2026,
    /// llm-d-router from 44582a8f4 (2026-06-02): the block size floored at 64 tokens
    /// (`approximateprefix/plugin.go` `GetBlockSize`, `minBlockSizeTokens`), auto-tuned or not.
    #[cfg_attr(feature = "clap", value(name = "44582a8f4"))]
    #[serde(rename = "44582a8f4")]
    June2026,
}

impl EppRelease {
    /// The producers' block size for a configured or auto-tuned `tokens`.
    pub fn block_tokens(self, tokens: u32) -> u32 {
        match self {
            EppRelease::May2026 => tokens.max(1),
            EppRelease::June2026 => tokens.max(64),
        }
    }

    /// Whether this is the default release.
    pub fn is_default(&self) -> bool {
        *self == EppRelease::default()
    }
}

/// Router knobs (named as the real routers' flags; each field says its flag and default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RouterParams {
    /// Characters a token stands for when a character-based router renders token ids as text
    /// (`--router-chars-per-token`, default 4, about what BPE tokenizers average on English).
    pub chars_per_token: u32,
    /// Seed of the random choices (`--seed`).
    pub seed: u64,
    /// cache-aware: route to the best-matching worker when matched/input characters exceed
    /// this (`--cache-threshold`, default 0.3).
    pub cache_threshold: f64,
    /// cache-aware: imbalanced when max − min in-flight exceeds this … (`--balance-abs-threshold`,
    /// default 64).
    pub balance_abs_threshold: u32,
    /// … and max > min × this (`--balance-rel-threshold`, default 1.5).
    pub balance_rel_threshold: f64,
    /// cache-aware: seconds of simulated time between tree evictions (`--eviction-interval-secs`,
    /// sglang's `--eviction-interval`, default 120; 0 = never).
    pub eviction_interval_secs: f64,
    /// cache-aware: characters each worker may keep in the tree after an eviction
    /// (`--max-tree-size`, default 2^26 = 67,108,864).
    pub max_tree_size: u64,
    /// cache-aware: where low-match requests go (`--cache-aware-fallback`, default least-load).
    pub cache_aware_fallback: CacheAwareFallback,
    /// prefix-hash: characters per trie chunk (`--prefix-chunk-chars`, production-stack's
    /// `HashTrie(chunk_size=128)`).
    pub prefix_chunk_chars: u32,
    /// prefix-hash: matched characters below which the request goes to the least-loaded
    /// endpoint instead (`--prefix-min-match-length`, default 0).
    pub prefix_min_match_length: u64,
    /// aibrix: characters per hashed block (`--aibrix-block-size`,
    /// `AIBRIX_PREFIX_CACHE_BLOCK_SIZE`, default 128 with the character tokenizer).
    pub aibrix_block_chars: u32,
    /// aibrix: blocks the LRU index keeps (`--aibrix-block-number`,
    /// `AIBRIX_PREFIX_CACHE_BLOCK_NUMBER`, default 200,000).
    pub aibrix_block_number: u32,
    /// aibrix: seconds an unused block stays in the index (`--aibrix-eviction-secs`,
    /// `AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS` = 20 min, default 1200).
    pub aibrix_eviction_secs: f64,
    /// aibrix: imbalanced when max − min running exceeds this (`--aibrix-imbalance-abs-count`,
    /// `AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT`, code default 8).
    pub aibrix_imbalance_abs_count: u32,
    /// aibrix: a matched pod qualifies when its running ≤ mean + this × σ
    /// (`--aibrix-std-dev-factor`, `AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR`, code
    /// default 1).
    pub aibrix_std_dev_factor: f64,
    /// kv-aware: weight of the prefill blocks in the cost (`--overlap-score-weight`, Dynamo's
    /// `KvRouterConfig::overlap_score_weight`, default 1.0).
    pub overlap_score_weight: f64,
    /// kv-aware: KV block size in tokens of the instances (`--block-size` of the engines; the
    /// driver sets it), default 16.
    pub kv_block_size: u32,
    /// llm-d: the scorers' weights (`--queue-scorer-weight`, `--kv-cache-utilization-scorer-weight`,
    /// `--prefix-cache-scorer-weight`, `--lora-affinity-scorer-weight`; the EPP's default profile).
    /// Echoed when set otherwise.
    #[serde(skip_serializing_if = "epp::EppWeights::is_default")]
    pub epp_weights: epp::EppWeights,
    /// llm-d: `maxPrefixTokensToMatch` of the approximate prefix producers
    /// (`--max-prefix-tokens-to-match`); `None`: `maxPrefixBlocksToMatch`'s 256 blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prefix_tokens_to_match: Option<u32>,
    /// llm-d: `lruCapacityPerServer` of the CPU-tier producer, in 16-token blocks
    /// (`--cpu-lru-capacity-per-server`, default 31,250). Echoed when set otherwise.
    #[serde(skip_serializing_if = "epp::is_default_lru_capacity")]
    pub cpu_lru_capacity_per_server: u32,
    /// llm-d: the endpoint picker's release (`--epp-release`, default 520af478). Echoed when set
    /// otherwise.
    #[serde(skip_serializing_if = "EppRelease::is_default")]
    pub epp_release: EppRelease,
    /// llm-d: milliseconds between two scrapes of an endpoint's metrics
    /// (`--refresh-metrics-interval-ms`, the EPP's `--refresh-metrics-interval`, default 50 ms).
    /// Echoed when set otherwise.
    #[serde(skip_serializing_if = "epp::is_default_interval")]
    pub refresh_metrics_interval_ms: f64,
    /// kv-aware: milliseconds after a step ends that its KV events reach the router's indexer
    /// (`--kv-event-delay-ms`); `None` (the default): the router reads the instances' caches
    /// as they are, an indexer without lag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_event_delay_ms: Option<f64>,
    /// llm-d-predicted-latency: the requests' SLO headers and the predictor's settings
    /// (echoed when any is given).
    #[serde(skip_serializing_if = "epp_latency::LatencyFlags::is_unset")]
    pub predicted_latency: epp_latency::LatencyFlags,
}

impl Default for RouterParams {
    fn default() -> Self {
        RouterParams {
            chars_per_token: 4,
            seed: 0,
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval_secs: 120.0,
            max_tree_size: 1 << 26,
            cache_aware_fallback: CacheAwareFallback::LeastLoad,
            prefix_chunk_chars: 128,
            prefix_min_match_length: 0,
            aibrix_block_chars: 128,
            aibrix_block_number: 200_000,
            aibrix_eviction_secs: 1200.0,
            aibrix_imbalance_abs_count: 8,
            aibrix_std_dev_factor: 1.0,
            overlap_score_weight: 1.0,
            kv_block_size: 16,
            epp_weights: epp::EppWeights::default(),
            max_prefix_tokens_to_match: None,
            cpu_lru_capacity_per_server: epp::DEFAULT_LRU_BLOCKS,
            epp_release: EppRelease::May2026,
            refresh_metrics_interval_ms: epp::DEFAULT_REFRESH_MS,
            kv_event_delay_ms: None,
            predicted_latency: epp_latency::LatencyFlags::default(),
        }
    }
}

/// A request reaching the router.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    pub id: ReqId,
    /// Its prompt: `store` sequence `seq`, tokens `..prompt_len`.
    pub seq: SeqId,
    pub prompt_len: usize,
    pub store: &'a TokenStore,
    /// Seconds.
    pub now: f64,
    /// The LoRA adapter it names (0: the base model).
    pub lora: u16,
    /// Its priority as sent (`None`: without one; its class is then 0), which
    /// `llm-d-predicted-latency` reads to pick the request's SLO headers.
    pub priority: Option<i32>,
}

impl<'a> Arrival<'a> {
    /// Request `id` of the workload, `q`, whose tokens `store` holds, reaching the router at `now`.
    pub fn of(id: ReqId, q: &crate::workload::Request, store: &'a TokenStore, now: f64) -> Self {
        Arrival { id, seq: q.seq, prompt_len: q.prompt_len as usize, store, now, lora: q.lora, priority: q.priority }
    }
}

/// What the instances truly hold, for the policies that may read it (`kv-aware`).
pub trait InstanceView {
    fn num_instances(&self) -> usize;
    /// Prompt tokens instance `i` would reuse for `seq[..known]` now (`PrefixCache::peek`).
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize;
    /// KV tokens held by instance `i`'s running requests.
    fn held_tokens(&self, i: usize) -> u64;
    /// Requests in instance `i` (waiting + running).
    fn queued(&self, i: usize) -> u32;
    /// Blocks instance `i`'s prefix cache holds (Dynamo's indexer "tree size", its tie-breaker);
    /// 0 when the view does not know.
    fn cached_blocks(&self, _i: usize) -> u64 {
        0
    }
    /// Whether instance `i` takes requests: one that failed (until it has restarted) or drains
    /// before a restart is out of every policy's choice, as the gateways drop a worker that
    /// fails its health check or unregisters (the driver never routes while none takes any).
    fn available(&self, _i: usize) -> bool {
        true
    }
    /// Requests waiting in instance `i` (vLLM's `vllm:num_requests_waiting`); 0 when the view
    /// does not know.
    fn waiting(&self, _i: usize) -> u32 {
        0
    }
    /// Share of instance `i`'s KV pool its requests hold (vLLM's `vllm:kv_cache_usage_perc`:
    /// blocks not free over all blocks; cached blocks no request holds are free).
    fn kv_usage(&self, _i: usize) -> f64 {
        0.0
    }
    /// What instance `i`'s `vllm:lora_requests_info` says: its running and waiting requests'
    /// adapters into `running` and `waiting`; returns its `max_lora` (0: not serving LoRA).
    fn lora_adapters(&self, _i: usize, _running: &mut Vec<u16>, _waiting: &mut Vec<u16>) -> u32 {
        0
    }
    /// Blocks of instance `i`'s KV pool (vLLM's `num_gpu_blocks`); 0 when the view does not know.
    fn pool_blocks(&self, _i: usize) -> u64 {
        0
    }
    /// The content keys of the full blocks of `seq[..known]` a prefix hit can reuse (the last
    /// token is always computed), as the paged caches key blocks and their KV events name them,
    /// into `out` (cleared); left empty when the view does not know.
    fn block_keys(&self, _seq: SeqId, _known: usize, out: &mut Vec<u32>) {
        out.clear();
    }
}

/// Why the router chose what it chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// A prefix match decided.
    Prefix,
    /// Load (or turn, or chance) decided.
    Load,
}

/// One routing decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub instance: usize,
    pub basis: Basis,
    /// Prompt tokens the router expects the instance to have cached (0 when it has no index).
    pub predicted_hit_tokens: u64,
}

/// A routing policy.
pub trait Router: Send {
    /// Picks the instance for `a`.
    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision;
    /// Whether the router takes `a` at all (asked before [`route`](Self::route)); `false`: it
    /// rejects the request, which fails. Only `llm-d-predicted-latency` rejects (its
    /// `latency-slo-admitter`).
    fn admit(&mut self, _a: &Arrival<'_>, _view: &dyn InstanceView) -> bool {
        true
    }
    /// Request `id`, sent to `instance`, completed (or failed) at `now`.
    fn finished(&mut self, _id: ReqId, _instance: usize, _now: f64) {}
    /// Request `id`, sent to `instance`, produced its first token at `now` (its prefill is
    /// done). `kv-aware` uses it (Dynamo's `mark_prefill_completed`; without the call the
    /// request counts as prefilling until `finished`), and `llm-d-predicted-latency` (the time
    /// to first token it learns from).
    fn prefill_done(&mut self, _id: ReqId, _instance: usize, _now: f64) {}
    /// Request `id`'s response from `instance` ended at `now` after `tokens` output tokens (it
    /// completed; [`finished`](Self::finished) follows). Only `llm-d-predicted-latency` uses
    /// it (its end-of-stream training samples).
    fn response_ended(&mut self, _id: ReqId, _instance: usize, _tokens: u32, _now: f64, _view: &dyn InstanceView) {}
    /// Requests in flight per instance as the router counts them (`None`: it keeps no count).
    fn in_flight(&self) -> Option<Vec<u32>> {
        None
    }
    /// Instance `instance` leaves the router's worker list at `now` (it failed, or drains before
    /// a restart) until [`instance_up`](Self::instance_up); the requests it holds are reported
    /// `finished` as they end, move or are lost. By default it leaves the router's KV-event
    /// index with everything it held (Dynamo removes a worker's blocks when it unregisters); a
    /// restarted one starts empty.
    fn instance_down(&mut self, instance: usize, _now: f64) {
        if let Some(e) = self.kv_index() {
            e.forget(instance);
        }
    }
    /// Instance `instance` serves again at `now`, with an empty cache.
    fn instance_up(&mut self, _instance: usize, _now: f64) {}
    /// The router's index of the instances' KV events, which the driver feeds after each step
    /// ([`kv_index::KvEvents::receive`]); `None` (the default): it reads no events, and the
    /// driver has the caches log none.
    fn kv_index(&mut self) -> Option<&mut kv_index::KvEvents> {
        None
    }
}

/// Builds the policy `kind` for `n` instances.
pub fn build(kind: RouterKind, params: RouterParams, n: usize) -> Box<dyn Router> {
    debug_assert!(n > 0);
    match kind {
        RouterKind::RoundRobin => Box::new(RoundRobin { n, next: 0 }),
        RouterKind::Random => {
            Box::new(RandomChoice { n, rng: <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(params.seed) })
        }
        RouterKind::LeastLoad => Box::new(LeastLoad { load: vec![0; n] }),
        RouterKind::CacheAware => Box::new(cache_aware::CacheAware::new(params, n)),
        RouterKind::PrefixHash => Box::new(prefix_hash::PrefixHash::new(params, n)),
        RouterKind::Aibrix => Box::new(aibrix::Aibrix::new(params, n)),
        RouterKind::KvAware => Box::new(kv_aware::KvAware::new(params, n)),
        RouterKind::LlmD => Box::new(epp::Epp::new(params, n)),
        RouterKind::LlmDPredictedLatency => Box::new(epp::Epp::with_latency(params, n)),
    }
}

struct RoundRobin {
    n: usize,
    next: usize,
}

impl Router for RoundRobin {
    fn route(&mut self, _a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        // The turn passes over a worker that is down (the gateway's list holds the live ones).
        let mut instance = self.next;
        for _ in 0..self.n {
            if view.available(instance) {
                break;
            }
            instance = (instance + 1) % self.n;
        }
        self.next = (instance + 1) % self.n;
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
}

struct RandomChoice {
    n: usize,
    rng: rand::rngs::StdRng,
}

impl Router for RandomChoice {
    fn route(&mut self, _a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        let up = (0..self.n).filter(|&i| view.available(i)).count().max(1);
        let k = rand::Rng::random_range(&mut self.rng, 0..up);
        let instance = if up == self.n { k } else { (0..self.n).filter(|&i| view.available(i)).nth(k).unwrap_or(0) };
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
}

/// In-flight counts kept by the router itself (sglang's `Worker::load`: +1 on dispatch, −1 when
/// the response completes).
struct LeastLoad {
    load: Vec<u32>,
}

impl Router for LeastLoad {
    fn route(&mut self, _a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        let instance = least_loaded_available(&self.load, view);
        self.load[instance] += 1;
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
    fn finished(&mut self, _id: ReqId, instance: usize, _now: f64) {
        self.load[instance] -= 1;
    }
    fn in_flight(&self) -> Option<Vec<u32>> {
        Some(self.load.clone())
    }
}

/// The index of the smallest load (ties: lowest index).
pub fn least_loaded(load: &[u32]) -> usize {
    let mut best = 0;
    for (i, &l) in load.iter().enumerate() {
        if l < load[best] {
            best = i;
        }
    }
    best
}

/// The index of the smallest load among the instances `view` has serving (ties: lowest index;
/// every instance when none is).
pub fn least_loaded_available(load: &[u32], view: &dyn InstanceView) -> usize {
    let mut best: Option<usize> = None;
    for (i, &l) in load.iter().enumerate() {
        if view.available(i) && best.is_none_or(|b| l < load[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or_else(|| least_loaded(load))
}

/// The smallest and largest load among the instances `view` has serving (0, 0 when none is).
pub fn load_range(load: &[u32], view: &dyn InstanceView) -> (u32, u32) {
    let mut up = load.iter().enumerate().filter(|&(i, _)| view.available(i)).map(|(_, &l)| l);
    let first = up.next().unwrap_or(0);
    up.fold((first, first), |(lo, hi), l| (lo.min(l), hi.max(l)))
}

/// Puts `node` in an arena of tree nodes, in a slot freed earlier when there is one; returns its
/// index (the prefix trees of the routers recycle removed nodes this way).
fn alloc_node<N>(nodes: &mut Vec<N>, free: &mut Vec<u32>, node: N) -> u32 {
    match free.pop() {
        Some(i) => {
            nodes[i as usize] = node;
            i
        }
        None => {
            nodes.push(node);
            (nodes.len() - 1) as u32
        }
    }
}
