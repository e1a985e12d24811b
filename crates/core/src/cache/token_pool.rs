//! LightLLM TokenAttention (ENGINE_SPEC §4.1, §4.4): a pool of single-token KV slots with a
//! token-level radix prompt cache. A request's KV enters the tree only when it finishes or is
//! paused (so concurrent requests with a common prefix do not share until the first one ends);
//! lookups use all known tokens but the last; eviction frees the deficit only, oldest
//! unreferenced leaves first.

use super::radix::{Rules, TreeCache};
use super::Policy;
use crate::workload::TokenStore;
use std::sync::Arc;

/// LightLLM's rules for [`TreeCache`].
pub const LIGHTLLM_RULES: Rules = Rules {
    policy: Policy::Token,
    page_size: 1,
    insert_after_prefill: false,
    evict_deficit_only: true,
    insert_on_preempt: true,
    walk_unchanged: false,
};

impl TreeCache {
    /// LightLLM's token pool of `capacity_tokens` slots (unlimited when `None`).
    pub fn lightllm(store: Arc<TokenStore>, capacity_tokens: Option<u64>) -> Self {
        Self::new(store, LIGHTLLM_RULES, capacity_tokens)
    }
}
