//! The instances as the event loop and the routers see them: a read-only view for routers and
//! the set of idle instances that have something new to schedule. Shared by the loop
//! ([`super::driver`]) and the prefill → decode hand-off ([`super::disagg`]).

use super::instance::Instance;
use crate::cluster::router::InstanceView;
use crate::workload::SeqId;

/// The instances as routers may read them.
pub(super) struct View<'v, 'a>(pub &'v [Instance<'a>]);

impl InstanceView for View<'_, '_> {
    fn num_instances(&self) -> usize {
        self.0.len()
    }
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize {
        self.0[i].cache.peek(seq, known)
    }
    fn held_tokens(&self, i: usize) -> u64 {
        let u = self.0[i].cache.usage();
        u.used_tokens - u.evictable_tokens
    }
    fn queued(&self, i: usize) -> u32 {
        let (w, r) = self.0[i].sched.queued();
        (w + r) as u32
    }
    fn cached_blocks(&self, i: usize) -> u64 {
        let x = &self.0[i];
        x.cache.usage().used_tokens / x.block_tokens
    }
    fn available(&self, i: usize) -> bool {
        !self.0[i].down && !self.0[i].draining
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
