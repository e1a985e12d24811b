//! The router seam: a policy that picks, once per request and at its arrival, the instance
//! that serves it, from the router's own approximate state (its in-flight counts, its own
//! prefix index) — never the engines' true caches, except for the idealised `kv-aware` policy,
//! which reads them through [`InstanceView`] as NVIDIA Dynamo's KV router reads its workers'
//! KV events. Policies are a closed enum at the edge ([`RouterKind`]) and a small trait inside
//! ([`Router`]). Character-based routers (sglang's gateway, production-stack, AIBrix) see a
//! request's token ids rendered as text at [`RouterParams::chars_per_token`] characters per
//! token (ENGINE_SPEC §5; the trace has ids, not text).

use crate::cache::ReqId;
use crate::workload::{SeqId, TokenStore};
use serde::Serialize;

/// Router policies (`--router`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    /// In turn, instance 0, 1, …, N−1, 0, …
    RoundRobin,
    /// Uniformly at random (seeded).
    Random,
    /// Fewest in-flight requests by the router's own count (ties: lowest index).
    LeastLoad,
}

/// Router knobs (named as the real routers' flags).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RouterParams {
    /// Characters a token stands for when a character-based router renders token ids as text.
    pub chars_per_token: u32,
    /// Seed of the random choices.
    pub seed: u64,
}

impl Default for RouterParams {
    fn default() -> Self {
        RouterParams { chars_per_token: 4, seed: 0 }
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
    /// Request `id`, sent to `instance`, completed (or failed) at `now`.
    fn finished(&mut self, _id: ReqId, _instance: usize, _now: f64) {}
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
    }
}

struct RoundRobin {
    n: usize,
    next: usize,
}

impl Router for RoundRobin {
    fn route(&mut self, _a: &Arrival<'_>, _view: &dyn InstanceView) -> Decision {
        let instance = self.next;
        self.next = (self.next + 1) % self.n;
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
}

struct RandomChoice {
    n: usize,
    rng: rand::rngs::StdRng,
}

impl Router for RandomChoice {
    fn route(&mut self, _a: &Arrival<'_>, _view: &dyn InstanceView) -> Decision {
        let instance = rand::Rng::random_range(&mut self.rng, 0..self.n);
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
}

/// In-flight counts kept by the router itself (sglang's `Worker::load`: +1 on dispatch, −1 when
/// the response completes).
struct LeastLoad {
    load: Vec<u32>,
}

impl Router for LeastLoad {
    fn route(&mut self, _a: &Arrival<'_>, _view: &dyn InstanceView) -> Decision {
        let instance = least_loaded(&self.load);
        self.load[instance] += 1;
        Decision { instance, basis: Basis::Load, predicted_hit_tokens: 0 }
    }
    fn finished(&mut self, _id: ReqId, instance: usize, _now: f64) {
        self.load[instance] -= 1;
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
