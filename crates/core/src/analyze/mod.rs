//! `cachesim analyze`: can this data set show a prefix-cache benefit at all? Two answers:
//! the *prefix repetition degree* (pruned leaves of a radix tree over all conversations at
//! count N, longer than L, per conversation — see [`crate::workload::prefix_trie`]) with coverage, length
//! statistics and the most shared prefixes; and *what a cache could gain*: hit-ratio upper
//! bounds at unlimited capacity per block size and for the radix tree, and the hit ratio
//! against capacity (cache replays, in parallel).

pub mod items;

use crate::cache::{CacheSpec, Policy};
use crate::error::{Error, Result};
use crate::replay::{replay_all, ReplayOptions, ReplayResult};
use crate::tokenize::Tokenizer;
use crate::trace::TraceFile;
use crate::workload::prefix_trie::{pruned_leaves, Items, PrunedLeaf};
use crate::workload::{BuildOptions, TokenStore, TraceInfo, Workload};
use items::{Texts, Tokens};
use serde::Serialize;

/// Unit of lengths (`--unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Unicode scalar values of the text.
    Chars,
    /// Tokens (`--tokenizer` for text; the trace's own ids or blocks otherwise).
    Tokens,
}

/// What a conversation's string is (`--scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Every message's value concatenated in order, nothing between.
    Conversation,
    /// The first user message.
    FirstTurn,
}

/// Parameters of the repetition degree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RepetitionOptions {
    pub min_count: usize,
    pub min_len: usize,
    pub unit: Unit,
    pub scope: Scope,
}

/// One of the most shared prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopPrefix {
    pub count: usize,
    pub length: usize,
    /// First 80 characters, escaped (token ids in brackets for token units without text).
    pub text: String,
}

/// The repetition report; field names are the `--json` keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repetition {
    pub conversations: usize,
    pub min_count: usize,
    pub min_len: usize,
    pub unit: Unit,
    pub scope: Scope,
    /// Pruned leaves longer than `min_len`.
    pub leaves: usize,
    /// leaves / conversations.
    pub repetition: f64,
    /// Fraction of conversations under a kept leaf.
    pub coverage: f64,
    pub mean_prefix_len: f64,
    pub median_prefix_len: f64,
    pub max_prefix_len: usize,
    pub top_prefixes: Vec<TopPrefix>,
    /// Length of every kept leaf (for the histogram).
    #[serde(skip)]
    pub kept_lengths: Vec<usize>,
}

/// numpy's median: the middle value, or the mean of the two middle values.
pub fn median(sorted: &[usize]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2] as f64,
        n => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
    }
}

/// Computes the repetition degree of `items`; `describe(rep, len)` renders a prefix.
pub fn repetition<I: Items>(
    items: &I,
    opts: RepetitionOptions,
    describe: impl Fn(usize, usize) -> String,
) -> Repetition {
    let kept: Vec<PrunedLeaf> =
        pruned_leaves(items, opts.min_count.max(1)).into_iter().filter(|l| l.len > opts.min_len).collect();
    let n = items.count();
    let mut lengths: Vec<usize> = kept.iter().map(|l| l.len).collect();
    lengths.sort_unstable();
    let covered: usize = kept.iter().map(|l| l.count).sum();
    let mut top = kept.clone();
    top.sort_by(|a, b| b.count.cmp(&a.count).then(b.len.cmp(&a.len)));
    let frac = |x: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    Repetition {
        conversations: n,
        min_count: opts.min_count,
        min_len: opts.min_len,
        unit: opts.unit,
        scope: opts.scope,
        leaves: kept.len(),
        repetition: frac(kept.len()),
        coverage: frac(covered),
        mean_prefix_len: if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<usize>() as f64 / lengths.len() as f64
        },
        median_prefix_len: median(&lengths),
        max_prefix_len: lengths.last().copied().unwrap_or(0),
        top_prefixes: top
            .iter()
            .take(20)
            .map(|l| TopPrefix { count: l.count, length: l.len, text: describe(l.rep, l.len) })
            .collect(),
        kept_lengths: lengths,
    }
}

