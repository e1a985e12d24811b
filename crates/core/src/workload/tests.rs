//! Workload building: chat template layout of multi-turn ShareGPT, Mooncake block expansion,
//! native sessions, length-only traces, ordering and errors.

use super::*;
use crate::trace::{self, ReadOptions};
use std::path::Path;

fn load(doc: &str, opts: &BuildOptions) -> Result<Workload> {
    let file =
        trace::parse(Path::new("t"), doc.as_bytes(), &ReadOptions { lenient: opts.lenient, ..Default::default() })?;
    build(file, opts)
}

fn chars4() -> BuildOptions {
    BuildOptions { tokenizer: TokenizerKind::Chars4, ..BuildOptions::default() }
}

fn tokens(w: &Workload, seq: SeqId, from: usize, to: usize) -> Vec<u32> {
    let mut v = Vec::new();
    w.store.fill(seq, from, to, &mut v);
    v
}

#[test]
fn sharegpt_turns_share_one_sequence_with_template_markers() {
    // chars4: "abcd" → 1 token, "abcdefgh" → 2 tokens.
    let doc = r#"{"id":"c","conversations":[{"from":"system","value":"ssss"},{"from":"human","value":"uuuu"},{"from":"gpt","value":"aaaabbbb"},{"from":"human","value":"vvvv"},{"from":"gpt","value":"cccc"},{"from":"human","value":"tail"}]}"#;
    let w = load(doc, &chars4()).unwrap();
    assert_eq!(w.requests.len(), 2);
    let (r1, r2) = (w.requests[0], w.requests[1]);
    assert_eq!(r1.seq, r2.seq);
    // [S] s [E] [U] u [E] [A] | a a | [E] [U] v [E] [A] | c | [E] [U] t [E]
    assert_eq!((r1.prompt_len, r1.output_len), (7, 2));
    assert_eq!((r2.prompt_len, r2.output_len), (14, 1));
    let t = tokens(&w, r1.seq, 0, 18);
    let (s, u, a, e) = (role_marker(Role::System), role_marker(Role::User), role_marker(Role::Assistant), MARK_END);
    assert_eq!(
        [t[0], t[2], t[3], t[5], t[6], t[9], t[10], t[12], t[13], t[15], t[16]],
        [s, e, u, e, a, e, u, e, a, e, u]
    );
    assert_eq!((r1.session, r2.session, r2.prev_turn), (Some(0), Some(0), Some(0)));
    assert_eq!(w.info.sessions, 1);
    assert!(w.info.notes.iter().any(|n| n.contains("1 conversations end with a user message")));
}

#[test]
fn sharegpt_first_turn_is_the_benchmark_shape() {
    let doc = r#"[{"conversations":[{"from":"human","value":"uuuuuuuu"},{"from":"gpt","value":"aaaa"},{"from":"human","value":"x"}]},{"conversations":[{"from":"human","value":"only"}]}]"#;
    let opts = BuildOptions { turns: Turns::First, ..chars4() };
    let w = load(doc, &opts).unwrap();
    assert_eq!(w.requests.len(), 1);
    assert_eq!((w.requests[0].prompt_len, w.requests[0].output_len), (2, 1));
    assert_eq!(w.info.skipped.reasons["fewer than 2 messages"], 1);
    // A fixed output length (the clients' --sharegpt-output-len) accepts single messages.
    let fixed = BuildOptions { sharegpt_output_len: Some(5), ..opts };
    let w = load(doc, &fixed).unwrap();
    assert_eq!(w.requests.iter().map(|r| (r.prompt_len, r.output_len)).collect::<Vec<_>>(), vec![(2, 5), (1, 5)]);
    assert!(w.store.token(w.requests[0].seq, 2) >= RESERVED_TOKEN_BASE);
}

