//! Which engine owns each engine-specific flag: one table ([`TABLE`]), each row naming the
//! engines whose server defines the flag (with where upstream defines it) and, for the others,
//! their own flag for the same knob. A flag given for an engine that does not have it is
//! refused ([`refuse_foreign`]), as the real server refuses an argument it does not know,
//! instead of being silently ignored. `config::resolve` checks the flags its options set; the
//! command line also checks the flags it was given at their defaults.

use super::EngineKind::{self, Lightllm, Sglang, Trtllm, Vllm, VllmV0};
use crate::error::{Error, Result};

/// One engine-specific flag: the engines that take it and, for the others, their own flag.
#[derive(Debug, Clone, Copy)]
pub struct EngineFlag {
    /// The flag as the command line spells it (`--max-num-seqs`).
    pub flag: &'static str,
    /// The engines whose server defines it (and cachesim models it for).
    pub engines: &'static [EngineKind],
    /// Another engine's own flag for the same knob, where it has one.
    pub instead: &'static [(EngineKind, &'static str)],
}

const VLLMS: &[EngineKind] = &[Vllm, VllmV0];
const BATCHED: &[EngineKind] = &[Vllm, VllmV0, Lightllm, Trtllm];
const SGLANG: &[EngineKind] = &[Sglang];
const POOLED: &[EngineKind] = &[Sglang, Lightllm];

