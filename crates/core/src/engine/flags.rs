//! Which engine owns each engine-specific flag: one table ([`TABLE`]), each row naming the engines
//! whose server defines the flag (with where upstream defines it) and, for the others, their own
//! flag for the same knob. A flag given for an engine that does not have it is refused
//! ([`refuse_foreign`]), as the real server refuses an argument it does not know, instead of being
//! silently ignored; so is one an engine's server takes but whose effect cachesim does not model
//! for that engine, saying so. `config::resolve` checks the flags its options set; the command line
//! also checks the flags it was given at their defaults.

use super::EngineKind::{self, Lightllm, Sglang, Trtllm, Vllm, VllmV0};
use crate::error::{Error, Result};

/// One engine-specific flag: the engines that take it and, for the others, their own flag.
#[derive(Debug, Clone, Copy)]
pub struct EngineFlag {
    /// The flag as the command line spells it (`--max-num-seqs`).
    pub flag: &'static str,
    /// The engines whose server defines it (and cachesim models it for).
    pub engines: &'static [EngineKind],
    /// Engines whose server defines it too but whose rules here do not read it: refused all the
    /// same, saying so, rather than accepted and ignored.
    pub server_only: &'static [EngineKind],
    /// Another engine's own flag for the same knob, where it has one.
    pub instead: &'static [(EngineKind, &'static str)],
}

const VLLMS: &[EngineKind] = &[Vllm, VllmV0];
const BATCHED: &[EngineKind] = &[Vllm, VllmV0, Lightllm, Trtllm];
const SGLANG: &[EngineKind] = &[Sglang];
const POOLED: &[EngineKind] = &[Sglang, Lightllm];

