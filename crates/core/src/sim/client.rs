//! The benchmark client's side of a run: when each request is sent (its planned time, or later
//! when a `--max-concurrency` slot frees — FIFO, and its clock starts then, as the clients'
//! semaphore does — or when its conversation's previous turn finished), and when it reaches the
//! serving side, `request_overhead_s` after its send (HTTP, parsing, tokenisation:
//! docs/engines/clients.md). Time is f64 seconds; the heaps key on the time's bits (times are
//! non-negative, so bits order like values), then FIFO.

use crate::cache::ReqId;
use crate::workload::Workload;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Min-heap key: time bits, then FIFO.
type Due = Reverse<(u64, u64, ReqId)>;

/// The client's state.
pub struct Client {
    /// Requests to send, by planned time.
    due: BinaryHeap<Due>,
    /// Sent, on the way to the server, by arrival time.
    transit: BinaryHeap<Due>,
    fifo: u64,
    planned: Vec<f64>,
    /// A turn whose previous turn is also sent waits for it to finish.
    next_turn: Vec<Option<u32>>,
    /// When each request was sent (`NaN` before).
    pub send_s: Vec<f64>,
    in_flight: u32,
    /// Due requests waiting for a concurrency slot.
    queue: VecDeque<ReqId>,
    max_concurrency: Option<u32>,
    overhead: f64,
}

impl Client {
    /// A client that will send `sends` — (request, planned time) — of `w`.
    pub fn new(w: &Workload, sends: &[(u32, f64)], max_concurrency: Option<u32>, overhead_s: f64) -> Self {
        debug_assert!(overhead_s.is_finite() && overhead_s >= 0.0);
        let n = w.requests.len();
        let mut c = Client {
            due: BinaryHeap::with_capacity(sends.len()),
            transit: BinaryHeap::new(),
            fifo: 0,
            planned: vec![f64::NAN; n],
            next_turn: vec![None; n],
            send_s: vec![f64::NAN; n],
            in_flight: 0,
            queue: VecDeque::new(),
            max_concurrency,
            overhead: overhead_s,
        };
        let mut selected = vec![false; n];
        for &(id, _) in sends {
            selected[id as usize] = true;
        }
        for &(id, t) in sends {
            c.planned[id as usize] = t;
            match w.requests[id as usize].prev_turn.filter(|&p| selected[p as usize]) {
                Some(p) => c.next_turn[p as usize] = Some(id),
                None => c.push_due(t.max(0.0), id),
            }
        }
        c
    }

    fn push_due(&mut self, t: f64, id: ReqId) {
        self.due.push(Reverse((t.to_bits(), self.fifo, id)));
        self.fifo += 1;
    }

    fn send(&mut self, t: f64, id: ReqId) {
        self.in_flight += 1;
        self.send_s[id as usize] = t;
        self.transit.push(Reverse(((t + self.overhead).to_bits(), self.fifo, id)));
        self.fifo += 1;
    }

    /// Request `id` completed (or failed) at `now`: its slot goes to the longest-waiting due
    /// request, and its conversation's next turn becomes due.
    pub fn completed(&mut self, id: ReqId, now: f64) {
        self.in_flight -= 1;
        if let Some(c) = self.queue.pop_front() {
            self.send(now, c);
        }
        if let Some(t) = self.next_turn[id as usize] {
            let at = self.planned[t as usize].max(now);
            self.push_due(at, t);
        }
    }

    /// Sends every request due by `now` that gets a slot; the others queue for one.
    pub fn send_due(&mut self, now: f64) {
        while let Some(&Reverse((bits, _, id))) = self.due.peek() {
            let t = f64::from_bits(bits);
            if t > now {
                break;
            }
            self.due.pop();
            if self.max_concurrency.is_some_and(|c| self.in_flight >= c) {
                self.queue.push_back(id);
            } else {
                self.send(t, id);
            }
        }
    }

    /// Moves the requests that reached the server by `now` into `out`, in arrival order.
    pub fn arrivals(&mut self, now: f64, out: &mut Vec<ReqId>) {
        while let Some(&Reverse((bits, _, id))) = self.transit.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            self.transit.pop();
            out.push(id);
        }
    }

    /// The next planned send or arrival.
    pub fn next_event(&self) -> Option<f64> {
        self.due
            .peek()
            .into_iter()
            .chain(self.transit.peek())
            .map(|&Reverse((bits, _, _))| bits)
            .min()
            .map(f64::from_bits)
    }

    /// Whether a completion can make the client send (a `--max-concurrency` slot, a
    /// conversation's next turn): then a finish anywhere can bring an arrival sooner than
    /// [`Client::next_event`] says.
    pub fn sends_on_completion(&self) -> bool {
        self.max_concurrency.is_some() || self.next_turn.iter().any(Option::is_some)
    }

    /// Nothing left to send or deliver, and no request waiting for a slot.
    pub fn is_done(&self) -> bool {
        self.due.is_empty() && self.transit.is_empty() && self.queue.is_empty()
    }
}
