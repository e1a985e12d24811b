//! Per-request records → the benchmark clients' summary (ENGINE_SPEC §7.1–7.2): TTFT, TPOT
//! excluding the first token (requests with one output token have none), ITL pooled over all
//! requests, E2E latency, throughputs over the duration, Concurrency = Σ latency / duration,
//! peak output throughput and peak concurrent requests over 1-second bins counted from the
//! earliest request start (vLLM `vllm/benchmarks/serve.py` `calculate_metrics`, SGLang
//! `bench_serving.py`; ENGINE_SPEC §7.2). The bins are never materialised: token counts are kept
//! per step in time order and requests as intervals, so absurd times cost no memory. Statistics
//! are numpy's: mean, median, population std, percentiles with linear interpolation; an empty
//! list counts as `[0]`.

use serde::{Deserialize, Serialize};

/// Per-request limits in ms (`--goodput ttft:MS tpot:MS e2el:MS`, as `vllm bench serve` takes
/// them): a request is good when each is met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl Goodput {
    /// Parses `KEY:MS` words (keys ttft, tpot, e2el; a word may hold several, split at commas
    /// or spaces, as a Python list reaches the flag), refusing a key given twice or a limit that
    /// is not a number of ms, as `vllm bench serve` refuses them.
    pub fn parse(words: &[String]) -> Result<Goodput, String> {
        let mut g = Goodput::default();
        for w in words.iter().flat_map(|w| w.split(|c: char| c == ',' || c.is_whitespace())).filter(|w| !w.is_empty()) {
            let (k, v) = w.split_once(':').ok_or_else(|| format!("`{w}` is not KEY:MS (e.g. ttft:500)"))?;
            let ms: f64 = v.parse().map_err(|_| format!("`{v}` in `{w}` is not a number of ms"))?;
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(format!("`{w}`: the limit must be a number of ms, 0 or more"));
            }
            let slot = match k {
                "ttft" => &mut g.ttft_ms,
                "tpot" => &mut g.tpot_ms,
                "e2el" => &mut g.e2el_ms,
                _ => return Err(format!("`{k}` is not a goodput key: ttft, tpot or e2el")),
            };
            if slot.replace(ms).is_some() {
                return Err(format!("`{k}` is given twice"));
            }
        }
        Ok(g)
    }

    /// Whether `r` meets every limit (`calculate_metrics` in `vllm/benchmarks/serve.py`: the
    /// TPOT of a one-token output counts as 0).
    pub fn is_good(&self, r: &RequestRecord) -> bool {
        r.within_ms(self.ttft_ms, self.tpot_ms, self.e2el_ms)
    }

    /// `ttft:500 tpot:50`, as given.
    pub fn describe(&self) -> String {
        [("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms)]
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}:{v}")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One request as the client saw it (seconds from the benchmark start).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RequestRecord {
    pub id: u32,
    /// When the client sent it (after waiting for a concurrency slot, if any).
    pub send_s: f64,
    pub first_token_s: f64,
    pub last_token_s: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub cached_prompt_tokens: u32,
    pub preemptions: u32,
    /// When the engine first scheduled it.
    pub first_scheduled_s: f64,
    /// Its priority class ([`crate::workload::Request::priority`]); not a column of the
    /// per-request CSV, which stays the clients' shape.
    #[serde(skip)]
    pub priority: i32,
}

impl RequestRecord {
    /// Whether its TTFT, TPOT (0 for a single output token) and E2E latency are each within
    /// their limit in ms (`None`: no limit): `vllm bench serve`'s per-request goodput check
    /// ([`Goodput`]), which `plan`'s per-request SLOs use too.
    pub fn within_ms(&self, ttft: Option<f64>, tpot: Option<f64>, e2el: Option<f64>) -> bool {
        let within = |limit: Option<f64>, s: f64| limit.is_none_or(|l| s * 1e3 <= l);
        within(ttft, self.ttft_s()) && within(tpot, self.tpot_s().unwrap_or(0.0)) && within(e2el, self.latency_s())
    }

    /// Time to first token.
    pub fn ttft_s(&self) -> f64 {
        self.first_token_s - self.send_s
    }
    /// End-to-end latency.
    pub fn latency_s(&self) -> f64 {
        self.last_token_s - self.send_s
    }
    /// Time per output token after the first; `None` with one output token.
    pub fn tpot_s(&self) -> Option<f64> {
        (self.output_tokens > 1).then(|| (self.latency_s() - self.ttft_s()) / (self.output_tokens - 1) as f64)
    }
}

/// numpy statistics of a list (ms values in reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// numpy.percentile (linear interpolation) at `p` of `n` values, given a way to get their
/// `k`-th smallest (0-based); 0 for no values.
fn interpolate(n: u64, p: f64, mut nth: impl FnMut(u64) -> f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let rank = p / 100.0 * (n - 1) as f64;
    let lo = rank.floor() as u64;
    let low = nth(lo);
    if rank == lo as f64 || lo + 1 == n {
        return low;
    }
    low + (nth(lo + 1) - low) * (rank - lo as f64)
}

/// numpy.percentile with linear interpolation over sorted data.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    interpolate(sorted.len() as u64, p, |k| sorted[k as usize])
}

