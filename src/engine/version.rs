//! Engine versions (`--engine-version`): each names the upstream release whose code a bundle of
//! behaviour rules follows, written `engine@version` (`vllm@0.33`). Engines change scheduling
//! rules between releases, so a rule that changed lives here as a field of [`Rules`], set per
//! bundle, never silently replaced. Every engine family's newest bundle is its default.

use super::EngineKind;
use serde::Serialize;

/// A versioned bundle of engine rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum EngineVersion {
    /// vLLM 0.33 (v1 engine): whole-sequence admission (since 0.19), unhashed blocks freed to the
    /// queue's front (since 0.24), no long-prefill cap for a lone request (since 0.31).
    Vllm033,
    /// vLLM 0.18 (0.18.1, the last release before the 2026 admission and free-order changes):
    /// first-chunk admission, every freed block to the queue's tail.
    Vllm018,
    /// vLLM V0 (the 0.5/0.6 era; `--engine vllm-v0`).
    VllmV0,
    /// SGLang 0.5 (0.5.23's scheduling code).
    Sglang05,
    /// SGLang 0.4 (the 2025 scheduling rules).
    Sglang04,
    /// LightLLM 1.x.
    Lightllm1,
}

/// The rules that differ between bundles. Each field names the upstream change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rules {
    /// vLLM: a waiting request is admitted only when blocks for its whole known sequence fit
    /// (`scheduler_reserve_full_isl`, vLLM PR #37307, first in 0.19.0), not only its first chunk.
    pub vllm_reserve_full_isl: bool,
    /// vLLM: `BlockPool.free_blocks` puts freed blocks without a hash at the front of the free
    /// queue and hashed ones at the tail (vLLM PR #42656, first in 0.24.0); before, all went to
    /// the tail.
    pub vllm_free_unhashed_first: bool,
    /// vLLM: `long_prefill_token_threshold` caps no chunk in a step that begins with a single
    /// request running or waiting (`Scheduler.schedule`, first in 0.31.0); before, it always
    /// applied.
    pub vllm_long_prefill_uncapped_alone: bool,
    /// vLLM `--gpu-memory-utilization` default.
    pub gpu_memory_utilization: f64,
}

impl EngineVersion {
    /// Every bundle, newest first within an engine.
    pub const ALL: [EngineVersion; 6] = [
        EngineVersion::Vllm033,
        EngineVersion::Vllm018,
        EngineVersion::VllmV0,
        EngineVersion::Sglang05,
        EngineVersion::Sglang04,
        EngineVersion::Lightllm1,
    ];

    /// The name `--engine-version` takes and the reports print.
    pub fn name(self) -> &'static str {
        match self {
            EngineVersion::Vllm033 => "vllm@0.33",
            EngineVersion::Vllm018 => "vllm@0.18",
            EngineVersion::VllmV0 => "vllm-v0@0.6",
            EngineVersion::Sglang05 => "sglang@0.5",
            EngineVersion::Sglang04 => "sglang@0.4",
            EngineVersion::Lightllm1 => "lightllm@1.0",
        }
    }

    /// What this bundle does differently, for `--help`.
    pub fn summary(self) -> &'static str {
        match self {
            EngineVersion::Vllm033 => {
                "default for vllm: admits a request only when its whole known sequence fits (PR #37307, \
                 since 0.19); frees unhashed blocks to the free queue's front (PR #42656, since 0.24); no \
                 long-prefill cap for a lone request (since 0.31); gpu_memory_utilization 0.92"
            }
            EngineVersion::Vllm018 => {
                "vLLM 0.18.1, the last release before those changes: admits when the first chunk fits; \
                 every freed block to the tail; long-prefill cap always; gpu_memory_utilization 0.9"
            }
            EngineVersion::VllmV0 => "the V0 engine (--engine vllm-v0): whole prompts first, 1% block watermark",
            EngineVersion::Sglang05 => "default for sglang: 0.5.23's scheduling code",
            EngineVersion::Sglang04 => "SGLang's 2025 rules",
            EngineVersion::Lightllm1 => "default for lightllm",
        }
    }

    /// The engine family the bundle belongs to.
    pub fn engine(self) -> EngineKind {
        match self {
            EngineVersion::Vllm033 | EngineVersion::Vllm018 => EngineKind::Vllm,
            EngineVersion::VllmV0 => EngineKind::VllmV0,
            EngineVersion::Sglang05 | EngineVersion::Sglang04 => EngineKind::Sglang,
            EngineVersion::Lightllm1 => EngineKind::Lightllm,
        }
    }

    /// The newest bundle of an engine family (its default).
    pub fn newest(engine: EngineKind) -> Self {
        Self::ALL.into_iter().find(|v| v.engine() == engine).expect("every engine has a bundle")
    }

    /// The bundle's rules.
    pub fn rules(self) -> Rules {
        let newest = Rules {
            vllm_reserve_full_isl: true,
            vllm_free_unhashed_first: true,
            vllm_long_prefill_uncapped_alone: true,
            gpu_memory_utilization: 0.92,
        };
        match self {
            EngineVersion::Vllm033 => newest,
            EngineVersion::Vllm018 | EngineVersion::VllmV0 => Rules {
                vllm_reserve_full_isl: false,
                vllm_free_unhashed_first: false,
                vllm_long_prefill_uncapped_alone: false,
                gpu_memory_utilization: 0.9,
            },
            EngineVersion::Sglang05 | EngineVersion::Sglang04 | EngineVersion::Lightllm1 => newest,
        }
    }
}

impl std::fmt::Display for EngineVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl clap::ValueEnum for EngineVersion {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.summary()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn names_parse_back_and_each_engine_defaults_to_its_newest() {
        for v in EngineVersion::ALL {
            assert_eq!(EngineVersion::from_str(v.name(), false), Ok(v));
            assert!(v.name().contains('@'), "{v}");
        }
        assert_eq!(EngineVersion::newest(EngineKind::Vllm), EngineVersion::Vllm033);
        assert_eq!(EngineVersion::newest(EngineKind::Sglang), EngineVersion::Sglang05);
        assert_eq!(EngineVersion::newest(EngineKind::VllmV0), EngineVersion::VllmV0);
        assert_eq!(EngineVersion::newest(EngineKind::Lightllm), EngineVersion::Lightllm1);
    }
}
