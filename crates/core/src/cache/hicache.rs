//! A host-memory tier under the radix cache, as SGLang 0.5.23's HiCache runs it
//! (`--enable-hierarchical-cache`; `mem_cache/unified_radix_cache.py` `UnifiedRadixCache`,
//! `mem_cache/unified_cache/unified_tree_core.py`, `managers/schedule_policy.py`
//! `PrefillAdder.add_one_req`; docs/engines/hicache.md names each rule's source):
//! - **writes** (`--hicache-write-policy`): an insert counts a pass through each node it walks
//!   past what the request inserted before (`_inc_hit_count_and_check`); a node counted once
//!   (`write_through`) or twice (`write_through_selective`) without a host copy is written with
//!   the run of unbacked ancestors above it, ancestors first (`_build_backup_kv_action`), host
//!   room made by evicting host-only leaves, a chain stopping at the first write that finds none;
//!   a written node is locked on the device until its copy is acknowledged. `write_back` writes
//!   only what device eviction takes, blocking until the copy ends;
//! - **device eviction**: the least recently used device leaf (no child on the device) gives up
//!   its device copy when it has a host one (it stays matchable on the host), else it is deleted
//!   (`write_through`) or written first (`write_back`);
//! - **loads**: a request whose match runs on past the device into host-only nodes loads that
//!   run back when it is at least 10 tokens (`load_back_threshold`), evicting device leaves for
//!   the shortfall; the prefill runs in the same step, each layer waiting for its copy, so the
//!   step lasts at least the load; the loaded run is locked until the next step acknowledges it;
//! - **copies**: the writes queued since the last step are submitted as one copy when the next
//!   step starts, after the writes before them; every step first acknowledges the writes done by
//!   then, in order (`check_hicache_events`: `flush_pending_backups`, `writing_check`,
//!   `loading_check`). A copy of `n` tokens takes `n × bytes per token per rank / link`.

use super::tree::{Found, NodeId, RadixTree};
use super::SlotPool;
use serde::Serialize;
use std::collections::VecDeque;

/// `load_back_threshold`: a host run shorter than this is recomputed, not loaded.
pub const LOAD_BACK_THRESHOLD: usize = 10;

/// `--hicache-write-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum WritePolicy {
    /// Write a node at its first insert (the default).
    #[default]
    #[cfg_attr(feature = "clap", value(name = "write_through"))]
    WriteThrough,
    /// Write a node the second time an insert passes it.
    #[cfg_attr(feature = "clap", value(name = "write_through_selective"))]
    WriteThroughSelective,
    /// Write only what device eviction takes.
    #[cfg_attr(feature = "clap", value(name = "write_back"))]
    WriteBack,
}

impl WritePolicy {
    /// The name SGLang's flag takes.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteThrough => "write_through",
            WritePolicy::WriteThroughSelective => "write_through_selective",
            WritePolicy::WriteBack => "write_back",
        }
    }

    /// Inserts that must count a node before it is written (`write_through_threshold`);
    /// `None`: inserts write nothing.
    fn threshold(self) -> Option<u32> {
        match self {
            WritePolicy::WriteThrough => Some(1),
            WritePolicy::WriteThroughSelective => Some(2),
            WritePolicy::WriteBack => None,
        }
    }
}

/// The host tier of one instance, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostTierConfig {
    pub policy: WritePolicy,
    /// Tokens the host pool holds.
    pub host_tokens: u64,
    /// One token's KV on one rank, bytes.
    pub token_bytes_per_rank: u64,
    /// Each direction of one rank's host link, bytes per second.
    pub link_bytes_per_s: f64,
}

impl HostTierConfig {
    /// Seconds to copy `tokens` tokens one way.
    pub fn copy_s(&self, tokens: u64) -> f64 {
        tokens as f64 * self.token_bytes_per_rank as f64 / self.link_bytes_per_s
    }

    /// GiB of host memory the pool takes over `ranks` ranks (each holds its share of every token).
    pub fn host_gib(&self, ranks: u64) -> f64 {
        self.host_tokens as f64 * self.token_bytes_per_rank as f64 * ranks as f64 / (1u64 << 30) as f64
    }

