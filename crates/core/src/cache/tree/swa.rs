//! The radix tree's sliding-window component, as SGLang 0.5.23 keeps it for a model whose
//! layers mix full and sliding-window attention (`mem_cache/unified_cache/components/swa.py`
//! `SWAComponent` in a `UnifiedRadixCache` of FULL and SWA components, both tree cores).
//!
//! Every node holds its full-attention KV; its sliding-window KV may be gone (a *tombstone*).
//! A match ends at the deepest node reached through at least `W` tokens of live window KV since
//! the last tombstone (`create_match_validator`); a lock pins the full path and only the last
//! window's nodes of the window pool (`acquire_component_lock`); eviction of window KV walks its
//! own LRU list from the least recent end, deleting an unlocked leaf whole and making any other
//! node a tombstone (`_evict_device_next_node`); an insert revives tombstones from the inserting
//! request's KV within its window (`update_component_on_insert_overlap`) and caps a fresh
//! leaf's live part at one page-rounded window (`_maybe_split_leaf_for_swa_lock`). The list
//! order follows the upstream list exactly: a value made live goes to the most recent end, a
//! split's upper part sits just older than its lower part, and a match or an insert moves the
//! nodes within `W + page` tokens of its end to the front, the deepest first
//! (`reset_node_and_window_ancestors_mru`). The caller ([`crate::cache::swa`]) keeps the pools.

use super::{NodeId, RadixTree, ROOT};
use crate::workload::{SeqId, TokenStore};

use crate::cache::lru::{LruList, NIL};

#[derive(Debug, Clone, Copy)]
struct SwaNode {
    /// Holds its window KV (not a tombstone).
    live: bool,
    /// Window locks (SGLang's SWA `lock_ref`, tombstones counted too).
    lock: u32,
}

const FRESH: SwaNode = SwaNode { live: false, lock: 0 };

/// The tree's window state.
#[derive(Debug, Clone)]
pub struct Swa {
    /// `W`: tokens of window KV a match needs and a lock pins (SGLang `swa_retain_window`).
    window: usize,
    nodes: Vec<SwaNode>,
    /// The list of the nodes holding their component's KV or state, most recent first.
    list: LruList,
    /// Live window tokens in unlocked and in locked nodes.
    evictable: u64,
    protected: u64,
}

/// What a match found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwaFound {
    /// Tokens a request may reuse (page-aligned).
    pub hit: usize,
    /// The node ending them.
    pub node: NodeId,
    /// The full-attention match past the hit, page-aligned, where there is one
    /// (`swa_branching_seqlen`): the request's next insert stops there.
    pub branch: Option<usize>,
}

impl Swa {
    fn new(window: usize, nodes: usize) -> Self {
        Self { window, nodes: vec![FRESH; nodes], list: LruList::new(nodes), evictable: 0, protected: 0 }
    }

    /// A node was made (or an id reused).
    pub(super) fn made(&mut self, n: NodeId) {
        let i = n as usize;
        if self.nodes.len() <= i {
            self.nodes.resize(i + 1, FRESH);
        }
        self.nodes[i] = FRESH;
        self.list.forget(n);
    }

    /// `upper` was split off above `child` (`redistribute_on_node_split`, `_split_node`): it
    /// shares the child's state, just older than it in the list.
    pub(super) fn split(&mut self, upper: NodeId, child: NodeId) {
        let c = self.nodes[child as usize];
        self.nodes[upper as usize] = c;
        self.list.forget(upper);
        if c.live {
            self.list.link_after(child, upper);
        }
    }

    /// Unlocked node `n` of `len` tokens was deleted with its KV.
    pub(super) fn deleted(&mut self, n: NodeId, len: u64) {
        debug_assert_eq!(self.nodes[n as usize].lock, 0, "delete of a window-locked node");
        if self.nodes[n as usize].live {
            self.list.unlink(n);
            self.evictable -= len;
        }
        self.nodes[n as usize] = FRESH;
        self.list.forget(n);
    }

    /// The first unlocked node from `from` toward the most recent end (`get_prev_no_lock`).
    fn unlocked_from(&self, mut x: NodeId) -> NodeId {
        while x != NIL && self.nodes[x as usize].lock > 0 {
            x = self.list.newer(x);
        }
        x
    }
}

impl RadixTree {
    /// Gives the tree SGLang's sliding-window component for a window of `window` tokens.
    pub fn enable_swa(&mut self, window: usize) {
        assert!(window > 0, "a window of no tokens");
        self.swa = Some(Box::new(Swa::new(window, self.nodes.len())));
    }

    fn w(&self) -> &Swa {
        self.swa.as_ref().expect("the window component is on")
    }

    fn wm(&mut self) -> &mut Swa {
        self.swa.as_mut().expect("the window component is on")
    }

