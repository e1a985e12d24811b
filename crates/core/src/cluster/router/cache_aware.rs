//! `cache-aware`: sglang model gateway's cache-aware policy
//! (`sgl-model-gateway/src/policies/cache_aware.rs`, `CacheAwarePolicy::select_worker`;
//! defaults from the gateway CLI, `src/main.rs`: `--cache-threshold 0.3`,
//! `--balance-abs-threshold 64`, `--balance-rel-threshold 1.5`, `--eviction-interval 120`,
//! `--max-tree-size 67108864`). Per request:
//!
//! 1. min and max of the workers' in-flight counts (the router's own `Worker::load`, +1 at
//!    dispatch, −1 when the response completes); imbalanced iff `max − min >
//!    balance_abs_threshold` and `max > min × balance_rel_threshold` (in f32, as upstream);
//! 2. imbalanced → the least-loaded worker (lowest index among equals), the text still inserted
//!    under it; no match is made;
//! 3. balanced → prefix match in the shared approximate tree ([`super::approx_tree`]); match
//!    rate = matched / input characters; above `cache_threshold` → the matched node's tenant,
//!    else the least-loaded worker (current gateway) or the worker with the fewest cached
//!    characters (`--cache-aware-fallback smallest-tree`, the older `sgl-router/src/router.rs`);
//!    then the text is inserted under the chosen worker.
//!
//! Eviction runs every `eviction_interval_secs` of simulated time from the start (the gateway's
//! background thread), before the first request that arrives at or after each tick: every
//! tenant is trimmed to `max_tree_size` characters. The predicted hit of a decision is the
//! matched prefix when the chosen worker is the matched node's tenant, else 0 (the router
//! knows nothing about the others).

use super::approx_tree::ApproxTree;
use super::{
    least_loaded_available, load_range, Arrival, Basis, CacheAwareFallback, Decision, InstanceView, Router,
    RouterParams,
};
use crate::cache::ReqId;

/// sglang's cache-aware router.
pub struct CacheAware {
    p: RouterParams,
    tree: ApproxTree,
    load: Vec<u32>,
    next_eviction: f64,
}

impl CacheAware {
    /// The policy for `n` instances.
    pub fn new(p: RouterParams, n: usize) -> Self {
        CacheAware {
            p,
            tree: ApproxTree::new(n, p.chars_per_token),
            load: vec![0; n],
            next_eviction: if p.eviction_interval_secs > 0.0 { p.eviction_interval_secs } else { f64::INFINITY },
        }
    }

    /// The shared tree (for tests and reports).
    pub fn tree(&self) -> &ApproxTree {
        &self.tree
    }

    /// In-flight requests per worker, as the router counts them.
    pub fn load(&self) -> &[u32] {
        &self.load
    }

    /// Runs the eviction whose tick is due at `now`.
    fn tick(&mut self, now: f64) {
        if now >= self.next_eviction {
            self.tree.evict(self.p.max_tree_size);
            let every = self.p.eviction_interval_secs;
            self.next_eviction = ((now / every).floor() + 1.0) * every;
        }
    }
}

impl Router for CacheAware {
    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        self.tick(a.now);
        // Over the workers the gateway holds: a failed one left the list and the tree.
        let (min, max) = load_range(&self.load, view);
        let imbalanced = max.saturating_sub(min) > self.p.balance_abs_threshold
            && (max as f32) > (min as f32) * self.p.balance_rel_threshold as f32;
        let (instance, basis, predicted) = if imbalanced {
            (least_loaded_available(&self.load, view), Basis::Load, 0)
        } else {
            let m = self.tree.prefix_match(a.store, a.seq, a.prompt_len);
            let c = self.p.chars_per_token.max(1) as f32;
            let rate = match a.prompt_len {
                0 => 0.0,
                len => (m.tokens as f32 * c) / (len as f32 * c),
            };
            match m.tenant {
                Some(t) if rate > self.p.cache_threshold as f32 => (t, Basis::Prefix, m.tokens as u64),
                _ => {
                    let i = match self.p.cache_aware_fallback {
                        CacheAwareFallback::LeastLoad => least_loaded_available(&self.load, view),
                        CacheAwareFallback::SmallestTree => self.tree.smallest_tenant(|i| view.available(i)),
                    };
                    (i, Basis::Load, if m.tenant == Some(i) { m.tokens as u64 } else { 0 })
                }
            }
        };
        self.tree.insert(a.store, a.seq, a.prompt_len, instance);
        self.load[instance] += 1;
        Decision { instance, basis, predicted_hit_tokens: predicted }
    }

    fn finished(&mut self, _id: ReqId, instance: usize, _now: f64) {
        self.load[instance] -= 1;
    }
    fn in_flight(&self) -> Option<Vec<u32>> {
        Some(self.load.clone())
    }
    /// `remove_worker`: the worker's entries leave the tree (`Tree::remove_tenant`).
    fn instance_down(&mut self, instance: usize, _now: f64) {
        self.tree.remove_tenant(instance);
    }
    /// `add_worker`: registered again as at start-up (an empty insert).
    fn instance_up(&mut self, instance: usize, _now: f64) {
        self.tree.add_tenant(instance);
    }
}