    /// The run report's words for the tier.
    pub fn describe(&self) -> String {
        format!(
            "HiCache {} · host pool {} tokens · host link {:.1} GB/s",
            self.policy.name(),
            self.host_tokens,
            self.link_bytes_per_s / 1e9
        )
    }
}

/// What the host tier did over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostTierStats {
    /// Host runs loaded back to the device, and their tokens.
    pub loads: u64,
    pub loaded_tokens: u64,
    /// Host runs found at admission and recomputed instead: shorter than the threshold, or no
    /// device room for them.
    pub runs_recomputed: u64,
    /// Tokens written to the host, and writes refused for want of host room.
    pub written_tokens: u64,
    pub refused_writes: u64,
    /// Device tokens given up with a host copy kept, and deleted without one.
    pub demoted_tokens: u64,
    pub dropped_tokens: u64,
    /// Host tokens evicted.
    pub host_evicted_tokens: u64,
    /// The most tokens the host held.
    pub peak_host_tokens: u64,
    /// Seconds each direction of the link spent copying.
    pub load_s: f64,
    pub write_s: f64,
    /// The storage tier's figures, with `--hicache-storage-backend`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageStats>,
}

impl HostTierStats {
    /// Adds another instance's figures (the peak is the largest instance's).
    pub fn merge(&mut self, o: &HostTierStats) {
        self.loads += o.loads;
        self.loaded_tokens += o.loaded_tokens;
        self.runs_recomputed += o.runs_recomputed;
        self.written_tokens += o.written_tokens;
        self.refused_writes += o.refused_writes;
        self.demoted_tokens += o.demoted_tokens;
        self.dropped_tokens += o.dropped_tokens;
        self.host_evicted_tokens += o.host_evicted_tokens;
        self.peak_host_tokens = self.peak_host_tokens.max(o.peak_host_tokens);
        self.load_s += o.load_s;
        self.write_s += o.write_s;
        if let Some(theirs) = o.storage {
            self.storage.get_or_insert_with(Default::default).merge(&theirs);
        }
    }
}

/// What the storage tier under the host tier ([`super::storage`]) did over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StorageStats {
    /// Lookups made (arrivals, retries, re-lookups).
    pub lookups: u64,
    /// Tokens the lookups found stored.
    pub hit_tokens: u64,
    /// Tokens read from storage and inserted into the host pool.
    pub inserted_tokens: u64,
    /// Pages written to storage, and pages a write found stored already.
    pub pages_written: u64,
    pub pages_skipped: u64,
}

impl StorageStats {
    /// Adds another instance's figures.
    pub fn merge(&mut self, o: &StorageStats) {
        self.lookups += o.lookups;
        self.hit_tokens += o.hit_tokens;
        self.inserted_tokens += o.inserted_tokens;
        self.pages_written += o.pages_written;
        self.pages_skipped += o.pages_skipped;
    }
}

/// The tier's state beside the tree: writes queued and in flight, loads to acknowledge, and
/// this step's copy time.
#[derive(Debug)]
pub struct HostTier {
    pub cfg: HostTierConfig,
    stats: HostTierStats,
    /// Written nodes not submitted yet, and their tokens.
    queued: Vec<(NodeId, u32)>,
    queued_tokens: u64,
    /// Submitted writes: (end, nodes), in submission order.
    writes: VecDeque<(f64, Vec<(NodeId, u32)>)>,
    /// When the device-to-host direction is free.
    write_free_at: f64,
    /// Loaded runs' end nodes, locked until the next step.
    loads: Vec<NodeId>,
    /// This step's loads (tokens) and blocking writes (seconds).
    step_load_tokens: u64,
    step_stall_s: f64,
    /// Reused buffers.
    path: Vec<(NodeId, usize)>,
    chain: Vec<NodeId>,
    /// Host slots held outside the tree: a storage tier's reads in flight or being released.
    pub staged: u64,
    /// Nodes whose device-to-host write was acknowledged since the last call to
    /// [`take_acked`](Self::take_acked), when a storage tier writes them on (`collect_acked`),
    /// each with the tokens it held when written (a split since leaves it the lower part).
    acked: Vec<(NodeId, u32)>,
    collect_acked: bool,
}