    /// Live window tokens in unlocked nodes.
    pub fn swa_evictable(&self) -> u64 {
        self.w().evictable
    }

    /// Live window tokens in all nodes.
    pub fn swa_size(&self) -> u64 {
        let w = self.w();
        w.evictable + w.protected
    }

    /// Makes node `n`'s window KV live (`set_component_device_value`): the most recent.
    fn revive(&mut self, n: NodeId) {
        let len = self.len_of(n) as u64;
        let w = self.wm();
        debug_assert!(!w.nodes[n as usize].live);
        w.nodes[n as usize].live = true;
        if w.nodes[n as usize].lock > 0 {
            w.protected += len;
        } else {
            w.evictable += len;
        }
        w.list.link_after(NIL, n);
    }

    /// Moves the live nodes within `W + page` tokens above and at `node` to the most recent
    /// end, the deepest the most recent (`reset_node_and_window_ancestors_mru`).
    fn refresh_window(&mut self, mut node: NodeId) {
        let reach = self.w().window + self.page;
        let (mut prev, mut seen) = (NIL, 0);
        while node != ROOT && seen < reach {
            if self.w().nodes[node as usize].live {
                let w = self.wm();
                w.list.unlink(node);
                w.list.link_after(prev, node);
                prev = node;
            }
            seen += self.len_of(node);
            node = self.nodes[node as usize].parent;
        }
    }

    /// SGLang's `match_prefix` with the window component: walks `seq[..len]` (page-aligned),
    /// splitting a partly matched node, and ends at the deepest node the window validator
    /// accepts; refreshes that node's window in the list and stamps its path. Does not lock.
    pub fn match_swa(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> SwaFound {
        let len = self.align(len);
        let window = self.w().window;
        let (mut node, mut pos) = (ROOT, 0);
        let mut run = usize::MAX;
        let (mut best, mut hit) = (ROOT, 0);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            let partial = same < self.len_of(child);
            let n = if partial {
                let upper = self.split(store, child, same);
                // `_split_node` stamps the lower part anew.
                let t = self.tick();
                self.set_access(child, t);
                upper
            } else {
                child
            };
            pos += same;
            if self.w().nodes[n as usize].live {
                run = run.saturating_add(same);
                if run >= window {
                    (best, hit) = (n, pos);
                }
            } else {
                run = 0;
            }
            if partial {
                break;
            }
            node = n;
        }
        if best != ROOT {
            self.refresh_window(best);
        }
        self.stamp_path(best);
        SwaFound { hit, node: best, branch: (pos > hit).then_some(pos) }
    }