/// numpy.percentile (linear interpolation) at ascending `ps` by selection, O(n) for all of
/// them: the two order statistics around each rank, each selection confined to the part of `v`
/// above the previous one (reordered in place, not fully sorted).
pub fn select_percentiles<const N: usize>(v: &mut [f64], ps: [f64; N]) -> [f64; N] {
    debug_assert!(ps.windows(2).all(|w| w[0] <= w[1]), "percentiles in ascending order");
    let n = v.len();
    // `v[..placed]` holds the smallest `placed` values, each selected index its order statistic.
    let mut placed = 0;
    let mut place = |v: &mut [f64], k: usize| {
        if k >= placed {
            v[placed..].select_nth_unstable_by(k - placed, f64::total_cmp);
            placed = k + 1;
        }
        v[k]
    };
    ps.map(|p| interpolate(n as u64, p, |k| place(v, k as usize)))
}

impl Stats {
    /// Statistics of `v` (reordered in place, not fully sorted); an empty list counts as `[0]`.
    pub fn of(v: &mut [f64]) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let [median, p90, p95, p99] = select_percentiles(v, [50.0, 90.0, 95.0, 99.0]);
        Self { mean, median, std: var.sqrt(), p90, p95, p99, max }
    }
    /// Statistics of the list made of `count` copies of each `(value, count)` (`runs` is
    /// sorted in place), without expanding it.
    pub fn of_runs(runs: &mut [(f64, u64)]) -> Self {
        let n: u64 = runs.iter().map(|&(_, c)| c).sum();
        if n == 0 {
            return Self::default();
        }
        let nf = n as f64;
        let mean = runs.iter().map(|&(v, c)| v * c as f64).sum::<f64>() / nf;
        let var = runs.iter().map(|&(v, c)| (v - mean) * (v - mean) * c as f64).sum::<f64>() / nf;
        runs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let max = runs.last().map_or(0.0, |r| r.0);
        // The k-th smallest value (0-based) of the expanded list; cheap for ascending k.
        let (mut run, mut below) = (0usize, 0u64);
        let mut nth = |k: u64| {
            if k < below {
                (run, below) = (0, 0);
            }
            while below + runs[run].1 <= k {
                below += runs[run].1;
                run += 1;
            }
            runs[run].0
        };
        let [median, p90, p95, p99] = [50.0, 90.0, 95.0, 99.0].map(|p| interpolate(n, p, &mut nth));
        Self { mean, median, std: var.sqrt(), p90, p95, p99, max }
    }

    pub fn ms(self) -> Self {
        Self {
            mean: self.mean * 1e3,
            median: self.median * 1e3,
            std: self.std * 1e3,
            p90: self.p90 * 1e3,
            p95: self.p95 * 1e3,
            p99: self.p99 * 1e3,
            max: self.max * 1e3,
        }
    }
}

/// How the benchmark client counts the inter-token latency of a streamed chunk that carries
/// several tokens (a speculative step's accepted drafts with its new token, docs/engines/clients.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ItlCount {
    /// One entry per chunk, the gap since the request's previous chunk (`vllm bench serve`;
    /// sglang `bench_serving.py` up to 0.4.3.post2).
    #[default]
    Chunk,
    /// The gap divided over the chunk's new tokens, one entry each (sglang `bench_serving.py`
    /// from 0.4.3.post3, PR #3988: `async_request_sglang_generate`'s `adjust_itl`).
    Token,
}

/// Gap runs [`TokenLog`] lets wait before it sorts them into its histogram (16 bytes each).
const PENDING: usize = 1 << 18;