#[test]
fn mooncake_blocks_expand_to_shared_runs() {
    let doc = "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [1, 2]}\n\
               {\"timestamp\": 0, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 3]}\n";
    let w = load(doc, &BuildOptions::default()).unwrap();
    // Sorted by arrival: the second line first.
    assert_eq!(w.requests[0].prompt_len, 600);
    let (a, b) = (w.requests[0].seq, w.requests[1].seq);
    assert_eq!(w.store.lcp((a, 0), (b, 0), 2000), 512);
    assert_eq!(w.store.seq_len(b), 703);
    assert_eq!(w.info.stored_tokens, 0);
    // Output tokens are unique.
    assert_eq!(w.store.lcp((a, 600), (b, 700), 10), 0);
    // Block size 256 reads the same ids as 256-token blocks.
    let small = BuildOptions { trace_block_size: 256, ..BuildOptions::default() };
    let e = load(doc, &small).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("hash_ids") && e.contains("ceil(700/256) = 3"), "{e}");
    let lenient = BuildOptions { lenient: true, ..small };
    let bad_block_doc =
        format!("{doc}{{\"timestamp\": 9, \"input_length\": 256, \"output_length\": 1, \"hash_ids\": [4]}}\n");
    let w = load(&bad_block_doc, &lenient).unwrap();
    assert_eq!(w.requests.len(), 1);
    assert_eq!(w.info.skipped.total(), 2);
}

#[test]
fn native_sessions_rebuild_history() {
    let doc = r#"{"session": "a", "prompt_ids": [1, 2, 3], "output_len": 2, "timestamp_ms": 0}
{"session": "b", "prompt_ids": [1, 2, 9], "output_len": 1, "timestamp_ms": 5}
{"session": "a", "prompt_ids": [7], "output_ids": [8, 8], "timestamp_ms": 10}
{"prompt_ids": [1, 2], "output_len": 4, "timestamp_ms": 1}"#;
    let w = load(doc, &BuildOptions::default()).unwrap();
    let lens: Vec<(u32, u32)> = w.requests.iter().map(|r| (r.prompt_len, r.output_len)).collect();
    assert_eq!(lens, vec![(3, 2), (2, 4), (3, 1), (6, 2)]);
    let (a1, a2) = (w.requests[0], w.requests[3]);
    assert_eq!(a1.seq, a2.seq);
    assert_eq!(a2.prev_turn, Some(0));
    let t = tokens(&w, a2.seq, 0, 8);
    assert_eq!(&t[..3], &[1, 2, 3]);
    assert!(t[3] >= RESERVED_TOKEN_BASE && t[4] == t[3] + 1); // synthetic output of turn 1
    assert_eq!(&t[5..], &[7, 8, 8]);
    assert_eq!(w.info.sessions, 2);
    assert_eq!(w.requests[1].session, None);
}

#[test]
fn native_time_rules() {
    let mixed = "{\"prompt\": \"x\", \"output_len\": 1, \"timestamp_ms\": 3}\n{\"prompt\": \"y\", \"output_len\": 1}\n";
    let e = load(mixed, &chars4()).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("timestamp_ms"), "{e}");
    let backwards = "{\"session\": 1, \"prompt\": \"x\", \"output_len\": 1, \"timestamp_ms\": 3}\n{\"session\": 1, \"prompt\": \"y\", \"output_len\": 1, \"timestamp_ms\": 2}\n";
    let e = load(backwards, &chars4()).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("earlier than the previous turn"), "{e}");
}

#[test]
fn length_only_prompts_never_share() {
    let doc = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,4\n2023-11-16 18:15:47.00,100,4\n";
    let w = load(doc, &BuildOptions::default()).unwrap();
    assert_eq!(w.requests.len(), 2);
    assert_eq!(w.store.lcp((w.requests[0].seq, 0), (w.requests[1].seq, 0), 100), 0);
    assert!((w.requests[1].arrival_ms.unwrap() - 320.0).abs() < 1e-6);
    assert!(w.info.notes.iter().any(|n| n.contains("no sharing")));
}