    /// [`match_swa`](Self::match_swa)'s hit, read-only.
    pub fn peek_swa(&self, store: &TokenStore, seq: SeqId, len: usize) -> usize {
        let len = self.align(len);
        let window = self.w().window;
        let (mut node, mut pos, mut run, mut hit) = (ROOT, 0, usize::MAX, 0);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            pos += same;
            if self.w().nodes[child as usize].live {
                run = run.saturating_add(same);
                if run >= window {
                    hit = pos;
                }
            } else {
                run = 0;
            }
            if same < self.len_of(child) {
                break;
            }
            node = child;
        }
        hit
    }

    /// Window tokens locking `node` (ending at `end`) would move from evictable to protected.
    pub fn swa_unlocked_above(&self, mut node: NodeId) -> u64 {
        let w = self.w();
        let (mut covered, mut n) = (0, 0);
        while node != ROOT && covered < w.window {
            let x = w.nodes[node as usize];
            let len = self.len_of(node);
            if x.lock == 0 && x.live {
                n += len as u64;
            }
            covered += len;
            node = self.nodes[node as usize].parent;
        }
        n
    }

    /// Locks the window above `node`, which ends at token `end`: every node up to the one
    /// where `W` tokens are covered (tombstones counted). Returns where that node starts, or
    /// `None` when the walk reached the root; [`swa_unlock`](Self::swa_unlock) needs it.
    pub fn swa_lock(&mut self, mut node: NodeId, mut end: usize) -> Option<usize> {
        let window = self.w().window;
        let mut covered = 0;
        while node != ROOT && covered < window {
            let len = self.len_of(node);
            let w = self.wm();
            let x = &mut w.nodes[node as usize];
            if x.lock == 0 && x.live {
                w.evictable -= len as u64;
                w.protected += len as u64;
            }
            w.nodes[node as usize].lock += 1;
            covered += len;
            end -= len;
            if covered >= window {
                return Some(end);
            }
            node = self.nodes[node as usize].parent;
        }
        None
    }

    /// Releases a lock [`swa_lock`](Self::swa_lock) took on `node` (ending at `end`), down to
    /// the node starting at `boundary` (splits since keep that start: SGLang's boundary uuid
    /// moves to a split's upper part).
    pub fn swa_unlock(&mut self, mut node: NodeId, mut end: usize, boundary: Option<usize>) {
        while node != ROOT {
            let len = self.len_of(node);
            let w = self.wm();
            let x = &mut w.nodes[node as usize];
            debug_assert!(x.lock > 0, "window unlock of an unlocked node");
            x.lock -= 1;
            if x.lock == 0 && x.live {
                w.evictable += len as u64;
                w.protected -= len as u64;
            }
            end -= len;
            if Some(end) == boundary {
                break;
            }
            node = self.nodes[node as usize].parent;
        }
    }

    /// Frees window KV until `tokens` are freed or nothing unlocked is left, SGLang's window
    /// walk: from the least recent unlocked node, an unlocked full leaf is deleted whole (its
    /// full KV too), any other node becomes a tombstone. Returns (full, window) tokens freed.
    pub fn swa_evict(&mut self, tokens: u64) -> (u64, u64) {
        let (mut full, mut freed) = (0, 0);
        let mut cursor = self.w().unlocked_from(self.w().list.lru());
        while freed < tokens && cursor != NIL {
            let x = cursor;
            let len = self.len_of(x) as u64;
            cursor = self.w().unlocked_from(self.w().list.newer(x));
            if self.is_evictable_leaf(x) {
                self.leaves.remove(&self.leaf_key(x));
                self.delete(x);
                full += len;
            } else {
                let w = self.wm();
                w.list.unlink(x);
                w.nodes[x as usize].live = false;
                w.evictable -= len;
            }
            freed += len;
        }
        (full, freed)
    }

    /// SGLang's insert of `seq[..len]` (page-aligned) with the window component, for a request
    /// whose first `cached` tokens are its locked prefix and whose window KV below `evicted`
    /// is freed (`InsertParams.prev_prefix_len`, `evicted_seqlen`): tombstones past `cached`
    /// whose range reaches `evicted` take the request's window KV back; a new leaf holds window
    /// KV from `evicted` on, its live part capped at one page-rounded window (the older part
    /// split off above it). Returns the tokens of the key already in the tree (the request's
    /// duplicates below `len`, as [`RadixTree::insert`]), the node ending the key, and the
    /// request's window slots the tree adopted.
    pub fn insert_swa(
        &mut self,
        store: &TokenStore,
        seq: SeqId,
        len: usize,
        cached: usize,
        evicted: usize,
    ) -> (usize, NodeId, u64) {
        self.clock += 1;
        let len = self.align(len);
        let now = self.clock;
        let (mut node, mut pos, mut adopted) = (ROOT, 0, 0u64);
        self.set_access(ROOT, now);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            self.set_access(child, now);
            // A partly matched node is split; the walk then ends below its upper part.
            let n = if same < self.len_of(child) { self.split(store, child, same) } else { child };
            let (s, e) = (pos, pos + same);
            let live = s.max(evicted);
            if e > cached && !self.w().nodes[n as usize].live && live < e {
                if live > s {
                    // The part below the request's window stays a tombstone; `n` keeps the rest.
                    self.split(store, n, live - s);
                }
                self.revive(n);
                adopted += (e - live) as u64;
            }
            pos = e;
            node = n;
        }
        let present = pos;
        let mut target = node;
        if pos < len {
            let leaf = self.add_device_leaf(store, seq, node, pos, len);
            target = leaf;
            let live = pos.max(evicted);
            if live < len {
                if live > pos {
                    self.split(store, leaf, live - pos);
                }
                let tail = self.w().window.div_ceil(self.page) * self.page;
                let frag = len - live;
                if frag > tail {
                    let parent = self.split(store, leaf, frag - tail);
                    self.revive(parent);
                }
                self.revive(leaf);
                adopted += frag as u64;
            }
        }
        if target != ROOT {
            self.refresh_window(target);
        }
        (present, target, adopted)
    }

    /// Debug check of the window counters and list.
    pub(super) fn check_swa(&self) {
        let Some(w) = self.swa.as_ref() else { return };
        let (mut ev, mut pr, mut listed) = (0, 0, 0);
        for (i, n) in self.nodes.iter().enumerate() {
            if i == ROOT as usize || !n.alive {
                continue;
            }
            let x = w.nodes[i];
            if x.live {
                listed += 1;
                if x.lock == 0 {
                    ev += n.len as u64;
                } else {
                    pr += n.len as u64;
                }
            }
            assert!(x.lock <= n.lock_ref, "window lock above the full lock on node {i}");
        }
        assert_eq!((ev, pr), (w.evictable, w.protected), "window counters");
        let (mut k, mut x) = (0, w.list.mru());
        while x != NIL {
            assert!(w.nodes[x as usize].live, "tombstone {x} in the window list");
            k += 1;
            x = w.list.older(x);
        }
        assert_eq!(k, listed, "window list length");
    }
}