impl HostTier {
    /// An empty tier (the tree told to track write-back's duplicates, under write-back).
    pub fn new(cfg: HostTierConfig, tree: &mut RadixTree) -> Self {
        if cfg.policy == WritePolicy::WriteBack {
            tree.track_duplicates();
        }
        Self {
            cfg,
            stats: HostTierStats::default(),
            queued: Vec::new(),
            queued_tokens: 0,
            writes: VecDeque::new(),
            write_free_at: 0.0,
            loads: Vec::new(),
            step_load_tokens: 0,
            step_stall_s: 0.0,
            path: Vec::new(),
            chain: Vec::new(),
            staged: 0,
            acked: Vec::new(),
            collect_acked: false,
        }
    }

    /// Collects the nodes whose device-to-host write is acknowledged, for a storage tier to
    /// write on (`_finish_write_through_ack` → `write_backup_storage`).
    pub fn collect_acked(&mut self) {
        self.collect_acked = true;
    }

    /// The nodes acknowledged since the last call, in order.
    pub fn take_acked(&mut self, out: &mut Vec<(NodeId, u32)>) {
        out.append(&mut self.acked);
    }

    /// Free host slots.
    pub fn host_free(&self, tree: &RadixTree) -> u64 {
        self.cfg.host_tokens - tree.host_tokens() - self.staged
    }

    /// Host slots in use, the tree's and those held outside it.
    pub fn host_used(&self, tree: &RadixTree) -> u64 {
        tree.host_tokens() + self.staged
    }

    /// `evict_host(tokens)` (`drive_host_eviction`): under write-back the host copies of nodes
    /// also on the device first, then host-only leaves, towards `tokens` freed.
    pub fn evict_host(&mut self, tree: &mut RadixTree, tokens: u64) {
        let mut freed = 0;
        if self.cfg.policy == WritePolicy::WriteBack {
            freed = tree.reclaim_duplicates(tokens);
            self.stats.host_evicted_tokens += freed;
        }
        if freed < tokens {
            self.stats.host_evicted_tokens += tree.evict_host(tokens - freed);
        }
    }

    /// The figures so far.
    pub fn stats(&self) -> HostTierStats {
        self.stats
    }

    /// Whether copies are queued or in flight (their nodes locked).
    pub fn copying(&self) -> bool {
        !(self.queued.is_empty() && self.writes.is_empty() && self.loads.is_empty())
    }

    /// [`crate::cache::PrefixCache::next_copy_end`].
    pub fn next_copy_end(&self) -> Option<f64> {
        if !(self.queued.is_empty() && self.loads.is_empty()) {
            return Some(0.0);
        }
        self.writes.front().map(|&(end, _)| end)
    }

    /// Makes room for `tokens` on the host, the shortfall freed by evicting host-only leaves —
    /// under write-back after the host copies of nodes also on the device
    /// (`drive_host_eviction`); whether there is room.
    fn host_room(&mut self, tree: &mut RadixTree, tokens: u64) -> bool {
        let free = self.host_free(tree);
        if free < tokens {
            self.evict_host(tree, tokens - free);
        }
        self.host_free(tree) >= tokens
    }

    /// Writes node `n` to the host (`write_backup`); false when the host has no room.
    fn write(&mut self, tree: &mut RadixTree, n: NodeId, blocking: bool) -> bool {
        let len = tree.node_len(n) as u64;
        if !self.host_room(tree, len) {
            self.stats.refused_writes += 1;
            return false;
        }
        tree.backed_up(n, blocking);
        self.stats.written_tokens += len;
        self.stats.peak_host_tokens = self.stats.peak_host_tokens.max(self.host_used(tree));
        if blocking {
            // `writing_check(write_back=True)` waits for the copy before the forward.
            let s = self.cfg.copy_s(len);
            self.step_stall_s += s;
            self.stats.write_s += s;
            if self.collect_acked {
                self.acked.push((n, len as u32));
            }
        } else {
            tree.lock(n);
            self.queued.push((n, len as u32));
            self.queued_tokens += len;
        }
        true
    }