/// Collects token times while the simulation runs, without storing them per request or per
/// step: the inter-token gaps as a histogram of exact values, the output tokens as counts per
/// 1-second bucket once the buckets' origin is known. Its memory follows the number of distinct
/// gap values and of seconds simulated, not the number of engine steps (a 16-instance run takes
/// millions of them).
#[derive(Debug, Clone, Default)]
pub struct TokenLog {
    /// The gap being repeated (a step's decodes all see the same one) and how many times.
    run: (f64, u64),
    /// Gaps not yet merged into `itl`, as runs of equal values in arrival order.
    pending: Vec<(f64, u64)>,
    /// Every gap merged so far: distinct values (by bits) in ascending order, with their counts.
    itl: Vec<(f64, u64)>,
    /// Output tokens as logged, `(time, count)`, until the buckets' origin is known.
    emitted: Vec<(f64, u32)>,
    /// The buckets' origin (the earliest start of a completed request, [`TokenLog::set_origin`])
    /// and, from it on, the tokens per bucket `int(t − origin)`: `(bucket, count)` in bucket
    /// order, buckets below 0 left out.
    bins: Option<(f64, Vec<(f64, u64)>)>,
    total: u64,
    /// How a chunk of several tokens counts ([`TokenLog::chunk`]).
    counting: ItlCount,
}

impl ItlCount {
    /// One entry per chunk (what serde leaves out of the echo).
    pub fn is_chunk(&self) -> bool {
        *self == ItlCount::Chunk
    }
}

impl TokenLog {
    /// An empty log whose client counts a multi-token chunk's gap as `itl` says.
    pub fn counting(itl: ItlCount) -> Self {
        TokenLog { counting: itl, ..TokenLog::default() }
    }

    /// A chunk of `tokens` tokens arrived `gap` after the request's previous one: one gap, or
    /// (`ItlCount::Token`) `tokens` gaps of `gap / tokens`.
    #[inline]
    pub fn chunk(&mut self, gap: f64, tokens: u64) {
        match self.counting {
            ItlCount::Token if tokens > 1 => self.gaps_of(gap / tokens as f64, tokens),
            _ => self.gap(gap),
        }
    }

    /// A token arrived at `t`; `prev` is the same request's previous token time.
    pub fn token(&mut self, t: f64, prev: Option<f64>) {
        if let Some(p) = prev {
            self.gap(t - p);
        }
        self.count(t, 1);
    }

    /// One inter-token gap.
    #[inline]
    pub fn gap(&mut self, gap: f64) {
        self.gaps_of(gap, 1);
    }

    fn flush_run(&mut self) {
        if self.run.1 == 0 {
            return;
        }
        self.pending.push(std::mem::take(&mut self.run));
        // Merging costs about the histogram's size: done when as many runs wait, so each run
        // costs O(log) and memory stays within twice the distinct values (plus `PENDING`: a
        // run of a few thousand requests sorts its gaps once, at the end).
        if self.pending.len() >= self.itl.len().max(PENDING) {
            self.merge_pending();
        }
    }