/// Every engine-specific flag. Upstream definitions: vLLM `vllm/engine/arg_utils.py`
/// `EngineArgs` (0.6–0.11), SGLang `python/sglang/srt/server_args.py` `ServerArgs` (0.4–0.5),
/// LightLLM `lightllm/server/api_cli.py` `make_argument_parser`, TensorRT-LLM
/// `tensorrt_llm/llmapi/llm_args.py` (`TorchLlmArgs`, `KvCacheConfig`).
pub const TABLE: &[EngineFlag] = &[
    // vLLM `EngineArgs.max_num_seqs`; LightLLM `--running_max_req_size`; TRT-LLM `max_batch_size`.
    EngineFlag { flag: "--max-num-seqs", engines: BATCHED, instead: &[(Sglang, "--max-running-requests")] },
    // vLLM `EngineArgs.max_num_batched_tokens`; LightLLM `--batch_max_tokens`; TRT-LLM `max_num_tokens`.
    EngineFlag { flag: "--max-num-batched-tokens", engines: BATCHED, instead: &[(Sglang, "--max-prefill-tokens")] },
    // SGLang `ServerArgs.max_running_requests`.
    EngineFlag {
        flag: "--max-running-requests",
        engines: SGLANG,
        instead: &[
            (Vllm, "--max-num-seqs"),
            (VllmV0, "--max-num-seqs"),
            (Lightllm, "--max-num-seqs"),
            (Trtllm, "--max-num-seqs"),
        ],
    },
    // SGLang `ServerArgs.max_prefill_tokens`.
    EngineFlag {
        flag: "--max-prefill-tokens",
        engines: SGLANG,
        instead: &[
            (Vllm, "--max-num-batched-tokens"),
            (VllmV0, "--max-num-batched-tokens"),
            (Lightllm, "--max-num-batched-tokens"),
            (Trtllm, "--max-num-batched-tokens"),
        ],
    },
    // SGLang `ServerArgs.schedule_policy` (vLLM's `--scheduling-policy` orders by priority, not prefix).
    EngineFlag { flag: "--schedule-policy", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.schedule_conservativeness`.
    EngineFlag { flag: "--schedule-conservativeness", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.mem_fraction_static`; LightLLM `--mem_fraction`.
    EngineFlag {
        flag: "--mem-fraction-static",
        engines: POOLED,
        instead: &[
            (Vllm, "--gpu-memory-utilization"),
            (VllmV0, "--gpu-memory-utilization"),
            (Trtllm, "--kv-cache-free-gpu-mem-fraction"),
        ],
    },
    // vLLM `EngineArgs.gpu_memory_utilization`; TRT-LLM `KvCacheConfig.free_gpu_memory_fraction`.
    EngineFlag {
        flag: "--gpu-memory-utilization",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    // vLLM `EngineArgs.enable_chunked_prefill`; TRT-LLM `enable_chunked_prefill`.
    EngineFlag {
        flag: "--enable-chunked-prefill",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--chunked-prefill-size"), (Lightllm, "--chunked-prefill-size")],
    },
    EngineFlag {
        flag: "--no-enable-chunked-prefill",
        engines: &[Vllm, VllmV0, Trtllm],
        instead: &[(Sglang, "--chunked-prefill-size -1"), (Lightllm, "--chunked-prefill-size -1")],
    },
    // SGLang `ServerArgs.chunked_prefill_size`; LightLLM `--chunked_prefill_size`.
    EngineFlag {
        flag: "--chunked-prefill-size",
        engines: POOLED,
        instead: &[(Vllm, "--max-num-batched-tokens"), (VllmV0, "--enable-chunked-prefill")],
    },
    // vLLM `EngineArgs.long_prefill_token_threshold` (read by the v1 scheduler cachesim models).
    EngineFlag { flag: "--long-prefill-token-threshold", engines: &[Vllm], instead: &[] },
    // vLLM `EngineArgs.num_scheduler_steps` (V0 only; v1 dropped multi-step scheduling).
    EngineFlag { flag: "--num-scheduler-steps", engines: &[VllmV0], instead: &[] },
    // vLLM `EngineArgs.disable_async_output_proc` (V0's output processor).
    EngineFlag { flag: "--disable-async-output-proc", engines: &[VllmV0], instead: &[] },
    // vLLM `EngineArgs.enforce_eager` (modelled only through V0's async output processing).
    EngineFlag { flag: "--enforce-eager", engines: &[VllmV0], instead: &[] },
    // vLLM's memory profile terms (`vllm/worker/gpu_worker.py` `determine_available_memory`) and
    // `EngineArgs.kv_cache_memory_bytes`.
    EngineFlag {
        flag: "--activation-peak-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        flag: "--cudagraph-memory-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        flag: "--non-torch-memory-gib",
        engines: VLLMS,
        instead: &[(Sglang, "--mem-fraction-static"), (Lightllm, "--mem-fraction-static")],
    },
    EngineFlag {
        flag: "--kv-cache-memory-bytes",
        engines: VLLMS,
        instead: &[(Sglang, "--max-total-tokens"), (Lightllm, "--max-total-tokens")],
    },
    // SGLang `ServerArgs.enable_dp_attention` and `dp_size`.
    EngineFlag { flag: "--enable-dp-attention", engines: SGLANG, instead: &[] },
    EngineFlag { flag: "--dp-size", engines: SGLANG, instead: &[] },
    // SGLang `ServerArgs.moe_a2a_backend`, `enable_deepep_moe` (0.4), `deepep_mode` and
    // `enable_two_batch_overlap`.
    EngineFlag { flag: "--moe-a2a-backend", engines: SGLANG, instead: &[] },
    EngineFlag { flag: "--enable-deepep-moe", engines: SGLANG, instead: &[] },
    EngineFlag { flag: "--deepep-mode", engines: SGLANG, instead: &[] },
    EngineFlag { flag: "--enable-two-batch-overlap", engines: SGLANG, instead: &[] },
];

/// The row of `flag`, if it is engine-specific.
pub fn row(flag: &str) -> Option<&'static EngineFlag> {
    TABLE.iter().find(|r| r.flag == flag)
}

/// Refuses the first of `given` that `engine` does not have, naming the engines that do and
/// `engine`'s own flag for the knob where it has one. Flags not in the table pass.
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
        let mut message = format!(
            "not a flag of --engine {} (its server refuses an argument it does not have; {owners})",
            engine.name()
        );
        if let Some((_, own)) = r.instead.iter().find(|(e, _)| *e == engine) {
            message += &format!("; --engine {} takes {own}", engine.name());
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
    }

    #[test]
    fn every_row_is_one_flag_with_an_owner() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(!r.engines.is_empty() && r.flag.starts_with("--"), "{}", r.flag);
            assert!(TABLE[..i].iter().all(|o| o.flag != r.flag), "{} twice", r.flag);
            assert!(r.instead.iter().all(|(e, _)| !r.engines.contains(e)), "{}", r.flag);
        }
    }
}
