//! The instances as the event loop and the routers see them: a read-only view for routers and
//! the set of idle instances that have something new to schedule. Shared by the loop
//! ([`super::driver`]) and the prefill → decode hand-off ([`super::disagg`]).

use super::instance::Instance;
use crate::cluster::router::InstanceView;
use crate::engine::ReqRt;
use crate::workload::SeqId;

/// The instances as routers may read them, with every request's state.
pub(super) struct View<'v, 'a>(pub &'v [Instance<'a>], pub &'v [ReqRt]);

impl InstanceView for View<'_, '_> {
    fn num_instances(&self) -> usize {
        self.0.len()
    }
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize {
        self.0[i].peek(seq, known)
    }
    fn held_tokens(&self, i: usize) -> u64 {
        let u = self.0[i].kv_usage();
        u.used_tokens - u.evictable_tokens
    }
    fn queued(&self, i: usize) -> u32 {
        let (w, r) = self.0[i].queued();
        (w + r) as u32
    }
    fn cached_blocks(&self, i: usize) -> u64 {
        let x = &self.0[i];
        x.kv_usage().used_tokens / x.block_tokens
    }
    fn available(&self, i: usize) -> bool {
        !self.0[i].down && !self.0[i].draining
    }
    fn waiting(&self, i: usize) -> u32 {
        self.0[i].waiting_metric() as u32
    }
    fn kv_usage(&self, i: usize) -> f64 {
        match self.0[i].capacity {
            Some(c) if c > 0 => self.held_tokens(i) as f64 / c as f64,
            _ => 0.0,
        }
    }
    fn lora_adapters(&self, i: usize, running: &mut Vec<u16>, waiting: &mut Vec<u16>) -> u32 {
        self.0[i].sched.lora_adapters(self.1, running, waiting)
    }
    fn block_keys(&self, seq: SeqId, known: usize, out: &mut Vec<u32>) {
        out.clear();
        let Some(x) = self.0.first() else { return };
        let blocks = known.saturating_sub(1) / x.block_tokens.max(1) as usize;
        x.cache.visit_block_keys(seq, 0, blocks, &mut |k| {
            out.push(k);
            true
        });
    }
    fn pool_blocks(&self, i: usize) -> u64 {
        let x = &self.0[i];
        // The pool's usable blocks and the null block.
        x.capacity.map_or(0, |c| c / x.block_tokens.max(1) + 1)
    }
}

/// Idle instances with something new to schedule, each once.
pub(super) struct Dirty {
    pub list: Vec<usize>,
    flag: Vec<bool>,
}

impl Dirty {
    pub fn new(n: usize) -> Self {
        Dirty { list: Vec::new(), flag: vec![false; n] }
    }
    /// Instance `i`, taken off the list, may be marked again.
    pub fn unmark(&mut self, i: usize) {
        self.flag[i] = false;
    }
    pub fn mark(&mut self, i: usize) {
        if !self.flag[i] {
            self.flag[i] = true;
            self.list.push(i);
        }
    }
}