    /// Merges the waiting runs into the histogram: the runs sorted, then one linear merge of two
    /// sorted lists (sorting the whole histogram again costs 10 % more of a 16-instance run).
    fn merge_pending(&mut self) {
        // Gaps are never negative (a later token's time less an earlier one's), so their bits
        // order them as numbers: a fifth faster than `total_cmp`.
        debug_assert!(self.pending.iter().all(|r| r.0.is_sign_positive()), "a negative gap");
        self.pending.sort_unstable_by_key(|r| r.0.to_bits());
        if self.itl.is_empty() {
            // Nothing to merge with: equal values (by bits) become one entry in place.
            self.pending.dedup_by(|b, a| {
                let same = a.0.to_bits() == b.0.to_bits();
                a.1 += if same { b.1 } else { 0 };
                same
            });
            std::mem::swap(&mut self.itl, &mut self.pending);
            return;
        }
        let mut merged: Vec<(f64, u64)> = Vec::with_capacity(self.itl.len() + self.pending.len());
        let (mut a, mut b) = (self.itl.iter().peekable(), self.pending.iter().peekable());
        while let Some(&(v, c)) = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0.total_cmp(&y.0).is_le() => a.next(),
            (Some(_), None) => a.next(),
            _ => b.next(),
        } {
            // Equal values (by bits: total_cmp equality) become one entry, their counts summed.
            match merged.last_mut() {
                Some(last) if last.0.to_bits() == v.to_bits() => last.1 += c,
                _ => merged.push((v, c)),
            }
        }
        self.pending.clear();
        self.itl = merged;
    }

    /// Every inter-token gap logged: distinct values in ascending order with their counts.
    pub fn gaps(&mut self) -> &mut [(f64, u64)] {
        self.flush_run();
        if !self.pending.is_empty() {
            self.merge_pending();
        }
        &mut self.itl
    }

    /// `n` equal inter-token gaps (a step's decodes all see the same one).
    #[inline]
    pub fn gaps_of(&mut self, gap: f64, n: u64) {
        if n == 0 {
            return;
        }
        if self.run.1 > 0 && self.run.0.to_bits() == gap.to_bits() {
            self.run.1 += n;
            return;
        }
        self.flush_run();
        self.run = (gap, n);
    }

    /// `n` tokens arrived at `t`. Times come nearly in order: one instance's are, but a
    /// coalesced stretch of decode steps logs its tokens ahead of other instances' steps.
    pub fn count(&mut self, t: f64, n: u32) {
        if n == 0 {
            return;
        }
        self.total += n as u64;
        match &mut self.bins {
            Some((origin, bins)) => add_to_bin(bins, py_int(t - *origin), n as u64),
            None => match self.emitted.last_mut() {
                Some((last, c)) if last.to_bits() == t.to_bits() && c.checked_add(n).is_some() => *c += n,
                _ => self.emitted.push((t, n)),
            },
        }
    }

    /// The buckets' origin is known from now on: `origin`, the earliest start of the completed
    /// requests (no request sent earlier can still complete). Tokens logged so far are put in
    /// their buckets, later ones as they come. A second call is ignored.
    pub fn set_origin(&mut self, origin: f64) {
        if self.bins.is_some() {
            return;
        }
        let bins = bin(&self.emitted, origin);
        self.emitted = Vec::new();
        self.bins = Some((origin, bins));
    }

    /// The log in a form that depends only on what was logged, not in what order: gaps
    /// merged into the histogram, token counts by time ascending with equal times summed (what
    /// the summary reads is the same either way; this is for comparing two logs whole).
    pub fn settle(&mut self) {
        self.gaps();
        self.emitted.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.emitted.dedup_by(|later, kept| {
            let same = later.0.to_bits() == kept.0.to_bits() && kept.1.checked_add(later.1).is_some();
            if same {
                kept.1 += later.1;
            }
            same
        });
    }

    /// Output tokens logged.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The most output tokens in one 1-second bucket, buckets counted from `origin` (the
    /// earliest request start): a token at `t` falls in bucket `int(t − origin)`, kept when
    /// `0 ≤ bucket < buckets` (vLLM `calculate_metrics`: `tokens_per_second`).
    fn peak_tokens_per_second(&self, origin: f64, buckets: f64) -> u64 {
        let binned;
        let bins = match &self.bins {
            Some((o, bins)) => {
                debug_assert_eq!(o.to_bits(), origin.to_bits(), "the origin set is the summary's");
                bins
            }
            None => {
                binned = bin(&self.emitted, origin);
                &binned
            }
        };
        bins.iter().filter(|&&(b, _)| b < buckets).map(|&(_, n)| n).max().unwrap_or(0)
    }
}

/// Token counts `(time, count)` as counts per bucket `int(t − origin)` ([`add_to_bin`]).
fn bin(emitted: &[(f64, u32)], origin: f64) -> Vec<(f64, u64)> {
    let mut bins = Vec::new();
    for &(t, n) in emitted {
        add_to_bin(&mut bins, py_int(t - origin), n as u64);
    }
    bins
}

/// Adds `n` tokens to bucket `b` of `bins` (kept in bucket order; tokens come in time order,
/// so nearly always at the end); buckets below 0 (or not a number) are left out.
fn add_to_bin(bins: &mut Vec<(f64, u64)>, b: f64, n: u64) {
    if b.is_nan() || b < 0.0 {
        return;
    }
    // Tokens come nearly in time order (a coalesced stretch logs a little ahead of the other
    // instances): look back a few buckets before searching.
    let len = bins.len();
    for i in (len.saturating_sub(4)..len).rev() {
        if bins[i].0 == b {
            bins[i].1 += n;
            return;
        }
        if bins[i].0 < b {
            bins.insert(i + 1, (b, n));
            return;
        }
    }
    match bins.binary_search_by(|x| x.0.total_cmp(&b)) {
        Ok(i) => bins[i].1 += n,
        Err(i) => bins.insert(i, (b, n)),
    }
}

