//! Synthetic workloads, written as native JSONL (`prompt_ids`, `output_len`, optional
//! `timestamp_ms`, `session`). Seeded: the same arguments give the same bytes.
//! - `random`: independent prompts of random token ids (SGLang `random-ids`).
//! - `gsp`: SGLang's generated-shared-prefix set (ENGINE_SPEC §7.5): groups sharing a system
//!   prompt, each request = system prompt + its own question, shuffled unless ordered.
//! - `sessions`: multi-turn chats sharing one system prompt; sessions start as a Poisson process,
//!   turns follow after exponential think times. Each record holds only the turn's new user
//!   message; readers rebuild the history (earlier prompts and outputs of the session).
//!
//! Lengths follow SGLang's `--random-range-ratio`: uniform on `[max(1, ⌊L·r⌋), L]`, so `1.0`
//! means exactly `L` and `0.0` means anything from 1 to `L`.

use crate::error::{Error, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use serde::Serialize;

/// One generated request (a native JSONL line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<f64>,
    pub output_len: u32,
    pub prompt_ids: Vec<u32>,
}

/// Token ids are drawn uniformly from `[0, vocab)`.
pub const DEFAULT_VOCAB: u32 = 100_000;

fn check_ratio(r: f64) -> Result<()> {
    if (0.0..=1.0).contains(&r) {
        Ok(())
    } else {
        Err(Error::invalid("--range-ratio", format!("{r} is not in [0, 1]")))
    }
}

fn check_len(name: &str, v: u32) -> Result<()> {
    if v == 0 || v as u64 > crate::trace::MAX_TOKENS_PER_REQUEST {
        Err(Error::invalid(name, format!("{v} must be between 1 and {}", crate::trace::MAX_TOKENS_PER_REQUEST)))
    } else {
        Ok(())
    }
}

/// SGLang's length rule: uniform integer on `[max(1, ⌊L·r⌋), L]`.
pub fn sample_len(rng: &mut StdRng, len: u32, ratio: f64) -> u32 {
    let lo = ((len as f64 * ratio) as u32).max(1).min(len);
    rng.random_range(lo..=len)
}

fn ids(rng: &mut StdRng, n: u32, vocab: u32) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..vocab)).collect()
}

/// `gen random`.
#[derive(Debug, Clone)]
pub struct RandomSpec {
    pub num_prompts: u32,
    pub input_len: u32,
    pub output_len: u32,
    pub range_ratio: f64,
    pub vocab: u32,
    pub seed: u64,
}

/// Independent random prompts.
pub fn random(s: &RandomSpec) -> Result<Vec<GenRecord>> {
    Ok(random_iter(s)?.collect())
}

/// Independent random prompts, drawn one at a time as they are taken (what [`random`]
/// collects), so writing them needs no more memory for a million than for one.
pub fn random_iter(s: &RandomSpec) -> Result<impl Iterator<Item = GenRecord>> {
    check_ratio(s.range_ratio)?;
    check_len("--input-len", s.input_len)?;
    check_len("--output-len", s.output_len)?;
    let mut rng = StdRng::seed_from_u64(s.seed);
    let (input_len, output_len, ratio, vocab) = (s.input_len, s.output_len, s.range_ratio, s.vocab);
    Ok((0..s.num_prompts).map(move |_| {
        let n = sample_len(&mut rng, input_len, ratio);
        let o = sample_len(&mut rng, output_len, ratio);
        GenRecord { session: None, timestamp_ms: None, output_len: o, prompt_ids: ids(&mut rng, n, vocab) }
    }))
}

/// `gen gsp` (SGLang generated-shared-prefix).
#[derive(Debug, Clone)]
pub struct GspSpec {
    pub num_groups: u32,
    pub prompts_per_group: u32,
    pub system_prompt_len: u32,
    pub question_len: u32,
    pub output_len: u32,
    pub range_ratio: f64,
    pub ordered: bool,
    pub vocab: u32,
    pub seed: u64,
}

