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
    /// vLLM V0 as vLLM 0.9 had it, its last era (`--engine vllm-v0`; ENGINE_SPEC §2.3).
    VllmV0,
    /// vLLM V0 as vLLM 0.8 ran it (0.8.0–0.8.5, spring 2025: the engine 0.8 falls back to for
    /// pipeline parallelism without Ray), with V0's own defaults (`Rules::vllm_v0_arg_defaults`).
    VllmV008,
    /// SGLang 0.5 (0.5.23's scheduling code).
    Sglang05,
    /// SGLang through 0.5.1 (2025): 0.4.10's scheduling code, which 0.5.1 keeps for every rule here.
    Sglang051,
    /// SGLang 0.4.3.post2 (February 2025, the release that brought DeepSeek's MTP as NEXTN): its
    /// speculative-decoding settings (`Rules::sglang_spec_one_prefill`), 0.4.10's rules otherwise.
    Sglang043,
    /// LightLLM's main branch at fc72ffab (2025-07-11; package version 1.0.1, but its router
    /// differs from the v1.0.1 tag's, which paused one request per step by id).
    LightllmMain2507,
    /// TensorRT-LLM 1.0 with the PyTorch backend (`--engine trtllm`; docs/engines/trtllm.md).
    Trtllm10,
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
    /// vLLM `--gpu-memory-utilization` default: 0.92 since vLLM PR #38284 (v0.21), 0.9 before
    /// (`vllm/config/cache.py` `CacheConfig.gpu_memory_utilization`). TensorRT-LLM: the share of
    /// the memory left after its profiling run that goes to KV (`free_gpu_memory_fraction`).
    pub gpu_memory_utilization: f64,
    /// vLLM charges the CUDA-graph memory estimate (`GPUModelRunner.profile_cudagraph_memory`)
    /// against the KV budget (`gpu_worker.py` `determine_available_memory`); on by default
    /// since PR #38284 (v0.21, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`), off before.
    pub vllm_cudagraph_memory_estimate: bool,
    /// SGLang: a running `ignore_eos` request reserves its remaining outputs at ratio 1.0, not at
    /// `new_token_ratio` (`schedule_policy.py` `PrefillAdder._get_running_request_total_token_offset`,
    /// 0.5.23; 0.4.10 scales every request by the ratio).
    pub sglang_ignore_eos_full_reserve: bool,
    /// SGLang's `PrefillBudget` (`mem_cache/prefill_budget.py`, 0.5.23): every admitted request
    /// also reserves one page; a waiting request is checked against its remaining outputs; the
    /// in-progress chunk is cut to the remaining memory budget. 0.4.10 (`PrefillAdder`
    /// `_update_prefill_budget`, `add_chunked_req`) reserves no page and cuts only to the chunk.
    pub sglang_prefill_budget_pages: bool,
    /// SGLang `PrefillAdder._select_prefill_admission` (0.5.23): with chunking on, a prompt over
    /// the remaining input budget is truncated to the chunk; only without chunking does it end the
    /// batch. 0.4.10 `add_one_req` ends the batch in both cases (unless the batch is empty).
    pub sglang_truncate_to_chunk: bool,
    /// SGLang `evict_from_tree_cache` / `evict_to_free_tokens` (0.5.23) evicts only the shortfall
    /// `n − available`; 0.4.10 `_evict_tree_cache_if_needed` asks the tree for all `n`.
    pub sglang_evict_shortfall: bool,
    /// SGLang `RadixCache.checkpoint` (`_insert_cache(split_prompt=True)`, 0.5.23) splits the
    /// inserted path at the prompt's end, so eviction can drop outputs and keep the prompt;
    /// 0.4.10 `cache_finished_req` inserts one node.
    pub sglang_split_prompt: bool,
    /// SGLang `ScheduleBatch.retract_decode` (0.5.23) retracts until one more decode step fits
    /// (`check_decode_mem`) and estimates the new ratio over `Σ max_new + 1`; 0.4.10 retracts
    /// until `SGLANG_RETRACT_DECODE_STEPS` (20) tokens per remaining request are free, over `Σ max_new`.
    pub sglang_retract_until_fits: bool,
    /// SGLang's default `mem_fraction_static` (`arg_groups/memory_hook.py`
    /// `_handle_gpu_memory_settings`, 0.5.23) reserves 512 MiB + 1.5 MiB per activation token
    /// (`max(chunked_prefill_size, 2048)`, or `max_prefill_tokens` with chunking off) + 2 MiB per
    /// decode CUDA graph + TP/8 GiB, at least 10 GiB above 60 GiB; 0.4.10
    /// (`server_args.__post_init__`) reserves a fixed amount by GPU memory.
    pub sglang_reserve_by_chunk: bool,
    /// SGLang `KVCacheConfigurator.resolve_max_num_reqs` (0.5.23) caps a user's
    /// `--max-running-requests` at token capacity / 2; 0.4.10 (`TpModelWorker`) takes it as given.
    pub sglang_cap_running_by_tokens: bool,
    /// SGLang `SchedulePolicy._touch_waiting_prefixes` (`managers/schedule_policy.py`, 0.5.23, on
    /// through `SGLANG_ENABLE_WAITING_PREFIX_REFRESH`): under a policy that matches no prefix
    /// (FCFS, LOF, random, or LPM over 128 waiting), every 32nd priority computation touches
    /// the cached prefix of the first 128 waiting requests, the last first, so LRU eviction spares
    /// them; 0.4.10 has no such refresh.
    pub sglang_waiting_prefix_refresh: bool,
    /// SGLang `SchedulePolicy._compute_prefix_matches` (`managers/schedule_policy.py`, 0.5.23)
    /// matches each waiting request's whole known sequence (`match_kv_cache` with no length cap)
    /// and LPM sorts by that match capped one token short (`num_matched_prefix_tokens`); 0.4.10
    /// matches one token short (`Req.adjust_max_prefix_ids`) and sorts by that page-aligned match.
    pub sglang_match_waiting_whole: bool,
    /// TensorRT-LLM's default capacity policy GUARANTEED_NO_EVICT
    /// (`cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp` `GuaranteedNoEvictScheduler::impl`,
    /// bound by `_torch/pyexecutor/scheduler.py` `BindCapacityScheduler`, 1.0): a waiting request is
    /// admitted only when blocks for its prompt and all its `max_new_tokens` fit beside what every
    /// running request still needs to complete; the first that does not fit stops admission, and
    /// nothing is ever preempted. vLLM reserves only the known tokens.
    pub trtllm_reserve_to_completion: bool,
    /// vLLM 0.8's `EngineArgs._set_default_args_v0` (`vllm/engine/arg_utils.py`, 0.8.0–0.8.5):
    /// `max_num_seqs` 256 on every GPU (no device classes); chunked prefill off unless asked
    /// for, except for a model over 32K context without MLA, sliding window or speculative
    /// decoding (then on, with `SchedulerConfig`'s 2,048-token budget); MLA models never chunk
    /// (their budget `max(max_model_len, 2048)`); prefix caching off unless asked for. The
    /// vllm-v0@0.9 bundle keeps cachesim's earlier V0 defaults (device classes, caching on).
    pub vllm_v0_arg_defaults: bool,
    /// SGLang 0.4.3.post2 `ServerArgs.__post_init__` (`python/sglang/srt/server_args.py`): under
    /// EAGLE or NEXTN (MTP) speculative decoding, `prefill_only_one_req` (a prefill batch admits
    /// one request, `Scheduler.get_new_batch_prefill`), the radix cache and chunked prefill off,
    /// and no `max_running_requests` default; from 0.4.3.post3 the running default is 32 (48
    /// from 0.4.5) and from 0.4.3.post4 prefill batches are whole again.
    pub sglang_spec_one_prefill: bool,
    /// vLLM `VllmConfig.__post_init__` (`vllm/config/vllm.py`, 0.18.0): async scheduling, on by
    /// default, is turned off for a speculative method outside EAGLE/MTP, `ngram_gpu` and
    /// `draft_model` — the host-side `ngram` prompt lookup among them — and `--async-scheduling`
    /// with it is refused. 0.33.0 runs the V2 model runner by default
    /// (`VllmConfig.use_v2_model_runner`), which drafts `ngram` on the GPU
    /// (`v1/worker/gpu/spec_decode/__init__.py`) and keeps async scheduling on.
    pub vllm_sync_with_host_ngram: bool,
}

