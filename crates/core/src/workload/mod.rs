//! Trace records → a [`Workload`]: requests (prompt and output lengths, arrival, session) over
//! one shared [`TokenStore`]. Text is tokenized once, in parallel; a conversation's turns are
//! prefixes of one sequence; Mooncake blocks and length-only prompts become runs, never
//! materialised. The id space: real tokens below [`RESERVED_TOKEN_BASE`], synthetic runs above
//! it, chat-template markers at the very top.

pub mod arrivals;
pub mod block_ids;
pub mod client;
pub mod gen;
pub mod lora;
pub mod prefix_trie;
pub mod priority;
pub mod pyrand;
pub mod tokens;

use crate::error::{Error, Location, RecordError, Result};
use crate::tokenize::{Tokenizer, TokenizerKind};
use crate::trace::native::{Content, NativeRecord};
use crate::trace::sharegpt::{Conversation, Role};
use crate::trace::{Format, LengthRecord, Records, Skipped, TraceFile};
pub use block_ids::BlockIds;
pub use client::{ClientSample, DatasetFilter};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
pub use tokens::{Chunk, PrefixOrder, SeqId, Token, TokenStore};

/// Token ids at or above this value are synthetic (runs) or template markers (defined with
/// the trace readers, which refuse such ids in a trace).
pub use crate::trace::RESERVED_TOKEN_BASE;
/// First template marker id; markers are `MARKER_BASE + k`.
pub const MARKER_BASE: u32 = 0xFFFF_FF00;
/// Longest sequence (a conversation or session with all its turns), in tokens.
pub const MAX_SEQ_TOKENS: usize = 1 << 31;
/// Marker closing every message of the chat template.
pub const MARK_END: u32 = MARKER_BASE + 3;

/// The chat template marker opening a message of `role`.
pub fn role_marker(role: Role) -> u32 {
    MARKER_BASE
        + match role {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
        }
}

/// How ShareGPT conversations become requests (`--turns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Turns {
    /// Every user turn that has a reply is a request; its prompt is the whole conversation
    /// so far (chat template applied) and its output is the reply.
    All,
    /// The benchmark clients' shape: prompt = first message, output = the second's length.
    First,
}

/// Options for turning records into requests.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub tokenizer: TokenizerKind,
    pub turns: Turns,
    /// Tokens per Mooncake `hash_ids` block.
    pub trace_block_size: u32,
    /// ShareGPT `--turns first`: a fixed output length instead of the reply's (the clients'
    /// `--sharegpt-output-len`); with filter `none`, records then need only a first message.
    pub sharegpt_output_len: Option<u32>,
    /// ShareGPT `--turns first`: whose length rules pick the sample ([`DatasetFilter`]).
    pub dataset_filter: DatasetFilter,
    /// SGLang's `--sharegpt-context-len` (filter `sglang` only).
    pub sharegpt_context_len: Option<u32>,
    pub lenient: bool,
    /// Whether a request the trace does not mark is sent with `ignore_eos`: the client's
    /// default — `sglang.bench_serving` sends `ignore_eos: true` unless `--disable-ignore-eos`,
    /// `vllm bench serve` sends it only with `--ignore-eos` (ENGINE_SPEC §7.4).
    pub ignore_eos: bool,
    /// `--priority-mix`: classes drawn for a trace without priorities.
    pub priority_mix: Option<priority::PriorityMix>,
    /// `--lora-modules`: the adapters requests may name, drawn for a trace without `lora` keys.
    pub lora: Option<lora::LoraDraw>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            tokenizer: TokenizerKind::Cl100k,
            turns: Turns::All,
            trace_block_size: 512,
            sharegpt_output_len: None,
            dataset_filter: DatasetFilter::None,
            sharegpt_context_len: None,
            lenient: false,
            ignore_eos: true,
            priority_mix: None,
            lora: None,
        }
    }
}