/// Python's `int()` of a float: truncation toward zero (kept as a float, so any time is safe).
fn py_int(x: f64) -> f64 {
    // −0.3 truncates to −0.0, Python's 0: the same bucket as 0.0 however the buckets are
    // searched (adding 0.0 turns −0.0 into 0.0).
    x.trunc() + 0.0
}

/// The most requests active in one 1-second bucket, buckets counted from `origin`: a request
/// counts in every bucket from `int(send − origin)` to `int(end − origin)`, both included
/// (vLLM `calculate_metrics`: `concurrent_requests_per_second`). A sweep over the interval
/// ends, not an array of buckets.
fn peak_requests_per_second(records: &[RequestRecord], origin: f64) -> u64 {
    let mut events: Vec<(f64, i8)> = Vec::with_capacity(records.len() * 2);
    for r in records {
        events.push((py_int(r.send_s - origin), 1));
        events.push((py_int(r.last_token_s - origin) + 1.0, -1));
    }
    // At one bucket, the requests that ended before it leave before those starting in it come.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut best) = (0i64, 0i64);
    for (_, d) in events {
        cur += d as i64;
        best = best.max(cur);
    }
    best as u64
}

/// The summary both clients print, in milliseconds where they do (`Deserialize` so that
/// summaries computed elsewhere, e.g. by a sweep's remote workers, can be ranked here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub duration: f64,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub total_throughput: f64,
    pub peak_output_throughput: f64,
    pub peak_concurrent_requests: u64,
    pub concurrency: f64,
    pub mean_ttft_ms: f64,
    pub median_ttft_ms: f64,
    pub std_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub mean_tpot_ms: f64,
    pub median_tpot_ms: f64,
    pub std_tpot_ms: f64,
    pub p99_tpot_ms: f64,
    pub mean_itl_ms: f64,
    pub median_itl_ms: f64,
    pub std_itl_ms: f64,
    pub p95_itl_ms: f64,
    pub p99_itl_ms: f64,
    pub max_itl_ms: f64,
    pub mean_e2e_latency_ms: f64,
    pub median_e2e_latency_ms: f64,
    pub std_e2e_latency_ms: f64,
    pub p90_e2e_latency_ms: f64,
    pub p99_e2e_latency_ms: f64,
    pub cached_prompt_tokens: u64,
    pub preemptions: u64,
    /// Under `--goodput`: completed requests meeting every limit per second of the duration
    /// (`request_goodput` of `vllm bench serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_goodput: Option<f64>,
}

impl Summary {
    /// Summarises completed requests; `log` holds the pooled ITLs and per-second token counts.
    pub fn new(records: &[RequestRecord], failed: u64, log: &mut TokenLog) -> Self {
        let start = records.iter().map(|r| r.send_s).fold(f64::INFINITY, f64::min).min(0.0);
        let end = records.iter().map(|r| r.last_token_s).fold(0.0, f64::max);
        let duration = end - start.min(0.0);
        let per = |x: f64| if duration > 0.0 { x / duration } else { 0.0 };
        let input: u64 = records.iter().map(|r| r.prompt_tokens as u64).sum();
        let output: u64 = records.iter().map(|r| r.output_tokens as u64).sum();
        let mut ttft: Vec<f64> = records.iter().map(RequestRecord::ttft_s).collect();
        let mut tpot: Vec<f64> = records.iter().filter_map(RequestRecord::tpot_s).collect();
        let mut e2e: Vec<f64> = records.iter().map(RequestRecord::latency_s).collect();
        let latency_sum: f64 = e2e.iter().sum();
        let (t, p, i, e) = (
            Stats::of(&mut ttft).ms(),
            Stats::of(&mut tpot).ms(),
            Stats::of_runs(log.gaps()).ms(),
            Stats::of(&mut e2e).ms(),
        );
        // The per-second peaks count buckets from the earliest start of a completed request;
        // there are ceil(last end − earliest start) + 1 of them.
        let origin = records.iter().map(|r| r.send_s).fold(f64::INFINITY, f64::min);
        let last_end = records.iter().map(|r| r.last_token_s).fold(f64::NEG_INFINITY, f64::max);
        let (peak_tokens, peak_requests) = if records.is_empty() {
            (0, 0)
        } else {
            let buckets = (last_end - origin).ceil() + 1.0;
            (log.peak_tokens_per_second(origin, buckets), peak_requests_per_second(records, origin))
        };
        Self {
            completed: records.len() as u64,
            failed,
            total_input_tokens: input,
            total_output_tokens: output,
            duration,
            request_throughput: per(records.len() as f64),
            input_throughput: per(input as f64),
            output_throughput: per(output as f64),
            total_throughput: per((input + output) as f64),
            peak_output_throughput: peak_tokens as f64,
            peak_concurrent_requests: peak_requests,
            concurrency: per(latency_sum),
            mean_ttft_ms: t.mean,
            median_ttft_ms: t.median,
            std_ttft_ms: t.std,
            p99_ttft_ms: t.p99,
            mean_tpot_ms: p.mean,
            median_tpot_ms: p.median,
            std_tpot_ms: p.std,
            p99_tpot_ms: p.p99,
            mean_itl_ms: i.mean,
            median_itl_ms: i.median,
            std_itl_ms: i.std,
            p95_itl_ms: i.p95,
            p99_itl_ms: i.p99,
            max_itl_ms: i.max,
            mean_e2e_latency_ms: e.mean,
            median_e2e_latency_ms: e.median,
            std_e2e_latency_ms: e.std,
            p90_e2e_latency_ms: e.p90,
            p99_e2e_latency_ms: e.p99,
            cached_prompt_tokens: records.iter().map(|r| r.cached_prompt_tokens as u64).sum(),
            preemptions: records.iter().map(|r| r.preemptions as u64).sum(),
            request_goodput: None,
        }
    }

