//! What a router's indexer knows of the instances' caches from their KV events (vLLM's
//! `BlockStored` / `BlockRemoved`, published when a step ends): per instance, the content keys
//! stored and not yet removed (copies counted), each event applied once it has arrived — the
//! driver stamps it with its step's end plus the router's delay. Read by `kv-aware` under
//! `--kv-event-delay-ms` and by `llm-d`'s precise prefix scorer.

use rustc_hash::FxHashMap;

/// One instance's blocks as the router's indexer knows them: events applied once they have
/// arrived, the rest waiting.
#[derive(Debug, Default)]
struct Indexer {
    /// Content key → copies stored and not removed.
    held: FxHashMap<u32, u32>,
    /// Events not yet arrived: (arrival time, key, stored), in arrival order.
    pending: std::collections::VecDeque<(f64, u32, bool)>,
}

impl Indexer {
    /// Events of the instance that arrive at `at`.
    fn receive(&mut self, at: f64, events: &[(u32, bool)]) {
        self.pending.extend(events.iter().map(|&(k, s)| (at, k, s)));
    }

    /// Applies the events arrived by `now`.
    fn catch_up(&mut self, now: f64) {
        while let Some(&(at, key, stored)) = self.pending.front() {
            if at > now {
                break;
            }
            self.pending.pop_front();
            if stored {
                *self.held.entry(key).or_insert(0) += 1;
            } else if let Some(n) = self.held.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(&key);
                }
            }
        }
    }

    /// The leading `keys` the index holds.
    fn overlap(&self, keys: &[u32]) -> u64 {
        keys.iter().take_while(|k| self.held.contains_key(k)).count() as u64
    }
}

/// Every instance's [`Indexer`] and the events' delay.
#[derive(Debug)]
pub struct KvEvents {
    delay_s: f64,
    idx: Vec<Indexer>,
}

impl KvEvents {
    /// Empty indexes of `n` instances whose events arrive `delay_ms` after their step ends.
    pub fn new(delay_ms: f64, n: usize) -> Self {
        KvEvents { delay_s: delay_ms / 1e3, idx: (0..n).map(|_| Indexer::default()).collect() }
    }

    /// The delay, seconds.
    pub fn delay_s(&self) -> f64 {
        self.delay_s
    }

    /// KV events of `instance` — (content key, stored) — that arrive at `at`.
    pub fn receive(&mut self, instance: usize, at: f64, events: &[(u32, bool)]) {
        self.idx[instance].receive(at, events);
    }

    /// A worker that went down leaves the index with all it held.
    pub fn forget(&mut self, instance: usize) {
        self.idx[instance] = Indexer::default();
    }

    /// Applies every event arrived by `now`.
    pub fn catch_up(&mut self, now: f64) {
        for x in &mut self.idx {
            x.catch_up(now);
        }
    }

    /// The leading `keys` instance `i`'s index holds.
    pub fn overlap(&self, i: usize, keys: &[u32]) -> u64 {
        self.idx[i].overlap(keys)
    }

    /// Blocks instance `i`'s index holds (Dynamo's tree size).
    pub fn blocks(&self, i: usize) -> u64 {
        self.idx[i].held.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two copies of one block: the block stays indexed until both are removed; an event counts
    /// from its arrival on.
    #[test]
    fn copies_are_counted_and_events_wait_for_their_arrival() {
        let mut e = KvEvents::new(0.0, 1);
        e.receive(0, 1.0, &[(5, true), (5, true)]);
        e.receive(0, 2.0, &[(5, false)]);
        e.catch_up(1.5);
        assert_eq!((e.overlap(0, &[5, 6]), e.blocks(0)), (1, 1));
        e.catch_up(2.0);
        assert_eq!(e.overlap(0, &[5]), 1, "one copy left");
        e.receive(0, 3.0, &[(5, false)]);
        e.catch_up(2.9);
        assert_eq!(e.overlap(0, &[5]), 1, "not arrived yet");
        e.catch_up(3.0);
        assert_eq!(e.overlap(0, &[5]), 0);
    }
}