/// One request: a prefix of a sequence (`prompt_len + output_len` tokens).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Request {
    pub seq: SeqId,
    pub prompt_len: u32,
    pub output_len: u32,
    /// Arrival time from the trace, when it has one.
    pub arrival_ms: Option<f64>,
    /// Conversation / session index, for multi-turn traces.
    pub session: Option<u32>,
    /// Index of the same session's previous turn in [`Workload::requests`].
    pub prev_turn: Option<u32>,
    /// Sent with `ignore_eos` (the trace's `ignore_eos`, else the client's default,
    /// [`BuildOptions::ignore_eos`]). Every request still generates exactly `output_len`
    /// tokens; SGLang's admission reserves a running request's remaining outputs in full only
    /// when it is set (`PrefillAdder._get_running_request_total_token_offset`).
    #[serde(skip)]
    pub ignore_eos: bool,
    /// Its `priority` (the trace's, else `--priority-mix`'s draw; `None`: sent without one),
    /// read by vLLM's `--scheduling-policy priority` (`None` is 0 there), SGLang's
    /// `--enable-priority-scheduling` (`None` is the least preferred value there) and the
    /// per-class report ([`Request::class`]).
    #[serde(skip)]
    pub priority: Option<i32>,
    /// The LoRA adapter it names: 0 for the base model, else `k` for the `k`-th of
    /// [`TraceInfo::adapters`] (vLLM's `lora_int_id`; [`lora`]). Its sequence's first token
    /// carries the adapter, so no cache shares a block across adapters.
    #[serde(skip)]
    pub lora: u16,
}

impl Request {
    /// Its class in the per-class report: its priority, 0 when sent without one.
    pub fn class(&self) -> i32 {
        self.priority.unwrap_or(0)
    }

    /// Tokens whose KV exists once the request finishes: prompt + output − 1 (the last sampled
    /// token is never fed back).
    pub fn final_kv_tokens(&self) -> usize {
        self.prompt_len as usize + (self.output_len as usize).saturating_sub(1)
    }
}

/// What the workload was built from; echoed in reports.
#[derive(Debug, Clone, Serialize)]
pub struct TraceInfo {
    pub path: PathBuf,
    pub format: Format,
    /// Tokenizer used for text, if the trace had text.
    pub tokenizer: Option<String>,
    pub turns: Option<Turns>,
    pub trace_block_size: Option<u32>,
    pub records: usize,
    pub requests: usize,
    pub sessions: usize,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Tokens materialised in memory (the rest are runs).
    pub stored_tokens: u64,
    /// The LoRA adapters requests may name (`--lora-modules`; [`Request::lora`] `k` is the
    /// `k`-th); empty without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<String>,
    pub skipped: Skipped,
    pub notes: Vec<String>,
}

/// Requests in arrival order over a shared token store.
#[derive(Debug, Clone)]
pub struct Workload {
    pub store: Arc<TokenStore>,
    pub requests: Vec<Request>,
    pub info: TraceInfo,
    /// ShareGPT sampled by a client's rules: each request's place in the client's shuffled
    /// population (`--num-prompts` then replays the client's seeded shuffle).
    pub sample: Option<ClientSample>,
}

impl Workload {
    /// Whether every request has its own send time (a timed trace): without a request rate, the
    /// client then sends at those times, else everything at once.
    pub fn timed(&self) -> bool {
        self.requests.iter().all(|r| r.arrival_ms.is_some())
    }
}

/// Hands out fresh synthetic token ids (runs never seen elsewhere).
struct Synthetic {
    next: u64,
}

impl Synthetic {
    fn take(&mut self, len: u32) -> Result<u32> {
        let base = self.next;
        self.next += len as u64;
        if self.next >= MARKER_BASE as u64 {
            return Err(Error::invalid("trace", "too many synthetic tokens for the 32-bit id space"));
        }
        Ok(base as u32)
    }
}

struct Builder {
    store: TokenStore,
    requests: Vec<Request>,
    synthetic: Synthetic,
    sessions: usize,
    /// Final user messages without a reply (part of no request).
    unanswered_turns: usize,
    sample: Option<ClientSample>,
    /// The adapters a trace's `lora` keys name, in first-use order, when no `--lora-modules`
    /// list them.
    adapters: Vec<String>,
}

impl Builder {
    fn new(first_synthetic: u64) -> Self {
        Self {
            store: TokenStore::new(),
            requests: Vec::new(),
            synthetic: Synthetic { next: first_synthetic },
            sessions: 0,
            unanswered_turns: 0,
            sample: None,
            adapters: Vec::new(),
        }
    }