    /// Sets `request_goodput` under the limits `g`: the good requests of `records` per second
    /// of the duration, as `vllm bench serve --goodput` computes it.
    pub fn with_goodput(mut self, records: &[RequestRecord], g: Option<Goodput>) -> Self {
        self.request_goodput = g.map(|g| {
            let good = records.iter().filter(|r| g.is_good(r)).count() as f64;
            if self.duration > 0.0 {
                good / self.duration
            } else {
                0.0
            }
        });
        self
    }
}

#[cfg(test)]
mod tests {

    /// A chunk of three tokens 0.3 s after the previous one: one gap of 0.3 s per chunk, or three
    /// of 0.1 s per token; a chunk of one token counts the same either way.
    #[test]
    fn a_chunk_counts_as_its_client_counts_it() {
        let mut chunk = TokenLog::counting(ItlCount::Chunk);
        let mut token = TokenLog::counting(ItlCount::Token);
        for log in [&mut chunk, &mut token] {
            log.chunk(0.3, 3);
            log.chunk(0.25, 1);
        }
        assert_eq!(chunk.gaps().to_vec(), [(0.25, 1), (0.3, 1)]);
        assert_eq!(token.gaps().to_vec(), [(0.09999999999999999, 3), (0.25, 1)]);
        assert_eq!(TokenLog::default().counting, ItlCount::Chunk);
    }
    use super::*;

    #[test]
    fn goodput_words_parse_as_vllm_takes_them() {
        let g = Goodput::parse(&["ttft:500".into(), "tpot:50".into()]).unwrap();
        assert_eq!((g.ttft_ms, g.tpot_ms, g.e2el_ms), (Some(500.0), Some(50.0), None));
        for (bad, says) in
            [("ttft", "KEY:MS"), ("itl:5", "not a goodput key"), ("ttft:x", "not a number"), ("ttft:-1", "0 or more")]
        {
            assert!(Goodput::parse(&[bad.to_string()]).unwrap_err().contains(says), "{bad}");
        }
        assert!(Goodput::parse(&["ttft:1".into(), "ttft:2".into()]).unwrap_err().contains("twice"));
        assert_eq!(Goodput::parse(&["ttft:500,tpot:50".into()]), Ok(g));
        assert_eq!(Goodput::parse(&["ttft:500 tpot:50".into()]), Ok(g));
        // A one-token output has a TPOT of 0 for the check.
        let r = RequestRecord {
            id: 0,
            send_s: 0.0,
            first_token_s: 0.4,
            last_token_s: 0.4,
            prompt_tokens: 1,
            output_tokens: 1,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: 0.0,
            priority: 0,
        };
        assert!(Goodput::parse(&["ttft:400".into(), "tpot:0".into()]).unwrap().is_good(&r));
        assert!(!Goodput::parse(&["e2el:399".into()]).unwrap().is_good(&r));
    }

