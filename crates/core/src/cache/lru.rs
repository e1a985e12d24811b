//! An intrusive least-recently-used list over dense `u32` ids: a node is unlinked, placed at the
//! most recent end or just older than another node, and walked either way, each in O(1) a step.
//! The radix tree's components that keep an eviction order of their own beside the tree's use it
//! over node ids (SGLang 0.5.23 `UnifiedTreeCore`'s `lru_lists[component]`: the window
//! component's and the state component's), LMCache's CPU backend over its chunk slots.

/// A node: a dense id the caller owns.
pub type NodeId = u32;

/// No node (a list end).
pub(crate) const NIL: NodeId = NodeId::MAX;

/// A node's neighbours: toward the most recent end, and toward the least recent.
#[derive(Debug, Clone, Copy)]
struct Links {
    newer: NodeId,
    older: NodeId,
}

const UNLINKED: Links = Links { newer: NIL, older: NIL };

/// The list: per node id its neighbours, and both ends.
#[derive(Debug, Clone)]
pub(crate) struct LruList {
    links: Vec<Links>,
    mru: NodeId,
    lru: NodeId,
}

impl LruList {
    /// An empty list over `nodes` ids.
    pub(crate) fn new(nodes: usize) -> Self {
        Self { links: vec![UNLINKED; nodes], mru: NIL, lru: NIL }
    }

    /// Node id `n` (new, or reused) is not in the list.
    pub(crate) fn forget(&mut self, n: NodeId) {
        let i = n as usize;
        if self.links.len() <= i {
            self.links.resize(i + 1, UNLINKED);
        }
        self.links[i] = UNLINKED;
    }

    /// The most recent node (`NIL`: empty).
    pub(crate) fn mru(&self) -> NodeId {
        self.mru
    }

    /// The least recent node (`NIL`: empty).
    pub(crate) fn lru(&self) -> NodeId {
        self.lru
    }

    /// The node just more recent than listed node `n` (`NIL`: `n` is the most recent).
    pub(crate) fn newer(&self, n: NodeId) -> NodeId {
        self.links[n as usize].newer
    }

    /// The node just less recent than listed node `n` (`NIL`: `n` is the least recent).
    pub(crate) fn older(&self, n: NodeId) -> NodeId {
        self.links[n as usize].older
    }

    /// Takes listed node `n` out.
    pub(crate) fn unlink(&mut self, n: NodeId) {
        let Links { newer, older } = self.links[n as usize];
        match newer {
            NIL => self.mru = older,
            p => self.links[p as usize].older = older,
        }
        match older {
            NIL => self.lru = newer,
            q => self.links[q as usize].newer = newer,
        }
        self.links[n as usize] = UNLINKED;
    }

    /// Places `n` just older than `prev`, or at the most recent end (`prev` = `NIL`).
    pub(crate) fn link_after(&mut self, prev: NodeId, n: NodeId) {
        let older = if prev == NIL { self.mru } else { self.links[prev as usize].older };
        self.links[n as usize] = Links { newer: prev, older };
        match prev {
            NIL => self.mru = n,
            p => self.links[p as usize].older = n,
        }
        match older {
            NIL => self.lru = n,
            q => self.links[q as usize].newer = n,
        }
    }

    /// Places `n` at the most recent end (`insert_mru`).
    pub(crate) fn link_mru(&mut self, n: NodeId) {
        self.link_after(NIL, n);
    }
}