    fn request(
        &mut self,
        seq: SeqId,
        prompt_len: usize,
        output_len: usize,
        arrival_ms: Option<f64>,
        session: Option<u32>,
    ) {
        self.requests.push(Request {
            seq,
            prompt_len: prompt_len as u32,
            output_len: output_len as u32,
            arrival_ms,
            session,
            prev_turn: None,
            ignore_eos: true,
            priority: None,
            lora: 0,
        });
    }
}

/// Builds the workload of a trace file.
pub fn build(trace: TraceFile, opts: &BuildOptions) -> Result<Workload> {
    build_from(&trace, opts, &mut TokenMemo::default())
}

/// ShareGPT messages already tokenised, by tokenizer and turns, so that one trace file built
/// under several options (the two clients' length filters, fixed output lengths) is tokenised
/// once: kept by the caller beside the file it was made from ([`build_from`]).
#[derive(Default)]
pub struct TokenMemo {
    entries: Vec<((TokenizerKind, Turns), Arc<Tokenized>)>,
}

/// Per conversation, per message read, its tokens.
type Tokenized = Vec<Vec<Vec<u32>>>;

/// [`build`] from a borrowed trace file, reusing (and adding to) `memo`'s tokenised messages of
/// that same file.
pub fn build_from(trace: &TraceFile, opts: &BuildOptions, memo: &mut TokenMemo) -> Result<Workload> {
    let mut skipped = trace.skipped.clone();
    let mut notes = Vec::new();
    let mut info_tok = None;
    let mut info_turns = None;
    let mut info_block = None;
    let path = trace.path.clone();
    let record_err = |error| Error::Record { path: path.clone(), error };
    let (records, mut b) = match &trace.records {
        Records::Sharegpt(convs) => {
            check_sample_options(opts)?;
            let tok = Tokenizer::new(&opts.tokenizer)?;
            info_tok = Some(tok.kind().to_string());
            info_turns = Some(opts.turns);
            if opts.turns == Turns::All {
                notes.push("multi-turn: each user turn's prompt is the conversation so far (chat template markers between messages)".into());
            } else if opts.dataset_filter != DatasetFilter::None {
                notes.push(format!(
                    "sampled as {} samples ShareGPT: first message → first reply, length rules, seeded shuffle",
                    match opts.dataset_filter {
                        DatasetFilter::Vllm => "vllm bench serve",
                        _ => "sglang.bench_serving",
                    }
                ));
            }
            let key = (opts.tokenizer.clone(), opts.turns);
            let tokenized = match memo.entries.iter().find(|(k, _)| *k == key) {
                Some((_, t)) => t.clone(),
                None => {
                    let t = Arc::new(tokenize_sharegpt(convs, &tok, opts.turns)?);
                    memo.entries.push((key, t.clone()));
                    t
                }
            };
            (convs.len(), build_sharegpt(convs, &tokenized, opts, &mut skipped)?)
        }
        Records::Mooncake(recs) => {
            info_block = Some(opts.trace_block_size);
            let n = recs.records.len();
            (n, build_mooncake(recs, opts, &mut skipped).map_err(record_err)?)
        }
        Records::Lengths(recs) => {
            notes.push("lengths only: prompts are unique tokens (no sharing)".into());
            (recs.len(), build_lengths(recs, &mut skipped)?)
        }
        Records::Native(recs) => {
            let has_text =
                recs.iter().any(|r| matches!(r.prompt, Content::Text(_)) || matches!(r.output, Some(Content::Text(_))));
            let tok = if has_text { Some(Tokenizer::new(&opts.tokenizer)?) } else { None };
            info_tok = tok.as_ref().map(|t| t.kind().to_string());
            (recs.len(), build_native(recs, tok.as_ref(), opts, &mut skipped).map_err(record_err)?)
        }
    };
    if !opts.ignore_eos && !matches!(trace.format, Format::Native) {
        // Records of other formats never say: each is sent as the client does by default.
        for r in &mut b.requests {
            r.ignore_eos = false;
        }
    }
    order_and_link(&mut b.requests);
    if let Some(mix) = &opts.priority_mix {
        if let Records::Native(recs) = &trace.records {
            if let Some(r) = recs.iter().find(|r| r.priority.is_some()) {
                return Err(record_err(crate::error::RecordError {
                    location: crate::error::Location::Line(r.line),
                    field: "priority".into(),
                    message: "the trace gives its requests priorities; --priority-mix would draw over them (drop one)"
                        .into(),
                }));
            }
        }
        mix.assign(&mut b.requests);
        let shares: Vec<String> = mix.shares.iter().map(|(p, s)| format!("{p} ({:.0} %)", s * 100.0)).collect();
        notes.push(format!("priorities drawn by --priority-mix, one per conversation: {}", shares.join(", ")));
    }
    let adapters = match &opts.lora {
        Some(draw) if !draw.modules.is_empty() => {
            if b.requests.iter().all(|r| r.lora == 0) {
                draw.assign(&mut b.requests);
                notes.push(format!(
                    "LoRA adapters drawn over --lora-modules ({}), {} per request",
                    draw.modules.join(", "),
                    match draw.assignment {
                        lora::Assignment::Random => "one at random",
                        lora::Assignment::RoundRobin => "round robin",
                    }
                ));
            }
            draw.modules.clone()
        }
        _ => std::mem::take(&mut b.adapters),
    };
    lora::separate(&mut b.store, &mut b.requests, &mut b.synthetic)?;
    if b.unanswered_turns > 0 {
        notes.push(format!(
            "{} conversations end with a user message that has no reply: not a request",
            b.unanswered_turns
        ));
    }
    if b.requests.is_empty() {
        let mut detail = String::new();
        if skipped.total() > 0 {
            let reasons: Vec<String> = skipped.reasons.iter().map(|(r, n)| format!("{n} × {r}")).collect();
            detail = format!(" ({} records skipped: {})", skipped.total(), reasons.join("; "));
        }
        if matches!(trace.format, Format::Sharegpt) {
            detail.push_str(&sharegpt_way_out(opts));
        }
        return Err(Error::EmptyTrace { path: trace.path.clone(), detail });
    }
    let info = TraceInfo {
        path: trace.path.clone(),
        format: trace.format,
        tokenizer: info_tok,
        turns: info_turns,
        trace_block_size: info_block,
        records,
        requests: b.requests.len(),
        sessions: b.sessions,
        prompt_tokens: b.requests.iter().map(|r| r.prompt_len as u64).sum(),
        output_tokens: b.requests.iter().map(|r| r.output_len as u64).sum(),
        stored_tokens: b.store.stored_tokens() as u64,
        adapters,
        skipped,
        notes,
    };
    Ok(Workload { store: Arc::new(b.store), requests: b.requests, info, sample: b.sample })
}

