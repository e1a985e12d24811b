//! ShareGPT sampled as the benchmark clients sample it (ENGINE_SPEC §7.5; docs/engines/
//! clients.md). Both clients keep the conversations with at least two messages, shuffle them
//! with Python's `random` seeded by `--seed`, then walk the shuffled list: tokenize message 0
//! (prompt) and message 1 (reply), drop the pair if a length rule rejects it, and stop once
//! `--num-prompts` are kept. The rules ([`DatasetFilter`]):
//!
//! * `vllm` — `vllm bench serve`, `vllm/benchmarks/datasets/utils.py::is_valid_sequence`
//!   (called by `ShareGPTDataset.sample`): drop if prompt < 4 tokens, reply < 4 (not checked
//!   when `--sharegpt-output-len` fixes the output), prompt > 1024, or prompt + output > 2048.
//! * `sglang` — `python -m sglang.bench_serving`, `sample_sharegpt_requests` (since early 2025):
//!   drop if prompt < 2 or output < 2, and, with `--sharegpt-context-len`, if prompt + output
//!   exceeds it; a fixed output length under 4 is refused ("output_len too small").
//! * `none` — cachesim's own: drop only empty prompts (and empty replies unless fixed).
//!
//! Building keeps the kept requests in file order and remembers each one's place in the
//! shuffled population ([`ClientSample`]); [`ClientSample::order`] replays the shuffle, so the
//! first N of it are exactly the client's N (given the same tokenizer).

use super::pyrand::PyRandom;
use serde::Serialize;

/// Which client's ShareGPT length rules to apply (`--dataset-filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DatasetFilter {
    /// `vllm bench serve`: 4 ≤ prompt ≤ 1024, reply ≥ 4, prompt + output ≤ 2048.
    Vllm,
    /// `sglang.bench_serving`: prompt ≥ 2, output ≥ 2, prompt + output ≤ --sharegpt-context-len.
    Sglang,
    /// Only empty prompts (and empty replies) are dropped; no shuffle of the population.
    None,
}

impl DatasetFilter {
    /// Why the pair is dropped, or `None` when it is kept. `fixed_output` = the output length
    /// was fixed by `--sharegpt-output-len` (the reply's own length is then irrelevant).
    pub fn reject(
        self,
        prompt_len: usize,
        output_len: usize,
        fixed_output: bool,
        context_len: Option<u32>,
    ) -> Option<&'static str> {
        match self {
            DatasetFilter::Vllm => {
                if prompt_len < 4 {
                    Some("vllm filter: prompt under 4 tokens")
                } else if !fixed_output && output_len < 4 {
                    Some("vllm filter: reply under 4 tokens")
                } else if prompt_len > 1024 {
                    Some("vllm filter: prompt over 1024 tokens")
                } else if prompt_len + output_len > 2048 {
                    Some("vllm filter: prompt + output over 2048 tokens")
                } else {
                    None
                }
            }
            DatasetFilter::Sglang => {
                if prompt_len < 2 {
                    Some("sglang filter: prompt under 2 tokens")
                } else if output_len < 2 {
                    Some("sglang filter: output under 2 tokens")
                } else if context_len.is_some_and(|c| c > 0 && prompt_len + output_len > c as usize) {
                    Some("sglang filter: prompt + output over --sharegpt-context-len")
                } else {
                    None
                }
            }
            DatasetFilter::None => {
                (prompt_len == 0 || (!fixed_output && output_len == 0)).then_some("empty first prompt or reply")
            }
        }
    }

    /// The client's name, for notes.
    pub fn name(self) -> &'static str {
        match self {
            DatasetFilter::Vllm => "vllm",
            DatasetFilter::Sglang => "sglang",
            DatasetFilter::None => "none",
        }
    }
}

/// Where each kept request sat in the clients' population (records with two or more
/// messages, in file order), so their seeded shuffle can be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSample {
    /// Records in the population.
    pub population: u32,
    /// Population index of each request, by request index (increasing).
    pub slots: Vec<u32>,
    /// Fill a short sample up to N with repeats, as `vllm bench serve` does unless
    /// `--no-oversample` (`BenchmarkDataset.maybe_oversample_requests`).
    pub oversample: bool,
}