/// Block sizes whose unlimited-capacity hit ratio bounds what paged caching can gain. Block 1
/// is not replayed: at unlimited capacity, one request at a time, paged block 1 and the radix
/// tree hit exactly the same tokens (the cross-model conformance test), so the radix row
/// stands for it at a fraction of the cost.
pub const BOUND_BLOCKS: [u32; 4] = [16, 32, 64, 512];
/// Capacities tried, as fractions of the radix tree's unlimited peak (never below the
/// largest request's KV, so every request fits).
pub const CAPACITY_FRACTIONS: [f64; 7] = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5];

/// One unlimited-capacity bound.
#[derive(Debug, Clone, Serialize)]
pub struct Bound {
    pub policy: &'static str,
    pub block_size: Option<u32>,
    pub hit_ratio: f64,
    pub peak_used_tokens: u64,
}

/// Hit ratio at one capacity.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityPoint {
    pub policy: &'static str,
    pub block_size: Option<u32>,
    pub capacity_tokens: u64,
    pub kv_gb: f64,
    pub hit_ratio: f64,
    /// This hit ratio over the policy's unlimited bound.
    pub share_of_bound: f64,
}

/// What a cache could gain on this workload.
#[derive(Debug, Clone, Serialize)]
pub struct Bounds {
    pub kv_bytes_per_token: u64,
    pub unlimited: Vec<Bound>,
    pub capacity: Vec<CapacityPoint>,
}

fn bound(r: &ReplayResult) -> Bound {
    Bound { policy: r.policy, block_size: r.block_size, hit_ratio: r.hit_ratio, peak_used_tokens: r.peak_used_tokens }
}

/// Most request replays [`bounds`] makes per request (the `tick`s it sends per request): the
/// unlimited radix and paged replays, then a paged and a radix replay per capacity.
pub const BOUND_REPLAYS: u64 = 1 + BOUND_BLOCKS.len() as u64 + 2 * CAPACITY_FRACTIONS.len() as u64;

/// Replays the bounds (one request at a time, so every finished request is reusable).
pub fn bounds(w: &Workload, kv_bytes_per_token: u64, tick: &(dyn Fn() + Sync)) -> Bounds {
    let spec = |policy, block_size, capacity_tokens| CacheSpec {
        policy,
        block_size,
        page_size: Some(1),
        capacity_tokens,
        hybrid: None,
        sglang_pool: None,
    };
    let mut specs = vec![spec(Policy::Radix, None, None)];
    specs.extend(BOUND_BLOCKS.iter().map(|&b| spec(Policy::Paged, Some(b), None)));
    let opts = ReplayOptions::default();
    let unlimited = replay_all(w, &specs, opts, tick);
    let (radix, paged16) = (&unlimited[0], &unlimited[1]);
    let largest = w.requests.iter().map(|r| r.final_kv_tokens() as u64).max().unwrap_or(1).max(1);
    let mut caps: Vec<u64> =
        CAPACITY_FRACTIONS.iter().map(|f| ((radix.peak_used_tokens as f64 * f).round() as u64).max(largest)).collect();
    caps.dedup();
    let specs: Vec<CacheSpec> = caps
        .iter()
        .flat_map(|&c| [spec(Policy::Paged, Some(16), Some(c)), spec(Policy::Radix, None, Some(c))])
        .collect();
    let capacity = replay_all(w, &specs, opts, tick)
        .iter()
        .map(|r| {
            let top = if r.policy == "radix" { radix.hit_ratio } else { paged16.hit_ratio };
            let cap = r.capacity_tokens.expect("bounded");
            CapacityPoint {
                policy: r.policy,
                block_size: r.block_size,
                capacity_tokens: cap,
                kv_gb: cap as f64 * kv_bytes_per_token as f64 / 1e9,
                hit_ratio: r.hit_ratio,
                share_of_bound: if top > 0.0 { r.hit_ratio / top } else { 0.0 },
            }
        })
        .collect();
    Bounds { kv_bytes_per_token, unlimited: unlimited.iter().map(bound).collect(), capacity }
}

/// Number of replays [`bounds`] runs (for progress bars).
pub fn bounds_runs() -> usize {
    BOUND_BLOCKS.len() + 1 + 2 * CAPACITY_FRACTIONS.len()
}