/// Every engine-specific flag, with where each engine's server defines it, as read upstream: vLLM
/// `vllm/engine/arg_utils.py` `EngineArgs` (fields and `add_cli_args`; v1 from 0.11 on takes each
/// default from `SchedulerConfig` in `vllm/config/scheduler.py`, `CacheConfig` in
/// `vllm/config/cache.py`, `ModelConfig` in `vllm/config/model.py`; V0 as `EngineArgs` had it
/// before 0.11); SGLang `python/sglang/srt/server_args.py` `ServerArgs` and
/// `ServerArgs.add_cli_args` (0.4 and 0.5); LightLLM `lightllm/server/api_cli.py`
/// `make_argument_parser` (main at fc72ffab, 2025-07-11), which spells its flags with underscores;
/// TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` fields of `BaseLlmArgs` (shared by
/// `TorchLlmArgs`) and `KvCacheConfig` (1.0; `trtllm-serve`, `tensorrt_llm/commands/serve.py`
/// `serve`, spells `--max_batch_size`, `--max_num_tokens`, `--kv_cache_free_gpu_memory_fraction`,
/// the other fields going through `--extra_llm_api_options`). cachesim spells a knob the way the
/// first engine it models spells it: `--max-num-seqs` stands for LightLLM's
/// `--running_max_req_size` and TensorRT-LLM's `max_batch_size`.
pub const TABLE: &[EngineFlag] = &[
    // vLLM `EngineArgs.max_num_seqs` (`SchedulerConfig.max_num_seqs`); LightLLM
    // `--running_max_req_size`; TRT-LLM `BaseLlmArgs.max_batch_size`. SGLang has no
    // `--max-num-seqs`: `ServerArgs.max_running_requests`.
    EngineFlag {
        server_only: &[],
        flag: "--max-num-seqs",
        engines: BATCHED,
        instead: &[(Sglang, "--max-running-requests")],
    },
    // vLLM `EngineArgs.max_num_batched_tokens`; LightLLM `--batch_max_tokens`; TRT-LLM
    // `BaseLlmArgs.max_num_tokens`. SGLang's nearest: `ServerArgs.max_prefill_tokens`.
    EngineFlag {
        server_only: &[],
        flag: "--max-num-batched-tokens",
        engines: BATCHED,
        instead: &[(Sglang, "--max-prefill-tokens")],
    },
    // SGLang `ServerArgs.max_running_requests`; vLLM, LightLLM and TRT-LLM have no such flag.
    EngineFlag {
        server_only: &[],
        flag: "--max-running-requests",
        engines: SGLANG,
        instead: &[
            (Vllm, "--max-num-seqs"),
            (VllmV0, "--max-num-seqs"),
            (Lightllm, "--max-num-seqs"),
            (Trtllm, "--max-num-seqs"),
        ],
    },
    // SGLang `ServerArgs.max_prefill_tokens`; the others' new-token budget per step is the
    // row above's.
    EngineFlag {
        server_only: &[],
        flag: "--max-prefill-tokens",
        engines: SGLANG,
        instead: &[
            (Vllm, "--max-num-batched-tokens"),
            (VllmV0, "--max-num-batched-tokens"),
            (Lightllm, "--max-num-batched-tokens"),
            (Trtllm, "--max-num-batched-tokens"),
        ],
    },
    // SGLang `ServerArgs.schedule_policy` (vLLM's `EngineArgs.scheduling_policy`,
    // `--scheduling-policy`, orders by priority, not prefix; LightLLM's `--router_token_ratio` is
    // no queue order).
    EngineFlag { server_only: &[], flag: "--schedule-policy", engines: SGLANG, instead: &[] },
    // vLLM `EngineArgs.scheduling_policy` (`SchedulerConfig.policy`, fcfs or priority); V0 had
    // it too, with a preemption rule of its own that cachesim does not model.
    EngineFlag {
        server_only: &[VllmV0],
        flag: "--scheduling-policy",
        engines: &[Vllm],
        instead: &[(Sglang, "--enable-priority-scheduling")],
    },
    // SGLang's priority scheduling (`arg_groups/fields/schedule.py`, 0.5.23; engine/sglang/priority.rs).
    EngineFlag {
        server_only: &[],
        flag: "--enable-priority-scheduling",
        engines: SGLANG,
        instead: &[(Vllm, "--scheduling-policy priority")],
    },
    EngineFlag { server_only: &[], flag: "--schedule-low-priority-values-first", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--priority-scheduling-preemption-threshold", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--disable-priority-preemption", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--default-priority-value", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--retraction-policy", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--abort-on-priority-when-disabled", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.max_queued_requests` (`Scheduler._abort_on_queued_limit`).
    EngineFlag { server_only: &[], flag: "--max-queued-requests", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.schedule_conservativeness`.
    EngineFlag { server_only: &[], flag: "--schedule-conservativeness", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.mem_fraction_static`; LightLLM `--mem_fraction` (default 0.9).
    EngineFlag {
        server_only: &[],
        flag: "--mem-fraction-static",
        engines: POOLED,
        instead: &[
            (Vllm, "--gpu-memory-utilization"),
            (VllmV0, "--gpu-memory-utilization"),
            (Trtllm, "--kv-cache-free-gpu-mem-fraction"),
        ],
    },
    // vLLM `EngineArgs.gpu_memory_utilization` (`CacheConfig.gpu_memory_utilization`); TRT-LLM
    // `KvCacheConfig.free_gpu_memory_fraction`, whose cachesim alias is
    // `--kv-cache-free-gpu-mem-fraction`.
    EngineFlag {
        server_only: &[],
        flag: "--gpu-memory-utilization",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    // vLLM `EngineArgs.enable_chunked_prefill` (`--enable-chunked-prefill` /
    // `--no-enable-chunked-prefill`); TRT-LLM `BaseLlmArgs.enable_chunked_prefill` (default False).
    // SGLang turns chunking off with `--chunked-prefill-size -1`; LightLLM with
    // `--disable_chunked_prefill`, which cachesim spells `--chunked-prefill-size` 0 or below.
    EngineFlag {
        server_only: &[],
        flag: "--enable-chunked-prefill",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--chunked-prefill-size"), (Lightllm, "--chunked-prefill-size")],
    },
    EngineFlag {
        server_only: &[],
        flag: "--no-enable-chunked-prefill",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--chunked-prefill-size -1"), (Lightllm, "--chunked-prefill-size -1")],
    },
    // SGLang `ServerArgs.chunked_prefill_size`; LightLLM `--chunked_prefill_size` (default 4096).
    EngineFlag {
        server_only: &[],
        flag: "--chunked-prefill-size",
        engines: POOLED,
        instead: &[(Vllm, "--max-num-batched-tokens"), (VllmV0, "--enable-chunked-prefill")],
    },
    // vLLM `EngineArgs.long_prefill_token_threshold` (`SchedulerConfig`), read by the v1 scheduler
    // (`vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`). vLLM 0.9's V0 takes it too and
    // reads it only in `PartialPrefillMetadata.can_schedule` (`vllm/core/scheduler.py`), which
    // counts long prefills only with `--max-num-partial-prefills` above its default 1 (a flag
    // cachesim does not take): there it changes nothing, as in cachesim's V0 rule.
    EngineFlag { server_only: &[], flag: "--long-prefill-token-threshold", engines: VLLMS, instead: &[] },
    // vLLM `EngineArgs.num_scheduler_steps` (V0; gone from `EngineArgs` with V0 by 0.11).
    EngineFlag { server_only: &[], flag: "--num-scheduler-steps", engines: &[VllmV0], instead: &[] },
    // vLLM `EngineArgs.disable_async_output_proc` (V0's output processor; gone with V0 by 0.11).
    EngineFlag { server_only: &[], flag: "--disable-async-output-proc", engines: &[VllmV0], instead: &[] },
    // vLLM `EngineArgs.enforce_eager` (`ModelConfig.enforce_eager`): v1 takes it too, but cachesim
    // models it only through V0's async output processing. SGLang's nearest is
    // `--disable-cuda-graph`, LightLLM's `--disable_cudagraph`; cachesim has neither.
    EngineFlag { server_only: &[Vllm], flag: "--enforce-eager", engines: &[VllmV0], instead: &[] },
    // cachesim's inputs to vLLM's memory profile (`vllm/v1/worker/gpu_worker.py`
    // `Worker.determine_available_memory`), no upstream flags; and vLLM
    // `EngineArgs.kv_cache_memory_bytes` (`CacheConfig.kv_cache_memory_bytes`, from 0.11; vLLM 0.9
    // has no such flag, so for vllm-v0 it is cachesim's budget override only).
    EngineFlag {
        server_only: &[],
        flag: "--activation-peak-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        server_only: &[],
        flag: "--cudagraph-memory-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        server_only: &[],
        flag: "--non-torch-memory-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        server_only: &[],
        flag: "--kv-cache-memory-bytes",
        engines: VLLMS,
        instead: &[(Sglang, "--max-total-tokens"), (Lightllm, "--max-total-tokens")],
    },
    // SGLang `ServerArgs.enable_dp_attention` and `dp_size` (`--dp-size`). vLLM's DP is
    // `--data-parallel-size`, TRT-LLM's `BaseLlmArgs.enable_attention_dp`, LightLLM's `--dp`:
    // cachesim models DP attention only for SGLang.
    EngineFlag { server_only: &[], flag: "--enable-dp-attention", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--dp-size", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.moe_a2a_backend`, `enable_deepep_moe` (0.4's spelling; 0.5 keeps it,
    // deprecated, as `--moe-a2a-backend deepep`, in `ServerArgs.__post_init__`), `deepep_mode` and
    // `enable_two_batch_overlap`. vLLM's nearest (`--all2all-backend`, `--enable-dbo`) and
    // LightLLM's microbatch overlap are not modelled.
    EngineFlag { server_only: &[], flag: "--moe-a2a-backend", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--enable-deepep-moe", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--deepep-mode", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--enable-two-batch-overlap", engines: SGLANG, instead: &[] },
    // vLLM `EngineArgs.kv_offloading_size` and `kv_offloading_backend` (`CacheConfig`, 0.12 on;
    // v1 only); SGLang's HiCache (`arg_groups/fields/memory.py` `enable_hierarchical_cache`,
    // `hicache_ratio`, `hicache_size`, `hicache_write_policy`, 0.5.23). TensorRT-LLM's
    // `KvCacheConfig.host_cache_size` is not modelled yet. `--host-link-gbps` is cachesim's price
    // of either tier's copies.
    EngineFlag {
        server_only: &[],
        flag: "--kv-offloading-size",
        engines: &[Vllm],
        instead: &[(Sglang, "--enable-hierarchical-cache")],
    },
    EngineFlag { server_only: &[], flag: "--kv-offloading-backend", engines: &[Vllm], instead: &[] },
    // LMCache's own settings (`lmcache/v1/config.py` `chunk_size`, `max_local_disk_size`,
    // `remote_url`, 0.5.6); `--lmcache-disk-gbps` and `--lmcache-remote-{rtt-us,gbps}` are
    // cachesim's prices of its disk and its remote server.
    EngineFlag { server_only: &[], flag: "--lmcache-chunk-size", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--lmcache-max-local-disk-size", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--lmcache-disk-gbps", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--lmcache-remote-url", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--lmcache-remote-rtt-us", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--lmcache-remote-gbps", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--host-link-gbps", engines: &[Vllm, Sglang], instead: &[] },
    EngineFlag {
        server_only: &[],
        flag: "--enable-hierarchical-cache",
        engines: SGLANG,
        instead: &[(Vllm, "--kv-offloading-size")],
    },
    EngineFlag { server_only: &[], flag: "--hicache-ratio", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--hicache-size", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--hicache-write-policy", engines: SGLANG, instead: &[] },
    // SGLang `--hicache-storage-backend`, `--hicache-storage-prefetch-policy` (0.5.23), and
    // cachesim's price of the storage tier's I/O.
    EngineFlag { server_only: &[], flag: "--hicache-storage-backend", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--hicache-storage-prefetch-policy", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--storage-gbps", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--storage-latency-ms", engines: SGLANG, instead: &[] },
    // vLLM `SchedulerConfig.disable_hybrid_kv_cache_manager` and
    // `CacheConfig.prefix_cache_retention_interval` (0.33): the hybrid KV cache manager's; SGLang's
    // `ServerArgs.swa_full_tokens_ratio` and `disable_hybrid_swa_memory` (0.5.23): its window pool.
    EngineFlag { server_only: &[], flag: "--disable-hybrid-kv-cache-manager", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--prefix-cache-retention-interval", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[], flag: "--swa-full-tokens-ratio", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--disable-hybrid-swa-memory", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.mamba_radix_cache_strategy` (`arg_groups/fields/exec_.py`),
    // `mamba_full_memory_ratio`, `max_mamba_cache_size` (`arg_groups/fields/schedule.py`) and
    // `mamba_track_interval` (0.5.23): its recurrent-state pool. vLLM's Mamba cache is not
    // modelled here.
    EngineFlag { server_only: &[], flag: "--mamba-radix-cache-strategy", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--mamba-full-memory-ratio", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--max-mamba-cache-size", engines: SGLANG, instead: &[] },
    EngineFlag { server_only: &[], flag: "--mamba-track-interval", engines: SGLANG, instead: &[] },
    // vLLM `EngineArgs.enable_lora`, `max_loras`, `max_cpu_loras`, `max_lora_rank` (`LoRAConfig`,
    // `vllm/config/lora.py`) and the OpenAI server's `--lora-modules` (0.33; V0 had them too, not
    // modelled). SGLang's server takes `--enable-lora` and `--max-lora-rank` as well, with
    // `--max-loras-per-batch` and `--lora-paths` (`ServerArgs`): not modelled. `--lora-load-gbps`
    // is cachesim's price of reading an adapter.
    EngineFlag { server_only: &[VllmV0, Sglang], flag: "--enable-lora", engines: &[Vllm], instead: &[] },
    EngineFlag {
        server_only: &[VllmV0],
        flag: "--max-loras",
        engines: &[Vllm],
        instead: &[(Sglang, "--max-loras-per-batch (not modelled)")],
    },
    EngineFlag { server_only: &[VllmV0], flag: "--max-cpu-loras", engines: &[Vllm], instead: &[] },
    EngineFlag { server_only: &[VllmV0, Sglang], flag: "--max-lora-rank", engines: &[Vllm], instead: &[] },
    EngineFlag {
        server_only: &[VllmV0],
        flag: "--lora-modules",
        engines: &[Vllm],
        instead: &[(Sglang, "--lora-paths (not modelled)")],
    },
    EngineFlag { server_only: &[], flag: "--lora-load-gbps", engines: &[Vllm], instead: &[] },
];

/// The row of `flag`, if it is engine-specific.
pub fn row(flag: &str) -> Option<&'static EngineFlag> {
    TABLE.iter().find(|r| r.flag == flag)
}

/// Refuses the first of `given` that `engine` does not have (or has upstream without cachesim
/// modelling it), naming the engines that do and `engine`'s own flag for the knob where it has
/// one. Flags not in the table pass.
pub fn refuse_foreign<'a>(engine: EngineKind, given: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for flag in given {
        let Some(r) = row(flag) else { continue };
        if r.engines.contains(&engine) {
            continue;
        }
        let owners: Vec<String> = r.engines.iter().map(|e| format!("--engine {}", e.name())).collect();
        let owners = match owners.split_last() {
            Some((last, [])) => format!("{last} takes it"),
            Some((last, rest)) => format!("{} and {last} take it", rest.join(", ")),
            None => String::new(),
        };
        let e = engine.name();
        let mut message = if r.server_only.contains(&engine) {
            format!("not modelled for --engine {e} (its server takes it, but cachesim's rules for it do not read it; {owners})")
        } else {
            format!("not a flag of --engine {e} (its server refuses an argument it does not have; {owners})")
        };
        if let Some((_, own)) = r.instead.iter().find(|(e, _)| *e == engine) {
            message += &format!("; --engine {e} takes {own}");
        }
        return Err(Error::invalid(flag, message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_flag_names_the_engines_own() {
        let e = refuse_foreign(Sglang, ["--max-num-seqs"]).unwrap_err().to_string();
        assert!(e.contains("--max-running-requests") && e.contains("not a flag of --engine sglang"), "{e}");
        assert!(refuse_foreign(Vllm, ["--max-num-seqs", "--model"]).is_ok());
        let e = refuse_foreign(Vllm, ["--mem-fraction-static"]).unwrap_err().to_string();
        assert!(e.contains("--gpu-memory-utilization"), "{e}");
        let e = refuse_foreign(Vllm, ["--enforce-eager"]).unwrap_err().to_string();
        assert!(e.contains("not modelled for --engine vllm (its server takes it"), "{e}");
        let e = refuse_foreign(Sglang, ["--enforce-eager"]).unwrap_err().to_string();
        assert!(e.contains("not a flag of --engine sglang"), "{e}");
    }

    #[test]
    fn every_row_is_one_flag_with_an_owner() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(!r.engines.is_empty() && r.flag.starts_with("--"), "{}", r.flag);
            assert!(TABLE[..i].iter().all(|o| o.flag != r.flag), "{} twice", r.flag);
            assert!(r.instead.iter().all(|(e, _)| !r.engines.contains(e)), "{}", r.flag);
            assert!(r.server_only.iter().all(|e| !r.engines.contains(e)), "{}", r.flag);
        }
    }
}