#[test]
fn empty_traces_are_errors() {
    let e = load("TIMESTAMP,ContextTokens,GeneratedTokens\n", &BuildOptions::default()).unwrap_err();
    assert!(matches!(e, Error::EmptyTrace { .. }), "{e}");
    let doc = r#"{"conversations":[{"from":"human","value":"no reply"}]}"#;
    let e = load(doc, &chars4()).unwrap_err().to_string();
    assert!(e.contains("no usable request") && e.contains("1 records skipped: 1 × no user turn with a reply"), "{e}");
    assert!(e.contains("--turns first --sharegpt-output-len N"), "the way out is named: {e}");
    // Given --turns first, the hint names only the flag still missing.
    let first = BuildOptions { turns: Turns::First, ..chars4() };
    let e = load(doc, &first).unwrap_err().to_string();
    assert!(e.ends_with("with a fixed output length: --sharegpt-output-len N"), "{e}");
    // Under a client's filter, which dropped the prompts, the flag that keeps them.
    let filtered =
        BuildOptions { dataset_filter: DatasetFilter::Sglang, sharegpt_output_len: Some(8), ..first.clone() };
    let e = load(doc, &filtered).unwrap_err().to_string();
    assert!(
        e.contains("the sglang client's sampling rules dropped them: --dataset-filter none keeps every prompt"),
        "{e}"
    );
    assert!(!e.contains("--sharegpt-output-len N"), "{e}");
    let short = r#"{"conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b"}]}"#;
    let vllm = BuildOptions { dataset_filter: DatasetFilter::Vllm, ..first };
    let e = load(short, &vllm).unwrap_err().to_string();
    assert!(e.contains("vllm filter: prompt under 4 tokens") && e.contains("--dataset-filter none"), "{e}");
}

#[test]
fn client_filters_record_each_kept_pair_in_the_population() {
    // chars4 lengths (prompt, reply): (1, 2) · one message · (3, 8) · (8, 2) · (4, 4).
    let doc = r#"[{"conversations":[{"from":"human","value":"u"},{"from":"gpt","value":"aaaabbbb"}]},
        {"conversations":[{"from":"human","value":"alone"}]},
        {"conversations":[{"from":"human","value":"uuuuuuuuuuuu"},{"from":"gpt","value":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]},
        {"conversations":[{"from":"human","value":"uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu"},{"from":"gpt","value":"aaaabbbb"}]},
        {"conversations":[{"from":"human","value":"uuuuuuuuuuuuuuuu"},{"from":"gpt","value":"aaaaaaaaaaaaaaaa"}]}]"#;
    let with = |f| BuildOptions { turns: Turns::First, dataset_filter: f, ..chars4() };
    let w = load(doc, &with(DatasetFilter::Vllm)).unwrap();
    let lens: Vec<(u32, u32)> = w.requests.iter().map(|r| (r.prompt_len, r.output_len)).collect();
    assert_eq!(lens, vec![(4, 4)]);
    let s = w.sample.as_ref().unwrap();
    assert_eq!((s.population, &s.slots[..], s.oversample), (4, &[3][..], true));
    let sk = &w.info.skipped.reasons;
    assert_eq!(
        (
            sk["fewer than 2 messages"],
            sk["vllm filter: prompt under 4 tokens"],
            sk["vllm filter: reply under 4 tokens"]
        ),
        (1, 2, 1)
    );
    let w = load(doc, &with(DatasetFilter::Sglang)).unwrap();
    assert_eq!(w.requests.len(), 3);
    let s = w.sample.as_ref().unwrap();
    assert_eq!((s.population, &s.slots[..], s.oversample), (4, &[1, 2, 3][..], false));
    assert_eq!(w.info.skipped.reasons["sglang filter: prompt under 2 tokens"], 1);
    // No client: no population, every non-empty pair in file order.
    let w = load(doc, &with(DatasetFilter::None)).unwrap();
    assert_eq!((w.requests.len(), w.sample.is_none()), (4, true));
}
