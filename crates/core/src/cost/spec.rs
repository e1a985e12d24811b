//! Speculative decoding in expectation: a draft proposes k tokens per sequence, the target
//! verifies them in one forward pass over k + 1 positions, and the accepted prefix plus one
//! token the target samples itself (the correction or bonus token) come out of the step.
//!
//! With a_i the chance that draft position i is accepted given positions before it were, the
//! expected tokens per step are 1 + Σ_{i=1..k} Π_{j≤i} a_j. The default acceptance is DeepSeek's
//! own MTP figure: "the acceptance rate of the second token prediction ranges between 85% and
//! 90%" (DeepSeek-V3 Technical Report, arXiv 2412.19437, §5.4.3), taken at its lower end, 0.85,
//! for every position — DeepSeek publishes only the first; `--spec-acceptance-rate` sets a
//! value or a list per position. EAGLE and n-gram drafts have no published figure for these
//! models, so they need the flag.

use crate::error::{Error, Result};
use serde::Serialize;

/// Published acceptance of DeepSeek's MTP draft (lower end of 85–90%).
pub const MTP_ACCEPTANCE: f64 = 0.85;

/// The draft (`--speculative-algorithm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SpecAlgorithm {
    /// No speculation.
    #[default]
    None,
    /// DeepSeek multi-token prediction: k passes of the model's MTP layer.
    Mtp,
    /// EAGLE: k passes of a one-layer draft head.
    Eagle,
    /// Prompt-lookup n-grams: drafted on the host, no device pass.
    Ngram,
}

impl SpecAlgorithm {
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            SpecAlgorithm::None => "none",
            SpecAlgorithm::Mtp => "mtp",
            SpecAlgorithm::Eagle => "eagle",
            SpecAlgorithm::Ngram => "ngram",
        }
    }
}

/// A resolved speculative-decoding setup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecDecode {
    pub algorithm: SpecAlgorithm,
    /// Draft tokens per step (`--num-speculative-tokens`).
    pub k: u32,
    /// Acceptance per draft position (k values).
    pub acceptance: Vec<f64>,
}

impl SpecDecode {
    /// Resolves the flags: `None` for no speculation; one rate applies to every position, a
    /// list gives one per position (its last value repeats if shorter than k).
    pub fn resolve(algorithm: SpecAlgorithm, k: Option<u32>, rates: &[f64]) -> Result<Option<Self>> {
        if algorithm == SpecAlgorithm::None {
            if k.is_some() || !rates.is_empty() {
                return Err(Error::invalid(
                    "--num-speculative-tokens",
                    "needs --speculative-algorithm mtp, eagle or ngram",
                ));
            }
            return Ok(None);
        }
        let k = k.unwrap_or(match algorithm {
            SpecAlgorithm::Mtp | SpecAlgorithm::Eagle => 3,
            _ => 4,
        });
        if k == 0 || k > 16 {
            return Err(Error::invalid("--num-speculative-tokens", format!("{k} must be between 1 and 16")));
        }
        if let Some(bad) = rates.iter().find(|a| !(0.0..=1.0).contains(*a)) {
            return Err(Error::invalid("--spec-acceptance-rate", format!("{bad} is not in [0, 1]")));
        }
        let base: Vec<f64> = match (rates.is_empty(), algorithm) {
            (false, _) => rates.to_vec(),
            (true, SpecAlgorithm::Mtp) => vec![MTP_ACCEPTANCE],
            (true, _) => {
                return Err(Error::invalid(
                    "--spec-acceptance-rate",
                    "has no published default for EAGLE or n-gram drafts; give a rate (or one per position)",
                ))
            }
        };
        let last = *base.last().unwrap_or(&MTP_ACCEPTANCE);
        let acceptance = (0..k as usize).map(|i| base.get(i).copied().unwrap_or(last)).collect();
        Ok(Some(Self { algorithm, k, acceptance }))
    }

    /// Expected tokens a sequence gains per step: 1 + Σ_{i=1..k} Π_{j≤i} a_j.
    pub fn tokens_per_step(&self) -> f64 {
        let mut p = 1.0;
        let mut sum = 1.0;
        for a in &self.acceptance {
            p *= a;
            sum += p;
        }
        sum
    }

    /// Device passes of the draft per step (MTP and EAGLE: k one-layer passes; n-gram: none).
    pub fn draft_passes(&self) -> u32 {
        match self.algorithm {
            SpecAlgorithm::Mtp | SpecAlgorithm::Eagle => self.k,
            _ => 0,
        }
    }

    /// Positions the target verifies per decoding sequence: k + 1.
    pub fn verify_positions(&self) -> u32 {
        self.k + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_per_step_for_a_fixed_vector() {
        // a = (0.8, 0.5, 0.25): 1 + 0.8 + 0.4 + 0.1 = 2.3.
        let s = SpecDecode::resolve(SpecAlgorithm::Eagle, Some(3), &[0.8, 0.5, 0.25]).unwrap().unwrap();
        assert!((s.tokens_per_step() - 2.3).abs() < 1e-12);
        assert_eq!((s.draft_passes(), s.verify_positions()), (3, 4));
        // MTP default: 0.85 each → 1 + 0.85 + 0.7225 + 0.614125 = 3.186625.
        let m = SpecDecode::resolve(SpecAlgorithm::Mtp, None, &[]).unwrap().unwrap();
        assert_eq!(m.acceptance, vec![0.85; 3]);
        assert!((m.tokens_per_step() - 3.186625).abs() < 1e-12);
        // One MTP token, DeepSeek's own setting: 1.85 tokens per step (their 1.8× TPS).
        let one = SpecDecode::resolve(SpecAlgorithm::Mtp, Some(1), &[]).unwrap().unwrap();
        assert!((one.tokens_per_step() - 1.85).abs() < 1e-12);
        // A short list repeats its last value; nothing accepted gives one token.
        let s = SpecDecode::resolve(SpecAlgorithm::Ngram, Some(4), &[0.5]).unwrap().unwrap();
        assert_eq!(s.acceptance, vec![0.5; 4]);
        assert_eq!(s.draft_passes(), 0);
        let zero = SpecDecode::resolve(SpecAlgorithm::Ngram, Some(2), &[0.0]).unwrap().unwrap();
        assert_eq!(zero.tokens_per_step(), 1.0);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(SpecDecode::resolve(SpecAlgorithm::None, None, &[]).unwrap().is_none());
        assert!(SpecDecode::resolve(SpecAlgorithm::None, Some(2), &[]).is_err());
        assert!(SpecDecode::resolve(SpecAlgorithm::Eagle, Some(2), &[]).is_err());
        assert!(SpecDecode::resolve(SpecAlgorithm::Mtp, Some(0), &[]).is_err());
        assert!(SpecDecode::resolve(SpecAlgorithm::Mtp, Some(2), &[1.5]).is_err());
    }
}