impl ClientSample {
    /// Request indices in the order the client walks them with `seed` — `random.seed(seed);
    /// random.shuffle(population)`, dropped records skipped — cut to `num_prompts`. When fewer
    /// are kept and the client oversamples, `random.seed(seed)` again and the missing ones are
    /// `random.choice(kept)` each (so a request may appear more than once).
    pub fn order(&self, seed: u64, num_prompts: Option<usize>) -> Vec<u32> {
        let mut request_at: Vec<u32> = vec![u32::MAX; self.population as usize];
        for (req, &slot) in self.slots.iter().enumerate() {
            request_at[slot as usize] = req as u32;
        }
        let mut population: Vec<u32> = (0..self.population).collect();
        PyRandom::new(seed).shuffle(&mut population);
        let want = num_prompts.unwrap_or(usize::MAX);
        let mut kept: Vec<u32> =
            population.into_iter().map(|s| request_at[s as usize]).filter(|&r| r != u32::MAX).take(want).collect();
        if let Some(n) = num_prompts.filter(|&n| self.oversample && n > kept.len() && !kept.is_empty()) {
            let mut rng = PyRandom::new(seed);
            let len = kept.len() as u32;
            for _ in kept.len()..n {
                let pick = kept[rng.choice(len) as usize];
                kept.push(pick);
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_rules_and_their_order() {
        let f = DatasetFilter::Vllm;
        assert_eq!(f.reject(4, 4, false, None), None);
        assert_eq!(f.reject(3, 100, false, None), Some("vllm filter: prompt under 4 tokens"));
        assert_eq!(f.reject(10, 3, false, None), Some("vllm filter: reply under 4 tokens"));
        assert_eq!(f.reject(10, 3, true, None), None, "a fixed output skips the reply check");
        assert_eq!(f.reject(1025, 10, false, None), Some("vllm filter: prompt over 1024 tokens"));
        assert_eq!(f.reject(1024, 1024, false, None), None);
        assert_eq!(f.reject(1024, 1025, false, None), Some("vllm filter: prompt + output over 2048 tokens"));
        assert_eq!(f.reject(1000, 1100, true, None), Some("vllm filter: prompt + output over 2048 tokens"));
    }

    #[test]
    fn sglang_rules() {
        let f = DatasetFilter::Sglang;
        assert_eq!(f.reject(2, 2, false, None), None);
        assert_eq!(f.reject(5000, 9000, false, None), None, "no caps without a context length");
        assert_eq!(f.reject(1, 9, false, None), Some("sglang filter: prompt under 2 tokens"));
        assert_eq!(f.reject(9, 1, false, None), Some("sglang filter: output under 2 tokens"));
        assert_eq!(f.reject(9, 1, true, None), Some("sglang filter: output under 2 tokens"));
        assert_eq!(f.reject(100, 28, false, Some(128)), None);
        assert_eq!(
            f.reject(100, 29, false, Some(128)),
            Some("sglang filter: prompt + output over --sharegpt-context-len")
        );
        assert_eq!(f.reject(100, 29, false, Some(0)), None, "0 is falsy in Python: no limit");
        assert_eq!(DatasetFilter::None.reject(1, 0, false, None), Some("empty first prompt or reply"));
        assert_eq!(DatasetFilter::None.reject(1, 0, true, None), None);
    }

    #[test]
    fn order_replays_the_shuffle_and_skips_dropped_records() {
        // random.seed(0); x = list(range(10)); random.shuffle(x) → [7, 8, 1, 5, 3, 4, 2, 0, 9, 6]
        // Kept: population slots 0, 1, 3, 5, 7, 8 → requests 0..6.
        let mut s = ClientSample { population: 10, slots: vec![0, 1, 3, 5, 7, 8], oversample: false };
        // Slots in shuffled order: 7 8 (1) 5 3 (4) (2) 0 (9) (6) → requests 4 5 1 3 2 0.
        assert_eq!(s.order(0, None), vec![4, 5, 1, 3, 2, 0]);
        assert_eq!(s.order(0, Some(3)), vec![4, 5, 1]);
        assert_eq!(s.order(0, Some(9)).len(), 6, "no oversampling unless asked");
        // vLLM's oversampling: random.seed(0); [random.choice(range(6)) for _ in range(3)]
        // → [3, 3, 0], i.e. kept[3], kept[3], kept[0] = requests 3, 3, 4.
        s.oversample = true;
        assert_eq!(s.order(0, Some(9)), vec![4, 5, 1, 3, 2, 0, 3, 3, 4]);
    }
}