/// The flags that would make requests of a ShareGPT trace that gave none, never one already
/// given: under a client's filter (`--dataset-filter vllm|sglang`, whose length rules and
/// two-message rule dropped the prompts) `--dataset-filter none`; else a fixed output length
/// for prompts without a reply (`--turns first --sharegpt-output-len N`, less what is given).
fn sharegpt_way_out(opts: &BuildOptions) -> String {
    if opts.dataset_filter != DatasetFilter::None {
        let fixed = if opts.sharegpt_output_len.is_none() {
            " (with --sharegpt-output-len N, prompts without a recorded reply too)"
        } else {
            ""
        };
        return format!(
            "; the {} client's sampling rules dropped them: --dataset-filter none keeps every prompt{fixed}",
            opts.dataset_filter.name()
        );
    }
    let flags = match (opts.turns, opts.sharegpt_output_len) {
        (_, Some(_)) => return String::new(),
        (Turns::First, None) => "--sharegpt-output-len N",
        (Turns::All, None) => "--turns first --sharegpt-output-len N",
    };
    format!("; prompts without a recorded reply can be replayed with a fixed output length: {flags}")
}

/// The client sampling options fit together (ShareGPT only).
fn check_sample_options(opts: &BuildOptions) -> Result<()> {
    let filter = opts.dataset_filter;
    if opts.turns == Turns::All && filter != DatasetFilter::None {
        return Err(Error::invalid(
            "--dataset-filter",
            format!("{} applies to the clients' shape, --turns first (multi-turn replay has no client)", filter.name()),
        ));
    }
    if opts.sharegpt_context_len.is_some() && filter != DatasetFilter::Sglang {
        return Err(Error::invalid("--sharegpt-context-len", "is sglang.bench_serving's: use --dataset-filter sglang"));
    }
    if filter == DatasetFilter::Sglang && opts.sharegpt_output_len.is_some_and(|n| n < 4) {
        return Err(Error::invalid(
            "--sharegpt-output-len",
            "sglang.bench_serving refuses fixed output lengths under 4 (\"output_len too small\")",
        ));
    }
    Ok(())
}