/// Groups of requests sharing a system prompt.
pub fn gsp(s: &GspSpec) -> Result<Vec<GenRecord>> {
    check_ratio(s.range_ratio)?;
    check_len("--system-prompt-len", s.system_prompt_len)?;
    check_len("--question-len", s.question_len)?;
    check_len("--output-len", s.output_len)?;
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut out = Vec::with_capacity((s.num_groups * s.prompts_per_group) as usize);
    for _ in 0..s.num_groups {
        let sys_len = sample_len(&mut rng, s.system_prompt_len, s.range_ratio);
        let system = ids(&mut rng, sys_len, s.vocab);
        for _ in 0..s.prompts_per_group {
            let q_len = sample_len(&mut rng, s.question_len, s.range_ratio);
            let mut prompt = system.clone();
            prompt.extend(ids(&mut rng, q_len, s.vocab));
            let o = sample_len(&mut rng, s.output_len, s.range_ratio);
            out.push(GenRecord { session: None, timestamp_ms: None, output_len: o, prompt_ids: prompt });
        }
    }
    if !s.ordered {
        out.shuffle(&mut rng);
    }
    Ok(out)
}

/// `gen sessions`.
#[derive(Debug, Clone)]
pub struct SessionsSpec {
    pub num_sessions: u32,
    pub turns: u32,
    pub system_prompt_len: u32,
    pub user_len: u32,
    pub output_len: u32,
    pub range_ratio: f64,
    /// Sessions started per second (Poisson).
    pub session_rate: f64,
    /// Mean seconds between a turn's arrival and the next turn's.
    pub think_time_s: f64,
    pub vocab: u32,
    pub seed: u64,
}

/// Multi-turn sessions sharing one system prompt, in arrival order.
pub fn sessions(s: &SessionsSpec) -> Result<Vec<GenRecord>> {
    check_ratio(s.range_ratio)?;
    check_len("--system-prompt-len", s.system_prompt_len)?;
    check_len("--user-len", s.user_len)?;
    check_len("--output-len", s.output_len)?;
    check_len("--turns", s.turns)?;
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(Error::invalid(name, format!("{v} must be a positive number")))
        }
    };
    let rate = Exp::new(positive("--session-rate", s.session_rate)?).expect("positive rate");
    let think = Exp::new(1.0 / positive("--think-time-s", s.think_time_s)?).expect("positive rate");
    let mut rng = StdRng::seed_from_u64(s.seed);
    let system = ids(&mut rng, s.system_prompt_len, s.vocab);
    let mut out = Vec::new();
    let mut start_s = 0.0;
    for session in 0..s.num_sessions {
        start_s += rate.sample(&mut rng);
        let mut t = start_s;
        for turn in 0..s.turns {
            if turn > 0 {
                t += think.sample(&mut rng);
            }
            let n = sample_len(&mut rng, s.user_len, s.range_ratio);
            let mut prompt = if turn == 0 { system.clone() } else { Vec::new() };
            prompt.extend(ids(&mut rng, n, s.vocab));
            out.push(GenRecord {
                session: Some(session),
                timestamp_ms: Some((t * 1e6).round() / 1e3),
                output_len: sample_len(&mut rng, s.output_len, s.range_ratio),
                prompt_ids: prompt,
            });
        }
    }
    out.sort_by(|a, b| a.timestamp_ms.partial_cmp(&b.timestamp_ms).expect("finite times"));
    Ok(out)
}

/// What [`write_jsonl`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub requests: u64,
    pub prompt_ids: u64,
    pub output_tokens: u64,
}

/// Writes records as JSON Lines, each as it comes, and counts them.
pub fn write_jsonl<W: std::io::Write>(
    records: impl IntoIterator<Item = impl std::borrow::Borrow<GenRecord>>,
    mut w: W,
) -> std::io::Result<Written> {
    let mut n = Written::default();
    for r in records {
        let r = r.borrow();
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
        n.requests += 1;
        n.prompt_ids += r.prompt_ids.len() as u64;
        n.output_tokens += r.output_len as u64;
    }
    w.flush()?;
    Ok(n)
}

/// A generated set as a workload, read back exactly as its JSONL file would be (default
/// build options); `name` stands for the file in the trace info.
pub fn workload(name: &str, records: &[GenRecord]) -> Result<super::Workload> {
    super::build(trace_file(name, records)?, &super::BuildOptions::default())
}

