//! Replays of the real traces in the shared data folder, checked against independent counts.
//! Skipped (with a printed reason) when the data is absent, unless CACHESIM_REQUIRE_DATA=1.

use crate::common;

use cachesim::cache::{CacheSpec, Policy};
use cachesim::replay::{replay, replay_all, ReplayOptions};
use cachesim::trace::{self, ReadOptions, Records};
use cachesim::workload::{build, BuildOptions, Turns};
use std::collections::HashMap;

fn spec(policy: Policy, block: u32) -> CacheSpec {
    CacheSpec {
        policy,
        block_size: Some(block),
        page_size: Some(1),
        capacity_tokens: None,
        hybrid: None,
        sglang_pool: None,
    }
}

/// vLLM's rules applied to Mooncake hash ids directly: a request may hit the leading full
/// 512-token blocks of its first `input − 1` tokens whose whole chain of ids was a full prompt
/// block of an earlier request (blocks that mix prompt and output are unique to a request).
fn independent_mooncake_hits(t: &trace::mooncake::MooncakeTrace) -> (u64, u64) {
    let mut order: Vec<&trace::mooncake::MooncakeRecord> = t.records.iter().collect();
    order.sort_by(|a, b| a.timestamp_ms.partial_cmp(&b.timestamp_ms).unwrap());
    let mut trie: HashMap<(u32, u32), u32> = HashMap::new();
    let (mut hits, mut prompt) = (0u64, 0u64);
    for r in order {
        let input = r.input_length as usize;
        prompt += input as u64;
        let mut parent = 0u32;
        for &h in &t.ids(r)[..(input - 1) / 512] {
            match trie.get(&(parent, h)) {
                Some(&id) => {
                    hits += 512;
                    parent = id;
                }
                None => break,
            }
        }
        let mut parent = 0u32;
        for &h in &t.ids(r)[..input / 512] {
            let next = trie.len() as u32 + 1;
            parent = *trie.entry((parent, h)).or_insert(next);
        }
    }
    (hits, prompt)
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn mooncake_paged_512_matches_an_independent_count() {
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/mooncake/conversation_trace.jsonl");
    let file = trace::read(&path, &ReadOptions::default()).unwrap();
    let Records::Mooncake(recs) = &file.records else { panic!("not detected as Mooncake") };
    let (want_hits, want_prompt) = independent_mooncake_hits(recs);
    let w = build(file, &BuildOptions::default()).unwrap();
    assert_eq!(w.requests.len(), 12_031);
    let r = replay(&w, spec(Policy::Paged, 512), ReplayOptions::default(), &|| ());
    assert_eq!(r.prompt_tokens, want_prompt);
    assert_eq!(r.hit_tokens, want_hits);
    assert!(want_hits > 0);
    // Finer blocks and the radix tree can only find more.
    let finer = replay_all(&w, &[spec(Policy::Paged, 16), spec(Policy::Radix, 16)], ReplayOptions::default(), &|| ());
    assert!(finer[0].hit_tokens >= want_hits && finer[1].hit_tokens >= finer[0].hit_tokens);
}

/// The Mooncake conversation trace's block statistics as NVIDIA Dynamo publishes them
/// (ai-dynamo/dynamo `recipes/qwen3-32b/README.md`, commit 5324137f: "Of 182,790 unique blocks,
/// 44,144 appeared in more than one request"; "cache efficiency 36.64 %: of 288,500 total block
/// references, 105,710 were repeats (reusable with infinite cache)"), reproduced by
/// `cachesim analyze`'s block references, and bounded by the token-weighted unlimited replay.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn mooncake_block_references_reproduce_dynamos_published_counts() {
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/mooncake/conversation_trace.jsonl");
    let file = trace::read(&path, &ReadOptions::default()).unwrap();
    let Records::Mooncake(recs) = &file.records else { panic!("not detected as Mooncake") };
    let b = cachesim::analyze::BlockReferences::count(recs);
    assert_eq!((b.references, b.distinct, b.repeats, b.shared), (288_500, 182_790, 105_710, 44_144));
    assert_eq!(format!("{:.2}", b.repeat_share() * 100.0), "36.64");
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sharegpt_multi_turn_ordering_of_policies() {
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    let w = cachesim::load_workload(Some(&path), &ReadOptions::default(), &BuildOptions::default()).unwrap();
    assert_eq!(w.info.records, 17_671);
    assert!(w.info.sessions > 13_000, "{}", w.info.sessions);
    let specs = [spec(Policy::Radix, 1), spec(Policy::Paged, 16), spec(Policy::Paged, 32), spec(Policy::None, 1)];
    let r = replay_all(&w, &specs, ReplayOptions::default(), &|| ());
    let hits: Vec<u64> = r.iter().map(|x| x.hit_tokens).collect();
    assert!(hits[0] >= hits[1] && hits[1] >= hits[2] && hits[2] > hits[3] && hits[3] == 0, "{hits:?}");
    // Multi-turn reuse of earlier replies is real: most prompt tokens are hits.
    assert!(r[0].hit_ratio > 0.5, "{}", r[0].hit_ratio);
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sharegpt_array_cut_mid_record() {
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/sharegpt/ShareGPT_V3_filtered_1000.json");
    let bytes = std::fs::read(&path).unwrap();
    let opts = BuildOptions { turns: Turns::First, ..BuildOptions::default() };
    let opts_again = opts.clone();
    let whole = trace::read(&path, &ReadOptions::default()).unwrap();
    let Records::Sharegpt(convs) = &whole.records else { panic!("not ShareGPT") };
    let convs = convs.clone();
    assert_eq!(convs.len(), 1000);
    // This subset holds first human turns only: requests need a fixed output length.
    assert!(build(whole, &opts).is_err());
    let fixed = BuildOptions { sharegpt_output_len: Some(128), ..opts_again };
    let w = cachesim::load_workload(Some(&path), &ReadOptions::default(), &fixed).unwrap();
    assert_eq!(w.requests.len(), 1000);
    assert!(w.requests.iter().all(|r| r.output_len == 128));
    // Cut the array in the middle of a record, as the packaged full file is cut.
    let cut = &bytes[..bytes.len() / 2];
    let dir = tempfile::tempdir().unwrap();
    let cut_path = dir.path().join("cut.json");
    std::fs::write(&cut_path, cut).unwrap();
    let err = trace::read(&cut_path, &ReadOptions::default()).unwrap_err().to_string();
    assert!(err.contains("cut.json") && err.contains("byte offset") && err.contains("cut off"), "{err}");
    let lenient = trace::read(&cut_path, &ReadOptions { lenient: true, ..Default::default() }).unwrap();
    let Records::Sharegpt(kept) = &lenient.records else { panic!("not ShareGPT") };
    assert!(kept.len() > 400 && kept.len() < 600, "{}", kept.len());
    assert_eq!(&kept[..], &convs[..kept.len()]);
    assert_eq!(lenient.skipped.total(), 1);
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn azure_prompts_never_share() {
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv");
    let w = cachesim::load_workload(Some(&path), &ReadOptions::default(), &BuildOptions::default()).unwrap();
    assert_eq!(w.requests.len(), 19_366);
    let specs = [spec(Policy::Paged, 16), spec(Policy::Radix, 1), spec(Policy::Token, 1)];
    for r in replay_all(&w, &specs, ReplayOptions::default(), &|| ()) {
        assert_eq!(r.hit_tokens, 0, "{}", r.policy);
    }
    assert!(w.requests.windows(2).all(|p| p[0].arrival_ms <= p[1].arrival_ms));
}

/// An independent count of pruned leaves: recursive MSD partitioning of the sequences by the
/// symbol after their common prefix (no sorting, no LCP array). Returns sorted (len, count).
fn msd_pruned_leaves(seqs: &[Vec<u32>], n: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if seqs.len() < n {
        return out;
    }
    let mut work: Vec<(Vec<usize>, usize)> = vec![((0..seqs.len()).collect(), 0)];
    while let Some((group, mut depth)) = work.pop() {
        let parts = loop {
            let mut parts: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            let mut ended = 0;
            for &i in &group {
                match seqs[i].get(depth) {
                    Some(&c) => parts.entry(c).or_default().push(i),
                    None => ended += 1,
                }
            }
            if ended == 0 && parts.len() == 1 {
                depth += 1; // everyone agrees on the next symbol: same node, deeper
                continue;
            }
            break parts;
        };
        if parts.values().all(|p| p.len() < n) {
            out.push((depth, group.len()));
        } else {
            work.extend(parts.into_values().filter(|p| p.len() >= n).map(|p| (p, depth + 1)));
        }
    }
    out.sort();
    out
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sharegpt_repetition_agrees_with_an_independent_count() {
    use cachesim::analyze::items::{texts, Texts};
    use cachesim::analyze::Scope;
    use cachesim::workload::prefix_trie::pruned_leaves;
    let Some(data) = common::data_dir() else { return };
    let path = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    let file = trace::read(&path, &ReadOptions::default()).unwrap();
    for scope in [Scope::FirstTurn, Scope::Conversation] {
        let t = texts(&file.records, scope).unwrap();
        let points: Vec<Vec<u32>> = t.iter().map(|s| s.chars().map(|c| c as u32).collect()).collect();
        let items = Texts::new(t);
        for n in [2, 3, 5] {
            let mut fast: Vec<(usize, usize)> = pruned_leaves(&items, n).iter().map(|l| (l.len, l.count)).collect();
            fast.sort();
            let slow = msd_pruned_leaves(&points, n);
            assert_eq!(fast, slow, "{scope:?} N={n}");
            for l in [0, 120, 1000] {
                let kept = |v: &[(usize, usize)]| v.iter().filter(|x| x.0 > l).count();
                assert_eq!(kept(&fast), kept(&slow));
            }
            assert!(!fast.is_empty());
        }
    }
}