/// Stable sort by arrival (when every request has one), then link each turn to the previous
/// turn of its session.
fn order_and_link(requests: &mut [Request]) {
    if requests.iter().all(|r| r.arrival_ms.is_some()) {
        requests.sort_by(|a, b| a.arrival_ms.partial_cmp(&b.arrival_ms).expect("arrivals are finite"));
    }
    let mut last: HashMap<u32, u32> = HashMap::new();
    for (i, r) in requests.iter_mut().enumerate() {
        if let Some(s) = r.session {
            r.prev_turn = last.insert(s, i as u32);
        }
    }
}

/// Every message `turns` reads of every conversation, tokenised in parallel, conversation by
/// conversation.
fn tokenize_sharegpt(convs: &[Conversation], tok: &Tokenizer, turns: Turns) -> Result<Tokenized> {
    convs
        .par_iter()
        .map(|c| {
            let msgs = match turns {
                Turns::All => &c.conversations[..],
                Turns::First => &c.conversations[..c.conversations.len().min(2)],
            };
            msgs.iter().map(|m| tok.encode(&m.text)).collect::<Result<Vec<_>>>()
        })
        .collect()
}

fn build_sharegpt(
    convs: &[Conversation],
    tokenized: &[Vec<Vec<u32>>],
    opts: &BuildOptions,
    skipped: &mut Skipped,
) -> Result<Builder> {
    let turns = opts.turns;
    let mut b = Builder::new(RESERVED_TOKEN_BASE as u64);
    for (c, toks) in convs.iter().zip(tokenized) {
        match turns {
            Turns::First => {
                let fixed = opts.sharegpt_output_len;
                let filter = opts.dataset_filter;
                // The clients' population: records with two or more messages.
                let slot = if filter == DatasetFilter::None {
                    0
                } else {
                    let sample = b.sample.get_or_insert_with(|| ClientSample {
                        oversample: filter == DatasetFilter::Vllm,
                        ..ClientSample::default()
                    });
                    if toks.len() < 2 {
                        skipped.add_reason("fewer than 2 messages");
                        continue;
                    }
                    sample.population += 1;
                    sample.population - 1
                };
                if toks.len() < 2 - fixed.is_some() as usize {
                    skipped.add_reason("fewer than 2 messages");
                    continue;
                }
                let output_len = fixed.map_or_else(|| toks[1].len(), |n| n as usize);
                if let Some(reason) =
                    filter.reject(toks[0].len(), output_len, fixed.is_some(), opts.sharegpt_context_len)
                {
                    skipped.add_reason(reason);
                    continue;
                }
                if let Some(sample) = b.sample.as_mut() {
                    sample.slots.push(slot);
                }
                b.store.begin_seq();
                b.store.push_tokens(&toks[0]);
                match fixed {
                    Some(n) => {
                        let base = b.synthetic.take(n)?;
                        b.store.push_run(base, n);
                    }
                    None => b.store.push_tokens(&toks[1]),
                }
                let seq = b.store.end_seq();
                b.request(seq, toks[0].len(), output_len, None, None);
            }
            Turns::All => {
                let session = b.sessions as u32;
                let before = b.requests.len();
                b.store.begin_seq();
                let mut prev_user = false;
                for (m, t) in c.conversations.iter().zip(toks) {
                    b.store.push_tokens(&[role_marker(m.role)]);
                    let start = b.store.open_len();
                    b.store.push_tokens(t);
                    b.store.push_tokens(&[MARK_END]);
                    if m.role == Role::Assistant && prev_user {
                        // Output = the reply (at least the end marker, as a model emits EOS).
                        b.requests.push(Request {
                            seq: u32::MAX, // patched below
                            prompt_len: start as u32,
                            output_len: t.len().max(1) as u32,
                            arrival_ms: None,
                            session: Some(session),
                            prev_turn: None,
                            ignore_eos: true,
                            priority: None,
                            lora: 0,
                        });
                    }
                    prev_user = m.role == Role::User;
                }
                let seq = b.store.end_seq();
                if b.requests.len() == before {
                    skipped.add_reason("no user turn with a reply");
                    continue;
                }
                for r in &mut b.requests[before..] {
                    r.seq = seq;
                }
                if c.conversations.last().map(|m| m.role) == Some(Role::User) {
                    b.unanswered_turns += 1;
                }
                b.sessions += 1;
            }
        }
    }
    Ok(b)
}