impl Rules {
    /// What a cache driven by `engine`'s scheduler under these rules follows
    /// ([`crate::cache::PrefixCache::follow`]): vLLM's free order; SGLang's radix rules only
    /// under SGLang's scheduler.
    pub fn cache_rules(&self, engine: super::EngineKind) -> crate::cache::CacheRules {
        crate::cache::CacheRules {
            free_unhashed_first: self.vllm_free_unhashed_first,
            sglang: (engine == super::EngineKind::Sglang).then(|| self.sglang_cache()),
        }
    }

    /// The radix-cache rules of an SGLang bundle.
    pub fn sglang_cache(&self) -> crate::cache::SglangCacheRules {
        crate::cache::SglangCacheRules {
            evict_shortfall: self.sglang_evict_shortfall,
            split_prompt: self.sglang_split_prompt,
        }
    }
}

impl EngineVersion {
    /// Every bundle, newest first within an engine.
    pub const ALL: [EngineVersion; 9] = [
        EngineVersion::Vllm033,
        EngineVersion::Vllm018,
        EngineVersion::VllmV0,
        EngineVersion::VllmV008,
        EngineVersion::Sglang05,
        EngineVersion::Sglang051,
        EngineVersion::Sglang043,
        EngineVersion::LightllmMain2507,
        EngineVersion::Trtllm10,
    ];

