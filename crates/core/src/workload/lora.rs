//! LoRA adapters on requests. A request names an adapter — the trace's `lora` key (the name a
//! client sends as the request's `model`), or, for a trace without one, a draw over
//! `--lora-modules` as `vllm bench serve` makes it (`vllm/benchmarks/serve.py`, 0.33:
//! `--lora-assignment random`, one `random.choice` per request, the default; `round-robin`,
//! request `i` takes module `i mod n`). Adapter `k` of the list is id `k + 1`, 0 the base model
//! (vLLM's `lora_int_id`, handed out in the order the server registers `--lora-modules`).
//!
//! vLLM hashes a request's adapter into every block of its prompt
//! (`vllm/v1/core/kv_cache_utils.py` `_gen_lora_extra_hash_keys`), so no block is shared
//! across adapters or with the base model. The workload carries that in its tokens: a
//! sequence used under an adapter gets a first token of its own for that (adapter, first
//! token), fresh from the synthetic range, so every cache, router and analysis separates
//! adapters as vLLM's does, while requests of one adapter still share their common prefixes.
//! A sequence used under several (turns of one conversation sent with different adapters) is
//! copied once per adapter.

use super::{Request, Synthetic, TokenStore};
use crate::error::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::HashMap;

/// Most adapters one workload keeps apart (ids are 16 bits, 0 the base model).
pub const MAX_ADAPTERS: usize = u16::MAX as usize - 1;

/// `vllm bench serve --lora-assignment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Assignment {
    /// Each request draws an adapter at random (seeded by `--seed`).
    #[default]
    Random,
    /// Request `i` takes adapter `i mod n`, in send order.
    RoundRobin,
}

/// The adapters a workload's requests may name and how a trace without `lora` keys draws them.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraDraw {
    pub modules: Vec<String>,
    pub assignment: Assignment,
    pub seed: u64,
}

impl LoraDraw {
    /// The id of adapter `name`, if it is one of the modules.
    pub fn id(&self, name: &str) -> Option<u16> {
        self.modules.iter().position(|m| m == name).map(|k| k as u16 + 1)
    }

    /// Gives every request an adapter (requests in send order).
    pub fn assign(&self, requests: &mut [Request]) {
        let n = self.modules.len();
        if n == 0 {
            return;
        }
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x6c6f_7261_6c6f_7261);
        for (i, r) in requests.iter_mut().enumerate() {
            let k = match self.assignment {
                Assignment::Random => rng.random_range(0..n),
                Assignment::RoundRobin => i % n,
            };
            r.lora = k as u16 + 1;
        }
    }
}

/// Gives each sequence used under an adapter its adapter's first token (see the module).
pub(super) fn separate(store: &mut TokenStore, requests: &mut [Request], synthetic: &mut Synthetic) -> Result<()> {
    if requests.iter().all(|r| r.lora == 0) {
        return Ok(());
    }
    // The adapters each sequence is used under, in first-use order.
    let mut uses: HashMap<u32, Vec<u16>> = HashMap::new();
    for r in requests.iter() {
        let u = uses.entry(r.seq).or_default();
        if !u.contains(&r.lora) {
            u.push(r.lora);
        }
    }
    let mut salts: HashMap<(u16, u32), u32> = HashMap::new();
    // (sequence, adapter) → the sequence that adapter's requests use.
    let mut moved: HashMap<(u32, u16), u32> = HashMap::new();
    let mut seqs: Vec<u32> = uses.keys().copied().collect();
    seqs.sort_unstable();
    for seq in seqs {
        let first = store.token(seq, 0);
        for (k, &lora) in uses[&seq].iter().enumerate() {
            if lora == 0 {
                continue;
            }
            let salt = match salts.get(&(lora, first)) {
                Some(&t) => t,
                None => {
                    let t = synthetic.take(1)?;
                    salts.insert((lora, first), t);
                    t
                }
            };
            // The first user keeps the sequence unless the base model uses it too.
            let copy = k > 0 || uses[&seq].contains(&0);
            moved.insert((seq, lora), store.with_first(seq, salt, copy));
        }
    }
    for r in requests.iter_mut().filter(|r| r.lora != 0) {
        r.seq = moved[&(r.seq, r.lora)];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(seq: u32, lora: u16) -> Request {
        Request {
            seq,
            prompt_len: 3,
            output_len: 1,
            arrival_ms: None,
            session: None,
            prev_turn: None,
            ignore_eos: true,
            priority: None,
            lora,
        }
    }

    #[test]
    fn adapters_share_nothing_with_each_other_or_the_base_model() {
        let mut store = TokenStore::from_seqs(&[vec![1, 2, 3, 4], vec![1, 2, 3, 5], vec![7, 8, 9, 9]]);
        // Sequence 0 under the base model and adapter 1; 1 under adapter 1; 2 under 2 then 1.
        let mut rs = vec![req(0, 0), req(0, 1), req(1, 1), req(2, 2), req(2, 1)];
        let mut syn = Synthetic { next: crate::trace::RESERVED_TOKEN_BASE as u64 };
        separate(&mut store, &mut rs, &mut syn).unwrap();
        assert_eq!(rs[0].seq, 0, "the base model's request keeps its sequence");
        let lcp = |a: &Request, b: &Request| store.lcp((a.seq, 0), (b.seq, 0), usize::MAX);
        assert_eq!(lcp(&rs[0], &rs[1]), 0, "base and adapter share nothing");
        assert_eq!(lcp(&rs[1], &rs[2]), 3, "one adapter's prompts share their prefix");
        assert_eq!(lcp(&rs[3], &rs[4]), 0, "one conversation under two adapters shares nothing");
        assert_eq!(lcp(&rs[1], &rs[4]), 0);
        assert_eq!(store.lcp((rs[1].seq, 1), (0, 1), usize::MAX), 3, "past the first token, the tokens are the same");
        assert_eq!(syn.next, crate::trace::RESERVED_TOKEN_BASE as u64 + 3, "one salt per (adapter, first token)");
    }

    #[test]
    fn draws_follow_the_client() {
        let d =
            LoraDraw { modules: vec!["a".into(), "b".into(), "c".into()], assignment: Assignment::RoundRobin, seed: 0 };
        let mut rs: Vec<Request> = (0..5).map(|_| req(0, 0)).collect();
        d.assign(&mut rs);
        assert_eq!(rs.iter().map(|r| r.lora).collect::<Vec<_>>(), vec![1, 2, 3, 1, 2]);
        let r = LoraDraw { assignment: Assignment::Random, seed: 3, ..d.clone() };
        let mut many: Vec<Request> = (0..3000).map(|_| req(0, 0)).collect();
        r.assign(&mut many);
        for k in 1..=3 {
            let n = many.iter().filter(|q| q.lora == k).count();
            assert!((850..1150).contains(&n), "adapter {k}: {n} of 3000");
        }
        assert_eq!(d.id("b"), Some(2));
        assert_eq!(d.id("z"), None);
    }
}