fn build_mooncake(
    trace: &crate::trace::mooncake::MooncakeTrace,
    opts: &BuildOptions,
    skipped: &mut Skipped,
) -> std::result::Result<Builder, RecordError> {
    let bs = opts.trace_block_size as u64;
    let max_id = trace.hash_ids.iter().copied().max().unwrap_or(0) as u64;
    let region = (max_id + 1).checked_mul(bs).filter(|&r| RESERVED_TOKEN_BASE as u64 + r < MARKER_BASE as u64 / 2);
    let Some(region) = region else {
        return Err(RecordError {
            location: Location::Line(0),
            field: "hash_ids".into(),
            message: format!("hash id {max_id} × block {bs} does not fit cachesim's 32-bit token ids"),
        });
    };
    let mut b = Builder::new(RESERVED_TOKEN_BASE as u64 + region);
    // At most a segment per hash id and one for the output, per record.
    b.store.reserve(trace.records.len(), trace.hash_ids.len() + trace.records.len());
    b.requests.reserve(trace.records.len());
    for r in &trace.records {
        let hash_ids = trace.ids(r);
        let n = hash_ids.len() as u64;
        let want = (r.input_length as u64).div_ceil(bs);
        if n != want {
            let err = RecordError {
                location: Location::Line(r.line),
                field: "hash_ids".into(),
                message: format!(
                    "{n} block ids, but input_length {} needs ceil({}/{bs}) = {want} (check --trace-block-size)",
                    r.input_length, r.input_length
                ),
            };
            crate::trace::json::handle_bad(err, opts.lenient, skipped)?;
            continue;
        }
        b.store.begin_seq();
        // Consecutive hash ids are consecutive token runs: one push per stretch of them.
        let mut left = r.input_length as u64;
        for stretch in hash_ids.chunk_by(|&a, &b| b as u64 == a as u64 + 1) {
            let len = left.min(stretch.len() as u64 * bs);
            b.store.push_run(RESERVED_TOKEN_BASE + (stretch[0] as u64 * bs) as u32, len as u32);
            left -= len;
        }
        let out = b.synthetic.take(r.output_length).map_err(|e| RecordError {
            location: Location::Line(r.line),
            field: "output_length".into(),
            message: e.to_string(),
        })?;
        b.store.push_run(out, r.output_length);
        let seq = b.store.end_seq();
        b.request(seq, r.input_length as usize, r.output_length as usize, Some(r.timestamp_ms), None);
    }
    Ok(b)
}

fn build_lengths(recs: &[LengthRecord], skipped: &mut Skipped) -> Result<Builder> {
    let mut b = Builder::new(RESERVED_TOKEN_BASE as u64);
    for r in recs {
        if r.input_tokens == 0 {
            skipped.add_reason("empty prompt (0 tokens)");
            continue;
        }
        b.store.begin_seq();
        let p = b.synthetic.take(r.input_tokens)?;
        b.store.push_run(p, r.input_tokens);
        let o = b.synthetic.take(r.output_tokens)?;
        b.store.push_run(o, r.output_tokens);
        let seq = b.store.end_seq();
        b.request(seq, r.input_tokens as usize, r.output_tokens as usize, Some(r.arrival_ms), None);
    }
    Ok(b)
}