/// A block-hashed trace's (Mooncake's) block references, counted as NVIDIA Dynamo's recipes
/// count them (`recipes/qwen3-32b/README.md`: "cache efficiency … of N total block references,
/// R were repeats (reusable with infinite cache)"): every hash id of every request in trace
/// order, a reference to an id seen in an earlier request being a repeat. A trace block of
/// 512 tokens weighs as much as a request's partial last block here; the token-weighted bound
/// of the paged replays ([`Bounds`]) does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockReferences {
    /// Hash ids over all requests.
    pub references: u64,
    /// Distinct hash ids.
    pub distinct: u64,
    /// References to an id an earlier request held: `references − distinct`.
    pub repeats: u64,
    /// Distinct ids that more than one request holds.
    pub shared: u64,
}

impl BlockReferences {
    /// Counts a Mooncake trace's references, in record order.
    pub fn count(trace: &crate::trace::mooncake::MooncakeTrace) -> Self {
        // Per id: requests holding it, saturating at 2 (0 unseen, 1 one, 2 several), and the
        // last record that counted it, so an id twice in one request counts once for sharing.
        let n = trace.hash_ids.iter().copied().max().map_or(0, |m| m as usize + 1);
        let (mut holders, mut last) = (vec![0u8; n], vec![u32::MAX; n]);
        let (mut references, mut distinct) = (0u64, 0u64);
        for (k, r) in trace.records.iter().enumerate() {
            for &id in trace.ids(r) {
                let i = id as usize;
                references += 1;
                if holders[i] == 0 {
                    distinct += 1;
                }
                if last[i] != k as u32 {
                    last[i] = k as u32;
                    holders[i] = (holders[i] + 1).min(2);
                }
            }
        }
        let shared = holders.iter().filter(|&&h| h == 2).count() as u64;
        BlockReferences { references, distinct, repeats: references - distinct, shared }
    }

    /// Repeats over references (Dynamo's "cache efficiency").
    pub fn repeat_share(&self) -> f64 {
        if self.references == 0 {
            0.0
        } else {
            self.repeats as f64 / self.references as f64
        }
    }
}

/// Options of `cachesim analyze`.
#[derive(Debug, Clone, Copy)]
pub struct AnalyzeOptions {
    pub repetition: RepetitionOptions,
    /// Also replay the hit-ratio bounds (needs the workload built).
    pub bounds: bool,
    /// KV bytes per token, to express capacities in GB.
    pub kv_bytes_per_token: u64,
    /// Count in tokens when the trace has no text, whatever `repetition.unit` says.
    pub tokens_without_text: bool,
}

/// The `cachesim analyze` report; with `--json`, the repetition keys sit at the top level.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The workload summary, when the workload was built (bounds or token units need it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceInfo>,
    #[serde(flatten)]
    pub repetition: Repetition,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
    /// A block-hashed trace's block references ([`BlockReferences`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_references: Option<BlockReferences>,
}

/// Characters of a prefix shown in reports.
pub const SHOWN_CHARS: usize = 80;
/// Token ids (or runs) of a prefix shown in reports.
pub const SHOWN_TOKENS: usize = 16;

/// Runs the analysis of a trace file.
pub fn run(file: TraceFile, build: &BuildOptions, opts: &AnalyzeOptions, tick: &(dyn Fn() + Sync)) -> Result<Analysis> {
    let mut r = opts.repetition;
    let texts = items::texts(&file.records, r.scope);
    if texts.is_none() && opts.tokens_without_text {
        r.unit = Unit::Tokens;
    }
    if r.unit == Unit::Chars && texts.is_none() {
        return Err(Error::invalid(
            "--unit",
            format!("the {} trace {} carries no text: use --unit tokens", file.format, file.path.display()),
        ));
    }
    let block_references = match &file.records {
        crate::trace::Records::Mooncake(t) => Some(BlockReferences::count(t)),
        _ => None,
    };
    let needs_workload = opts.bounds || texts.is_none();
    let w = if needs_workload { Some(crate::workload::build(file, build)?) } else { None };
    let repetition = match (r.unit, texts) {
        (Unit::Chars, Some(t)) => {
            let t = Texts::new(t);
            repetition(&t, r, |i, l| t.describe(i, l, SHOWN_CHARS))
        }
        (Unit::Tokens, Some(t)) => {
            let ids = Tokenizer::new(&build.tokenizer)?.encode_batch(&t)?;
            drop(t);
            let mut store = TokenStore::new();
            let items: Vec<_> = ids
                .iter()
                .map(|s| {
                    store.begin_seq();
                    store.push_tokens(s);
                    (store.end_seq(), s.len())
                })
                .collect();
            let tok = Tokens { store: &store, items };
            repetition(&tok, r, |i, l| tok.describe(i, l, SHOWN_TOKENS, None))
        }
        (_, None) => {
            let w = w.as_ref().expect("built for token sequences");
            let tok = Tokens { store: &w.store, items: items::workload_tokens(w, r.scope) };
            repetition(&tok, r, |i, l| tok.describe(i, l, SHOWN_TOKENS, w.info.trace_block_size))
        }
    };
    let bounds = match (&w, opts.bounds) {
        (Some(w), true) => Some(bounds(w, opts.kv_bytes_per_token, tick)),
        _ => None,
    };
    Ok(Analysis { trace: w.map(|w| w.info), repetition, bounds, block_references })
}

