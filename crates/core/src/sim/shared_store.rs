//! Storage shared by the instances of a run: SGLang's HiCache over the Mooncake Store
//! (`--hicache-storage-backend mooncake`) has one store that every instance writes its pages to
//! and looks them up in, so a prefix computed on one instance is found by the others. The run
//! owns each shared store and lends it to an instance's storage tier for that instance's
//! scheduler pass (a plain swap: the tier keeps an empty store between passes). Instances share
//! a store when their pages are alike (same page size and capacity per instance, i.e. the same
//! model and parallelism: the store's keys name the model and rank, not the instance); the
//! capacity is the sum of what each adds.
//!
//! LMCache's remote server (`--lmcache-remote-url`) is a process of its own that every instance
//! of a run talks to: the run owns one per kind of chunk (chunk and block tokens, bytes a rank:
//! the same model and layout, as its keys name the model, world size and rank) and lends it the
//! same way, even to a lone instance, so that it outlives the instance's restarts.

use super::instance::{Instance, InstanceSpec};
use crate::cache::hicache::StorageStats;
use crate::cache::storage::{Eviction, Store};
use crate::engine::vllm_offload::lmcache::remote::{LmServer, RemoteStats};

/// What makes instances' pages alike: page size, pages each adds, eviction.
type Kind = (usize, Option<u64>, Eviction);

/// What makes instances' LMCache chunks alike: chunk tokens, block tokens, bytes a rank.
type ChunkKind = (u32, u32, u64);

/// The shared stores of a run, and which instance uses which.
#[derive(Debug, Default)]
pub struct SharedStores {
    stores: Vec<Store>,
    of: Vec<Option<usize>>,
    /// LMCache's remote servers, and which instance talks to which.
    servers: Vec<LmServer>,
    server_of: Vec<Option<usize>>,
}

impl SharedStores {
    /// The stores the instances `specs` share (none for a run of one instance, whose tier keeps
    /// its store), or `given` for every instance with a storage tier; and LMCache's remote
    /// servers, one per kind of chunk.
    pub fn new(specs: &[InstanceSpec<'_>], given: Option<Store>) -> Self {
        let mut out = Self {
            stores: Vec::new(),
            of: vec![None; specs.len()],
            servers: Vec::new(),
            server_of: vec![None; specs.len()],
        };
        let mut kinds: Vec<ChunkKind> = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let Some(o) = s.engine.offload.filter(|o| o.remote.is_some()) else { continue };
            let kind = (o.chunk_tokens, o.block_tokens, o.chunk_bytes_per_rank);
            out.server_of[i] = Some(kinds.iter().position(|k| *k == kind).unwrap_or_else(|| {
                kinds.push(kind);
                kinds.len() - 1
            }));
        }
        out.servers = vec![LmServer::default(); kinds.len()];
        if let Some(store) = given {
            for (i, s) in specs.iter().enumerate() {
                out.of[i] = s.engine.hicache_storage.map(|_| 0);
            }
            out.stores.push(store);
            return out;
        }
        if specs.len() < 2 {
            return out;
        }
        // Each kind of instance and the pages the store of that kind holds in all.
        let mut groups: Vec<(Kind, u64)> = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let Some(c) = s.engine.hicache_storage.filter(|c| c.shared) else { continue };
            let key = (s.engine.page_size.max(1) as usize, c.max_pages, c.eviction);
            let g = match groups.iter().position(|(k, _)| *k == key) {
                Some(g) => g,
                None => {
                    groups.push((key, 0));
                    groups.len() - 1
                }
            };
            groups[g].1 += c.max_pages.unwrap_or(0);
            out.of[i] = Some(g);
        }
        out.stores =
            groups.iter().map(|&((page, each, eviction), all)| Store::new(page, each.map(|_| all), eviction)).collect();
        out
    }

    /// Lends instance `i` its shared store (call again after its pass to take it back).
    pub fn swap(&mut self, i: usize, x: &mut Instance<'_>) {
        if let Some(g) = self.of.get(i).copied().flatten() {
            let swapped = x.cache.storage_swap(&mut self.stores[g]);
            debug_assert!(swapped, "an instance with a shared store has a storage tier");
        }
        if let Some(g) = self.server_of.get(i).copied().flatten() {
            let swapped = x.sched.lmcache_server_swap(&mut self.servers[g]);
            debug_assert!(swapped, "an instance with a remote server has LMCache");
        }
    }

    /// Sets the run's remote figures: the chunks its servers hold.
    pub fn add_to_remote(&self, stats: &mut RemoteStats) {
        stats.held_chunks = self.servers.iter().map(|s| s.len() as u64).sum();
    }

    /// The first store (the one given), its writes in flight landed.
    pub fn into_store(self) -> Store {
        self.stores.into_iter().next().unwrap_or_default()
    }

    /// Adds what the shared stores' writes found to the run's storage figures.
    pub fn add_to(&self, stats: &mut StorageStats) {
        for s in &self.stores {
            let w = s.written();
            stats.pages_written += w.new;
            stats.pages_skipped += w.held;
        }
    }
}