fn build_native(
    recs: &[NativeRecord],
    tok: Option<&Tokenizer>,
    opts: &BuildOptions,
    skipped: &mut Skipped,
) -> std::result::Result<Builder, RecordError> {
    let lenient = opts.lenient;
    let bad = |line: u64, field: &str, message: String| RecordError {
        location: Location::Line(line),
        field: field.into(),
        message,
    };
    let with_time = recs.iter().filter(|r| r.timestamp_ms.is_some()).count();
    if with_time != 0 && with_time != recs.len() {
        let r = recs.iter().find(|r| r.timestamp_ms.is_none()).expect("one lacks a time");
        return Err(bad(r.line, "timestamp_ms", "missing, while other records have one (give all or none)".into()));
    }
    let encode = |line: u64, c: &Content| -> std::result::Result<Vec<u32>, RecordError> {
        match c {
            Content::Ids(ids) => Ok(ids.clone()),
            Content::Text(t) => {
                tok.expect("a tokenizer for text").encode(t).map_err(|e| bad(line, "prompt", e.to_string()))
            }
        }
    };
    let prompts: Vec<Vec<u32>> =
        recs.par_iter().map(|r| encode(r.line, &r.prompt)).collect::<std::result::Result<_, _>>()?;
    let outputs: Vec<Option<Vec<u32>>> = recs
        .par_iter()
        .map(|r| r.output.as_ref().map(|o| encode(r.line, o)).transpose())
        .collect::<std::result::Result<_, _>>()?;
    // Group records by session, keeping file order; records without a session stand alone.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (i, r) in recs.iter().enumerate() {
        match &r.session {
            Some(k) => {
                let g = *by_key.entry(k.as_str()).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push(i);
            }
            None => groups.push(vec![i]),
        }
    }
    let mut b = Builder::new(RESERVED_TOKEN_BASE as u64);
    for g in &groups {
        let session = recs[g[0]].session.as_ref().map(|_| b.sessions as u32);
        let mut last_time = f64::NEG_INFINITY;
        b.store.begin_seq();
        let first_req = b.requests.len();
        for &i in g {
            let r = &recs[i];
            if let Some(t) = r.timestamp_ms {
                if t < last_time {
                    let e = bad(r.line, "timestamp_ms", "earlier than the previous turn of its session".into());
                    crate::trace::json::handle_bad(e, lenient, skipped)?;
                    continue;
                }
                last_time = t;
            }
            if b.store.open_len() + prompts[i].len() + r.output_len.unwrap_or(0) as usize > MAX_SEQ_TOKENS {
                let e = bad(r.line, "session", format!("the session's history exceeds {MAX_SEQ_TOKENS} tokens"));
                crate::trace::json::handle_bad(e, lenient, skipped)?;
                continue;
            }
            b.store.push_tokens(&prompts[i]);
            let prompt_len = b.store.open_len();
            if prompt_len == 0 {
                skipped.add_reason("empty prompt");
                continue;
            }
            let output_len = match (&outputs[i], r.output_len) {
                (Some(o), None) => {
                    b.store.push_tokens(o);
                    o.len()
                }
                (Some(o), Some(n)) => {
                    // Text reply with an explicit length: the length wins; pad or cut.
                    let n = n as usize;
                    b.store.push_tokens(&o[..n.min(o.len())]);
                    if n > o.len() {
                        let base = b
                            .synthetic
                            .take((n - o.len()) as u32)
                            .map_err(|e| bad(r.line, "output_len", e.to_string()))?;
                        b.store.push_run(base, (n - o.len()) as u32);
                    }
                    n
                }
                (None, n) => {
                    let n = n.expect("checked by the reader");
                    let base = b.synthetic.take(n).map_err(|e| bad(r.line, "output_len", e.to_string()))?;
                    b.store.push_run(base, n);
                    n as usize
                }
            };
            b.request(0, prompt_len, output_len, r.timestamp_ms, session);
            if let Some(q) = b.requests.last_mut() {
                q.ignore_eos = r.ignore_eos.unwrap_or(opts.ignore_eos);
                q.priority = r.priority;
                if let Some(name) = &r.lora {
                    q.lora = match opts.lora.as_ref().filter(|d| !d.modules.is_empty()) {
                        Some(d) => d.id(name).ok_or_else(|| {
                            bad(
                                r.line,
                                "lora",
                                format!(
                                    "adapter `{name}` is not among --lora-modules (vLLM answers such a request 404: \
                                     The model `{name}` does not exist.)"
                                ),
                            )
                        })?,
                        // No list: the trace's names, in first-use order.
                        None => match b.adapters.iter().position(|a| a == name) {
                            Some(k) => k as u16 + 1,
                            None if b.adapters.len() < lora::MAX_ADAPTERS => {
                                b.adapters.push(name.clone());
                                b.adapters.len() as u16
                            }
                            None => return Err(bad(r.line, "lora", "more adapters than cachesim keeps apart".into())),
                        },
                    };
                }
            }
        }
        let seq = b.store.end_seq();
        for q in &mut b.requests[first_req..] {
            q.seq = seq;
        }
        if session.is_some() && b.requests.len() > first_req {
            b.sessions += 1;
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests;