    proptest::proptest! {
        #[test]
        fn selection_matches_sorting(
            mut v in proptest::collection::vec(-1e3f64..1e3, 1..60),
            mut ps in proptest::collection::vec(0f64..=100.0, 4),
            dup in 0usize..4,
        ) {
            ps.sort_by(f64::total_cmp);
            ps[dup] = ps[dup.saturating_sub(1)];
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let got = select_percentiles(&mut v, [ps[0], ps[1], ps[2], ps[3]]);
            for (p, g) in ps.iter().zip(got) {
                proptest::prop_assert!((g - percentile(&sorted, *p)).abs() < 1e-9, "p{}", p);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn runs_match_the_expanded_list(runs in proptest::collection::vec((-5i32..5, 1u64..4), 0..30)) {
            let mut runs: Vec<(f64, u64)> = runs.into_iter().map(|(v, c)| (v as f64 / 4.0, c)).collect();
            let mut flat: Vec<f64> = runs.iter().flat_map(|&(v, c)| std::iter::repeat_n(v, c as usize)).collect();
            let (a, b) = (Stats::of_runs(&mut runs), Stats::of(&mut flat));
            for (x, y) in [(a.mean, b.mean), (a.median, b.median), (a.std, b.std), (a.p90, b.p90), (a.p95, b.p95), (a.p99, b.p99), (a.max, b.max)] {
                proptest::prop_assert!((x - y).abs() < 1e-12, "{:?} vs {:?}", a, b);
            }
        }
    }

    #[test]
    fn numpy_percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&v, 0.0), 1.0);
        let s = Stats::of(&mut [4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.mean, s.median, s.max), (2.5, 2.5, 4.0));
        assert!((s.std - 1.118033988749895).abs() < 1e-12);
        assert_eq!(Stats::of(&mut []), Stats::default());
    }

    #[test]
    fn summary_by_hand() {
        let r = |id, send, first, last, out| RequestRecord {
            id,
            send_s: send,
            first_token_s: first,
            last_token_s: last,
            prompt_tokens: 10,
            output_tokens: out,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: send,
            priority: 0,
        };
        let recs = [r(0, 0.0, 0.1, 0.5, 5), r(1, 0.0, 0.2, 0.2, 1)];
        let mut log = TokenLog::default();
        for t in [0.1, 0.2, 0.3, 0.4, 0.5] {
            log.token(t, if t > 0.15 { Some(t - 0.1) } else { None });
        }
        log.token(0.2, None);
        let s = Summary::new(&recs, 0, &mut log);
        assert_eq!(s.duration, 0.5);
        assert_eq!(s.total_output_tokens, 6);
        assert!((s.mean_ttft_ms - 150.0).abs() < 1e-9);
        // TPOT only for the 5-token request: (0.5 − 0.1) / 4.
        assert!((s.mean_tpot_ms - 100.0).abs() < 1e-9);
        assert!((s.concurrency - 0.7 / 0.5).abs() < 1e-12);
        assert_eq!(s.peak_output_throughput, 6.0);
        assert_eq!(s.peak_concurrent_requests, 2);
        assert!((s.median_itl_ms - 100.0).abs() < 1e-9);
    }

    fn rec(id: u32, send: f64, last: f64) -> RequestRecord {
        RequestRecord {
            id,
            send_s: send,
            first_token_s: last,
            last_token_s: last,
            prompt_tokens: 1,
            output_tokens: 1,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: send,
            priority: 0,
        }
    }

    /// Buckets start at the earliest send (0.5 s), not at t = 0: tokens at 0.9 and 1.2 fall in
    /// bucket 0, those at 1.6, 2.0 and 2.4 in bucket 1 → peak 3 (from t = 0 it would be 2).
    #[test]
    fn peak_tokens_count_from_the_earliest_start() {
        let recs = [rec(0, 0.5, 1.6), rec(1, 1.7, 2.4)];
        let mut log = TokenLog::default();
        for t in [0.9, 1.2, 1.6, 2.0, 2.4] {
            log.count(t, 1);
        }
        let s = Summary::new(&recs, 0, &mut log);
        assert_eq!(s.peak_output_throughput, 3.0);
        // A: buckets int(0)..=int(1.1) = {0, 1}; B: int(1.2)..=int(1.9) = {1} → 2 in bucket 1.
        assert_eq!(s.peak_concurrent_requests, 2);
    }

    /// Requests [0.6, 0.95] and [1.05, 1.5] never overlap in time, but counted from 0.6 both
    /// cover bucket 0 (inclusive integer seconds), as vLLM counts them; from t = 0 they would
    /// sit in buckets 0 and 1.
    #[test]
    fn peak_concurrency_uses_inclusive_buckets_from_the_earliest_start() {
        let recs = [rec(0, 0.6, 0.95), rec(1, 1.05, 1.5)];
        let mut log = TokenLog::default();
        log.count(0.95, 1);
        log.count(1.5, 1);
        let s = Summary::new(&recs, 0, &mut log);
        assert_eq!(s.peak_concurrent_requests, 2);
        assert_eq!(s.peak_output_throughput, 2.0);
        // A request spanning buckets 0..=2 and one inside bucket 3: peak 1.
        let recs = [rec(0, 0.0, 2.5), rec(1, 3.1, 3.2)];
        assert_eq!(peak_requests_per_second(&recs, 0.0), 1);
    }

    /// The per-second peak computed straight from the token times, as before the log binned them:
    /// the oracle of the log's buckets. The most output tokens in one 1-second bucket, buckets
    /// counted from `origin` (the earliest request start): a token at `t` falls in bucket `int(t − origin)`, kept when
    /// `0 ≤ bucket < buckets` (vLLM `calculate_metrics`: `tokens_per_second`).
    fn peak_tokens_per_second(emitted: &[(f64, u32)], origin: f64, buckets: f64) -> u64 {
        let mut sorted;
        let emitted = if emitted.is_sorted_by(|a, b| a.0 <= b.0) {
            emitted
        } else {
            sorted = emitted.to_vec();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            &sorted[..]
        };
        let (mut best, mut bin, mut in_bin) = (0u64, f64::NAN, 0u64);
        for &(t, n) in emitted {
            let b = py_int(t - origin);
            if !(b >= 0.0 && b < buckets) {
                continue;
            }
            if b != bin {
                (bin, in_bin) = (b, 0);
            }
            in_bin += n as u64;
            best = best.max(in_bin);
        }
        best
    }

    proptest::proptest! {
        /// The log's buckets, set from an origin part-way through, count what the raw list of
        /// token times counts; its gap histogram holds every gap (past several merges).
        #[test]
        fn the_log_counts_as_the_raw_lists(
            steps in proptest::collection::vec((0u32..40, 0u32..5, 0u32..3), 1..300),
            at in 0usize..300,
            origin in 0u32..20,
        ) {
            let (mut raw, mut log) = (TokenLog::default(), TokenLog::default());
            let (mut t, mut flat) = (0.0f64, Vec::new());
            for (k, &(dt, n, g)) in steps.iter().enumerate() {
                t += dt as f64 * 0.05;
                if k == at {
                    log.set_origin(origin as f64 * 0.1);
                }
                raw.count(t, n);
                log.count(t, n);
                for j in 0..(n * 700) {
                    // Runs of one or two equal gaps: enough to merge the histogram many times.
                    let gap = (g + (k as u32 % 7) + (j / 2 % 3)) as f64 * 0.001;
                    log.gap(gap);
                    flat.push(gap);
                }
            }
            log.set_origin(origin as f64 * 0.1);
            let o = origin as f64 * 0.1;
            let buckets = (t - o).ceil() + 1.0;
            proptest::prop_assert_eq!(log.peak_tokens_per_second(o, buckets), peak_tokens_per_second(&raw.emitted, o, buckets));
            proptest::prop_assert_eq!(log.total(), raw.total());
            let gaps = log.gaps();
            proptest::prop_assert!(gaps.windows(2).all(|w| w[0].0 < w[1].0), "distinct, ascending");
            proptest::prop_assert_eq!(gaps.iter().map(|&(_, c)| c).sum::<u64>(), flat.len() as u64);
            let (a, b) = (Stats::of_runs(gaps), Stats::of(&mut flat));
            for (x, y) in [(a.mean, b.mean), (a.median, b.median), (a.std, b.std), (a.p99, b.p99), (a.max, b.max)] {
                proptest::prop_assert!((x - y).abs() < 1e-9, "{:?} vs {:?}", a, b);
            }
        }
    }

    /// Times near the limits of f64 cost no memory and do not panic.
    #[test]
    fn absurd_times_are_bounded() {
        let recs = [rec(0, 1e300, 2e300), rec(1, 0.0, 1.0)];
        let mut log = TokenLog::default();
        log.count(1.0, 2);
        log.count(2e300, 1);
        let s = Summary::new(&recs, 0, &mut log);
        assert_eq!(s.peak_output_throughput, 2.0);
        assert_eq!(s.peak_concurrent_requests, 1);
        assert_eq!(log.total(), 3);
    }
}