    /// The name `--engine-version` takes and the reports print.
    pub fn name(self) -> &'static str {
        match self {
            EngineVersion::Vllm033 => "vllm@0.33",
            EngineVersion::Vllm018 => "vllm@0.18",
            EngineVersion::VllmV0 => "vllm-v0@0.9",
            EngineVersion::VllmV008 => "vllm-v0@0.8",
            EngineVersion::Sglang05 => "sglang@0.5",
            EngineVersion::Sglang051 => "sglang@0.5.1",
            EngineVersion::Sglang043 => "sglang@0.4.3",
            EngineVersion::LightllmMain2507 => "lightllm@main-2025-07",
            EngineVersion::Trtllm10 => "trtllm@1.0",
        }
    }

    /// What this bundle does differently, for `--help`.
    pub fn summary(self) -> &'static str {
        match self {
            EngineVersion::Vllm033 => {
                "default for vllm: admits a request only when its whole known sequence fits (PR #37307, \
                 since 0.19); frees unhashed blocks to the free queue's front (PR #42656, since 0.24); no \
                 long-prefill cap for a lone request (since 0.31); gpu_memory_utilization 0.92 \
                 with the CUDA-graph memory estimate charged (PR #38284, since 0.21)"
            }
            EngineVersion::Vllm018 => {
                "vLLM 0.18.1, the last release before those changes: admits when the first chunk fits; \
                 every freed block to the tail; long-prefill cap always; gpu_memory_utilization 0.9, no CUDA-graph estimate"
            }
            EngineVersion::VllmV0 => {
                "the V0 engine of vLLM 0.9, its last release (vllm/core/scheduler.py; --engine vllm-v0): whole \
                 prompts first, 1% block watermark; limits by GPU class as in 0.9 (1024 or 256 sequences)"
            }
            EngineVersion::VllmV008 => {
                "the V0 engine of vLLM 0.8 (spring 2025; what 0.8 runs under pipeline parallelism without Ray): \
                 V0's own defaults (EngineArgs._set_default_args_v0): 256 sequences, no chunked prefill for MLA \
                 models (budget max(max_model_len, 2048)), chunked prefill for other models over 32K context, \
                 prefix caching off; one scheduler per pipeline stage (virtual engines)"
            }
            EngineVersion::Sglang05 => {
                "default for sglang: 0.5.23's scheduling code: running ignore_eos requests reserve their \
                 outputs in full; one page reserved per admitted request; long prompts cut to the chunk; \
                 eviction of the shortfall only; prompt/output split in the tree; retraction until a decode fits; \
                 memory reserve from the chunk in use; max_running_requests capped at tokens / 2; \
                 waiting prefixes refreshed every 32nd FCFS pass; waiting requests matched whole"
            }
            EngineVersion::Sglang051 => {
                "SGLang through 0.5.1 (0.4.10's scheduling code, 2025): every reservation scaled by new_token_ratio; \
                 a prompt over the input budget ends the batch; eviction of the whole request; retraction \
                 until 20 tokens per request are free; memory reserve fixed by GPU size"
            }
            EngineVersion::Sglang043 => {
                "SGLang 0.4.3.post2 (February 2025, DeepSeek MTP as NEXTN): under EAGLE/NEXTN speculative decoding \
                 one request per prefill batch (prefill_only_one_req), no radix cache, no chunked prefill, \
                 no max_running_requests default; 0.4.10's rules otherwise"
            }
            EngineVersion::LightllmMain2507 => {
                "default for lightllm: main at fc72ffab (2025-07-11), pauses one request per _can_decode check"
            }
            EngineVersion::Trtllm10 => {
                "default for trtllm: TensorRT-LLM 1.0, PyTorch backend: GUARANTEED_NO_EVICT admission (prompt + \
                 max_new_tokens reserved, no preemption), no context chunking, whole prompts after the \
                 generation requests under max_batch_size / max_num_tokens, 32-token KV blocks, \
                 kv_cache_free_gpu_memory_fraction 0.9 of the memory left after the profiling run"
            }
        }
    }

    /// The engine family the bundle belongs to.
    pub fn engine(self) -> EngineKind {
        match self {
            EngineVersion::Vllm033 | EngineVersion::Vllm018 => EngineKind::Vllm,
            EngineVersion::VllmV0 | EngineVersion::VllmV008 => EngineKind::VllmV0,
            EngineVersion::Sglang05 | EngineVersion::Sglang051 | EngineVersion::Sglang043 => EngineKind::Sglang,
            EngineVersion::LightllmMain2507 => EngineKind::Lightllm,
            EngineVersion::Trtllm10 => EngineKind::Trtllm,
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
            vllm_cudagraph_memory_estimate: true,
            sglang_ignore_eos_full_reserve: true,
            sglang_prefill_budget_pages: true,
            sglang_truncate_to_chunk: true,
            sglang_evict_shortfall: true,
            sglang_split_prompt: true,
            sglang_retract_until_fits: true,
            sglang_reserve_by_chunk: true,
            sglang_cap_running_by_tokens: true,
            sglang_waiting_prefix_refresh: true,
            sglang_match_waiting_whole: true,
            trtllm_reserve_to_completion: false,
            vllm_v0_arg_defaults: false,
            sglang_spec_one_prefill: false,
            vllm_sync_with_host_ngram: false,
        };
        match self {
            EngineVersion::Vllm033 => newest,
            EngineVersion::Vllm018 | EngineVersion::VllmV0 | EngineVersion::VllmV008 => Rules {
                vllm_reserve_full_isl: false,
                vllm_free_unhashed_first: false,
                vllm_long_prefill_uncapped_alone: false,
                gpu_memory_utilization: 0.9,
                vllm_cudagraph_memory_estimate: false,
                vllm_v0_arg_defaults: self == EngineVersion::VllmV008,
                vllm_sync_with_host_ngram: true,
                ..newest
            },
            EngineVersion::Sglang05 | EngineVersion::LightllmMain2507 => newest,
            // `KvCacheConfig.free_gpu_memory_fraction` default 0.9 (`llmapi/llm_args.py`, 1.0).
            EngineVersion::Trtllm10 => {
                Rules { trtllm_reserve_to_completion: true, gpu_memory_utilization: 0.9, ..newest }
            }
            EngineVersion::Sglang051 | EngineVersion::Sglang043 => Rules {
                sglang_ignore_eos_full_reserve: false,
                sglang_prefill_budget_pages: false,
                sglang_truncate_to_chunk: false,
                sglang_evict_shortfall: false,
                sglang_split_prompt: false,
                sglang_retract_until_fits: false,
                sglang_reserve_by_chunk: false,
                sglang_cap_running_by_tokens: false,
                sglang_waiting_prefix_refresh: false,
                sglang_match_waiting_whole: false,
                sglang_spec_one_prefill: self == EngineVersion::Sglang043,
                ..newest
            },
        }
    }
}