    /// After an insert of a request's first `len` tokens ending at `node`, the request having
    /// inserted its first `inserted` before: counts the passes and writes what is due.
    pub fn inserted(&mut self, tree: &mut RadixTree, node: NodeId, inserted: usize) {
        let Some(threshold) = self.cfg.policy.threshold() else { return };
        let mut path = std::mem::take(&mut self.path);
        let mut chain = std::mem::take(&mut self.chain);
        tree.path(node, &mut path);
        for &(n, end) in &path {
            if end <= inserted || !tree.count_hit(n, threshold) {
                continue;
            }
            tree.backup_chain(n, &mut chain);
            for &c in &chain {
                if !self.write(tree, c, false) {
                    break;
                }
            }
        }
        self.path = path;
        self.chain = chain;
    }

    /// Evicts device leaves towards `tokens` device tokens freed, the policy's way; returns the
    /// device tokens freed.
    pub fn evict(&mut self, tree: &mut RadixTree, tokens: u64) -> u64 {
        let mut freed = 0;
        while freed < tokens {
            let Some(n) = tree.pop_device_leaf() else { break };
            if !tree.has_host_copy(n) && self.cfg.policy == WritePolicy::WriteBack {
                self.write(tree, n, true);
            }
            if tree.has_host_copy(n) {
                let d = tree.demote(n);
                self.stats.demoted_tokens += d;
                freed += d;
            } else {
                let (d, h) = tree.drop_subtree(n);
                self.stats.dropped_tokens += d;
                self.stats.host_evicted_tokens += h;
                freed += d;
            }
        }
        freed
    }

    /// Whether the host run `f` found is long enough to load (`load_back_threshold`): the caller
    /// then makes device room for it (the run pinned on the host, [`RadixTree::pin_host`], since
    /// a write-back's eviction may evict host leaves) before [`load`](Self::load).
    pub fn loadable(f: &Found) -> bool {
        f.host >= LOAD_BACK_THRESHOLD
    }

    /// Loads the host run `f` found back onto the device for an admitted request
    /// (`init_load_back`) if `pool` has room for it; returns the tokens loaded (0: the run is
    /// recomputed). `f.node` is locked by the caller meanwhile.
    pub fn load(&mut self, tree: &mut RadixTree, pool: &mut SlotPool, f: &Found) -> usize {
        if f.host == 0 {
            return 0;
        }
        let need = f.host as u64;
        if !Self::loadable(f) || pool.available() < need {
            self.stats.runs_recomputed += 1;
            return 0;
        }
        let loaded = tree.load_back(f.host_node);
        debug_assert_eq!(loaded, need);
        pool.take(loaded);
        tree.lock(f.host_node);
        self.loads.push(f.host_node);
        self.step_load_tokens += loaded;
        self.stats.loads += 1;
        self.stats.loaded_tokens += loaded;
        f.host
    }

    /// The start of a scheduler step at `now` (`check_hicache_events`): submits the queued
    /// writes as one copy, acknowledges the writes done by now in order, and every load.
    pub fn events(&mut self, tree: &mut RadixTree, now: f64) {
        if !self.queued.is_empty() {
            let s = self.cfg.copy_s(self.queued_tokens);
            let end = self.write_free_at.max(now) + s;
            self.write_free_at = end;
            self.stats.write_s += s;
            self.writes.push_back((end, std::mem::take(&mut self.queued)));
            self.queued_tokens = 0;
        }
        while self.writes.front().is_some_and(|&(end, _)| end <= now) {
            let (_, nodes) = self.writes.pop_front().expect("checked");
            for (n, len) in nodes {
                tree.unlock(n);
                if self.collect_acked {
                    self.acked.push((n, len));
                }
            }
        }
        for n in self.loads.drain(..) {
            tree.load_acknowledged(n);
            tree.unlock(n);
        }
    }

    /// This step's copy times, reset: (seconds of loads its forward waits on layer by layer,
    /// seconds of blocking writes before it).
    pub fn take_step(&mut self) -> (f64, f64) {
        let load = self.cfg.copy_s(self.step_load_tokens);
        self.stats.load_s += load;
        let out = (load, self.step_stall_s);
        self.step_load_tokens = 0;
        self.step_stall_s = 0.0;
        out
    }
}
