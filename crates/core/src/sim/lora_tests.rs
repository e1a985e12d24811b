//! Hand-computed scenarios of vLLM 0.33's LoRA serving (`engine::vllm_lora`) with the affine
//! step-time model (0.01 s a step, 1 ms a prefill token, 2 ms a decode; no LoRA kernels) and
//! 4-token blocks: the `--max-loras` batch rule passing a request of another adapter by while a
//! base-model request behind it is admitted, the synchronous loads of an adapter read from
//! storage and copied to a GPU slot, and no cached block shared across adapters.

use super::tests::{cfg, COST};
use super::*;
use crate::cost::lora::{LoraKernels, LoraShape};
use crate::engine::vllm_lora::LoraConfig;
use crate::trace::{self, ReadOptions};
use crate::workload::lora::{Assignment, LoraDraw};
use crate::workload::{build, BuildOptions};
use std::path::Path;

/// Requests (prompt ids, output length, adapter name) over adapters `a` and `b`.
fn workload(reqs: &[(Vec<u32>, u32, Option<&str>)]) -> Workload {
    let mut doc = String::new();
    for (ids, out, lora) in reqs {
        let mut v = serde_json::json!({"prompt_ids": ids, "output_len": out});
        if let Some(l) = lora {
            v["lora"] = serde_json::json!(l);
        }
        doc.push_str(&v.to_string());
        doc.push('\n');
    }
    let file = trace::parse(Path::new("t.jsonl"), doc.as_bytes(), &ReadOptions::default()).unwrap();
    let draw = LoraDraw { modules: vec!["a".into(), "b".into()], assignment: Assignment::Random, seed: 0 };
    build(file, &BuildOptions { lora: Some(draw), ..BuildOptions::default() }).unwrap()
}

/// `cfg` serving adapters `a` (1) and `b` (2) in `slots` GPU slots and `host` host places:
/// 0.1 s to read one, 0.05 s to copy one to a slot.
fn serving(slots: u32, host: u32) -> SimConfig {
    let mut c = cfg(16, 1000, Some(200));
    let m = crate::catalog::model("llama-3.1-8b", None).unwrap();
    c.engine.lora = Some(LoraConfig {
        adapters: 2,
        max_loras: slots,
        max_cpu_loras: host,
        max_lora_rank: 16,
        read_s: 0.1,
        copy_s: 0.05,
        slot_bytes_per_rank: 0,
        kernels: LoraKernels { shape: LoraShape::of(&m, 1).unwrap(), max_lora_rank: 16 },
    });
    c
}

fn rec(r: &SimResult, id: u32) -> RequestRecord {
    *r.records.iter().find(|x| x.id == id).expect("request completed")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A (adapter a, 2 outputs), B (adapter b), C (the base model), 8-token prompts, all at 0.
fn three() -> (Workload, Vec<(u32, f64)>) {
    let w = workload(&[
        ((0..8).collect(), 2, Some("a")),
        ((100..108).collect(), 1, Some("b")),
        ((200..208).collect(), 1, None),
    ]);
    (w, vec![(0, 0.0), (1, 0.0), (2, 0.0)])
}

#[test]
fn one_slot_passes_another_adapter_by_and_loads_each_in_turn() {
    let (w, sends) = three();
    // Start-up registers a then b: b stays in host memory and in the slot. Step 1 at 0: A
    // admitted (a recorded), B passed by (b is not, one is), C admitted (the base model). The
    // worker reads a (0.1 s, evicting b from host memory and its slot) and copies it (0.05 s):
    // 0.01 + 16 prefill tokens × 1 ms + 0.15 = 0.176. Step 2: A's decode, B still passed by:
    // 0.012, to 0.188, A done. Step 3: B admitted, b read and copied again: 0.01 + 0.008 + 0.15.
    let r = run(&w, &sends, &serving(1, 1), &COST, Keep::default());
    assert!(close(rec(&r, 0).ttft_s(), 0.176) && close(rec(&r, 2).ttft_s(), 0.176), "{:?}", r.records);
    assert!(close(rec(&r, 0).latency_s(), 0.188));
    assert!(close(rec(&r, 1).ttft_s(), 0.356), "{:?}", rec(&r, 1));
    let s = r.lora.expect("the loads");
    assert_eq!((s.reads, s.copies), (2, 2));
    assert!(close(s.load_s, 0.3));
}

#[test]
fn two_slots_take_both_adapters_in_one_batch_without_loads() {
    let (w, sends) = three();
    // Both adapters resident from start-up: one step of 24 prefill tokens, 0.034 s.
    let r = run(&w, &sends, &serving(2, 2), &COST, Keep::default());
    for id in 0..3 {
        assert!(close(rec(&r, id).ttft_s(), 0.034), "{:?}", rec(&r, id));
    }
    assert_eq!(r.lora.unwrap(), crate::engine::vllm_lora::LoraStats::default());
}

#[test]
fn adapters_share_no_cached_block() {
    // One 16-token prompt sent under a, then a again, then b, then the base model.
    let p: Vec<u32> = (0..16).collect();
    let w = workload(&[(p.clone(), 1, Some("a")), (p.clone(), 1, Some("a")), (p.clone(), 1, Some("b")), (p, 1, None)]);
    let sends = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)];
    let r = run(&w, &sends, &serving(2, 2), &COST, Keep::default());
    // The second a finds the first's 3 full blocks (the last token is computed again).
    let hits: Vec<u32> = (0..4).map(|id| rec(&r, id).cached_prompt_tokens).collect();
    assert_eq!(hits, vec![0, 12, 0, 0]);
}