/// A generated set as the trace file its JSON Lines would read as, converted record by record
/// as the reader converts each line (no text written and parsed); an empty set is the reader's
/// own refusal of an empty file.
pub fn trace_file(name: &str, records: &[GenRecord]) -> Result<crate::trace::TraceFile> {
    if records.is_empty() {
        return crate::trace::parse(std::path::Path::new(name), b"", &crate::trace::ReadOptions::default());
    }
    let native = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            crate::trace::native::generated(i as u64 + 1, r.prompt_ids.clone(), r.output_len, r.timestamp_ms, r.session)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|error| Error::Record { path: name.into(), error })?;
    Ok(crate::trace::TraceFile {
        path: name.into(),
        format: crate::trace::Format::Native,
        records: crate::trace::Records::Native(native),
        skipped: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct conversion is what writing the JSON Lines and reading them back gives, for
    /// every generator (timestamps and sessions included).
    #[test]
    fn trace_file_is_its_jsonl_read_back() {
        let sets = [
            random(&RandomSpec {
                num_prompts: 30,
                input_len: 50,
                output_len: 9,
                range_ratio: 0.3,
                vocab: 1000,
                seed: 3,
            })
            .unwrap(),
            sessions(&SessionsSpec {
                num_sessions: 4,
                turns: 3,
                system_prompt_len: 20,
                user_len: 7,
                output_len: 5,
                range_ratio: 0.5,
                session_rate: 0.7,
                think_time_s: 1.3,
                vocab: 1000,
                seed: 5,
            })
            .unwrap(),
        ];
        for records in sets {
            let mut bytes = Vec::new();
            write_jsonl(&records, &mut bytes).unwrap();
            let read = crate::trace::parse(std::path::Path::new("g.jsonl"), &bytes, &Default::default()).unwrap();
            let direct = trace_file("g.jsonl", &records).unwrap();
            let (crate::trace::Records::Native(a), crate::trace::Records::Native(b)) = (&direct.records, &read.records)
            else {
                panic!("not native records")
            };
            assert_eq!(a, b);
            assert_eq!((direct.format, direct.skipped.total()), (read.format, read.skipped.total()));
        }
        assert!(trace_file("e.jsonl", &[]).is_err());
    }

    #[test]
    fn range_ratio_follows_sglang() {
        let mut rng = StdRng::seed_from_u64(1);
        assert!((0..100).all(|_| sample_len(&mut rng, 64, 1.0) == 64));
        let v: Vec<u32> = (0..2000).map(|_| sample_len(&mut rng, 10, 0.0)).collect();
        assert_eq!(*v.iter().min().unwrap(), 1);
        assert_eq!(*v.iter().max().unwrap(), 10);
        assert!((0..500).all(|_| (5..=10).contains(&sample_len(&mut rng, 10, 0.5))));
    }

    #[test]
    fn gsp_shape_and_determinism() {
        let spec = GspSpec {
            num_groups: 3,
            prompts_per_group: 4,
            system_prompt_len: 20,
            question_len: 5,
            output_len: 7,
            range_ratio: 1.0,
            ordered: true,
            vocab: DEFAULT_VOCAB,
            seed: 9,
        };
        let a = gsp(&spec).unwrap();
        assert_eq!(a.len(), 12);
        assert!(a.iter().all(|r| r.prompt_ids.len() == 25 && r.output_len == 7));
        assert_eq!(a[0].prompt_ids[..20], a[3].prompt_ids[..20]);
        assert_ne!(a[0].prompt_ids[..20], a[4].prompt_ids[..20]);
        assert_eq!(a, gsp(&spec).unwrap());
        let shuffled = gsp(&GspSpec { ordered: false, ..spec }).unwrap();
        assert_eq!(shuffled.len(), 12);
    }

    #[test]
    fn sessions_are_ordered_and_validated() {
        let spec = SessionsSpec {
            num_sessions: 5,
            turns: 3,
            system_prompt_len: 10,
            user_len: 4,
            output_len: 6,
            range_ratio: 1.0,
            session_rate: 2.0,
            think_time_s: 3.0,
            vocab: DEFAULT_VOCAB,
            seed: 1,
        };
        let r = sessions(&spec).unwrap();
        assert_eq!(r.len(), 15);
        assert!(r.windows(2).all(|w| w[0].timestamp_ms <= w[1].timestamp_ms));
        assert_eq!(r.iter().filter(|x| x.prompt_ids.len() == 14).count(), 5);
        assert!(sessions(&SessionsSpec { session_rate: 0.0, ..spec.clone() }).is_err());
        assert!(sessions(&SessionsSpec { range_ratio: 1.5, ..spec }).is_err());
    }
}