impl std::fmt::Display for EngineVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(feature = "clap")]
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

    #[test]
    fn names_parse_back_and_each_engine_defaults_to_its_newest() {
        for v in EngineVersion::ALL {
            assert_eq!(EngineVersion::ALL.iter().filter(|w| w.name() == v.name()).count(), 1, "{v}");
            assert!(v.name().contains('@'), "{v}");
        }
        assert_eq!(EngineVersion::newest(EngineKind::Vllm), EngineVersion::Vllm033);
        assert_eq!(EngineVersion::newest(EngineKind::Sglang), EngineVersion::Sglang05);
        assert_eq!(EngineVersion::newest(EngineKind::VllmV0), EngineVersion::VllmV0);
        assert_eq!(EngineVersion::newest(EngineKind::Lightllm), EngineVersion::LightllmMain2507);
        assert_eq!(EngineVersion::newest(EngineKind::Trtllm), EngineVersion::Trtllm10);
        assert!(EngineVersion::Trtllm10.rules().trtllm_reserve_to_completion);
        assert!(EngineVersion::ALL
            .iter()
            .filter(|v| v.engine() != EngineKind::Trtllm)
            .all(|v| !v.rules().trtllm_reserve_to_completion));
    }

    #[test]
    fn a_cache_starts_with_the_newest_vllm_rules() {
        let newest = EngineVersion::newest(EngineKind::Vllm).rules().cache_rules(EngineKind::Vllm);
        assert_eq!(newest, crate::cache::CacheRules::NEWEST_VLLM);
        let sglang = EngineVersion::Sglang05.rules().cache_rules(EngineKind::Sglang);
        assert_eq!(sglang.sglang, Some(EngineVersion::Sglang05.rules().sglang_cache()));
        assert_eq!(EngineVersion::Sglang05.rules().cache_rules(EngineKind::Vllm).sglang, None);
    }

    #[test]
    fn memory_defaults_per_bundle() {
        let r = EngineVersion::Vllm033.rules();
        assert_eq!((r.gpu_memory_utilization, r.vllm_cudagraph_memory_estimate), (0.92, true));
        for old in [EngineVersion::Vllm018, EngineVersion::VllmV0, EngineVersion::VllmV008] {
            let r = old.rules();
            assert_eq!((r.gpu_memory_utilization, r.vllm_cudagraph_memory_estimate), (0.9, false), "{old}");
        }
    }
}