#[cfg(test)]
mod tests {
    use super::*;
    use items::Texts;

    fn opts(min_count: usize, min_len: usize) -> RepetitionOptions {
        RepetitionOptions { min_count, min_len, unit: Unit::Chars, scope: Scope::Conversation }
    }

    /// Three requests: ids 1 2 3, then 1 2 4 4 (4 twice in one request), then 5 1: 9
    /// references, 5 distinct, 4 repeats; ids 1 and 2 are held by several requests, 4 by one.
    #[test]
    fn block_references_by_hand() {
        let jsonl = br#"{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}
{"timestamp": 1, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 4, 4]}
{"timestamp": 2, "input_length": 1024, "output_length": 1, "hash_ids": [5, 1]}
"#;
        let t = crate::trace::mooncake::parse(jsonl, false, &mut Default::default()).unwrap();
        let b = BlockReferences::count(&t);
        assert_eq!(b, BlockReferences { references: 9, distinct: 5, repeats: 4, shared: 2 });
        assert!((b.repeat_share() - 4.0 / 9.0).abs() < 1e-15);
        let empty = crate::trace::mooncake::parse(b"", false, &mut Default::default()).unwrap();
        assert_eq!(BlockReferences::count(&empty).repeat_share(), 0.0);
    }

    #[test]
    fn report_by_hand() {
        let t = Texts::new(
            ["You are a helpful bot. Q1", "You are a helpful bot. Q2", "You are a helpful bot. Q2!", "Other", "Oth"]
                .map(String::from)
                .to_vec(),
        );
        let r = repetition(&t, opts(2, 3), |i, l| t.describe(i, l, 80));
        // Leaves at N=2: "You are a helpful bot. Q2" (25 chars, 2 texts: the prefix "…Q2" is
        // shared by the 2nd and 3rd) and "Oth" (3 chars, not > 3, dropped).
        assert_eq!(r.leaves, 1);
        assert_eq!(r.top_prefixes[0], TopPrefix { count: 2, length: 25, text: "You are a helpful bot. Q2".into() });
        assert!((r.repetition - 0.2).abs() < 1e-12);
        assert!((r.coverage - 0.4).abs() < 1e-12);
        let r = repetition(&t, opts(3, 3), |i, l| t.describe(i, l, 80));
        assert_eq!((r.leaves, r.max_prefix_len), (1, 24));
        assert_eq!(r.median_prefix_len, 24.0);
    }

    #[test]
    fn escaping_and_empty_sets() {
        let t = Texts::new(vec!["a\nb\"c".into(), "a\nb\"c".into()]);
        let r = repetition(&t, opts(2, 0), |i, l| t.describe(i, l, 80));
        assert_eq!(r.top_prefixes[0].text, "a\\nb\\\"c");
        let empty = Texts::new(vec![]);
        let r = repetition(&empty, opts(2, 0), |_, _| String::new());
        assert_eq!((r.conversations, r.leaves, r.repetition), (0, 0, 0.0));
    }

    #[test]
    fn numpy_median() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3]), 3.0);
        assert_eq!(median(&[1, 2, 4, 9]), 3.0);
    }
}
