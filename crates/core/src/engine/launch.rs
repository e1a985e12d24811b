//! What an engine's launch reads and decides: its flags ([`EngineFlags`]), the machine
//! ([`Machine`]) and the outcome ([`Launch`]: batch limits and the KV pool in tokens). Each
//! engine owns its launch (`vllm::launch` for both vLLM engines, `sglang::launch::launch`,
//! `lightllm::launch`, `trtllm::launch`); [`super::start`] picks the engine's, and
//! `config::resolve`, which knows no engine's rules, orders the steps around it.

use crate::catalog::{Gpu, Model};
use crate::cost::spec::SpecAlgorithm;
use crate::cost::Deployment;
use crate::vllm_memory::{MemoryOverrides, ProfileRun, VllmMemory};

/// The flags an engine reads at start-up (the run options' engine-facing part), as given:
/// `None` is the engine's default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineFlags {
    /// vLLM `--max-num-seqs`, LightLLM `--running_max_req_size`, TensorRT-LLM `max_batch_size`.
    pub max_num_seqs: Option<u32>,
    /// vLLM `--max-num-batched-tokens`, LightLLM `--batch_max_tokens`, TensorRT-LLM `max_num_tokens`.
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM `--enable-chunked-prefill` / `--no-enable-chunked-prefill`.
    pub enable_chunked_prefill: Option<bool>,
    /// SGLang and LightLLM `--chunked-prefill-size` (0 or less: off).
    pub chunked_prefill_size: Option<i64>,
    /// SGLang `--max-prefill-tokens`.
    pub max_prefill_tokens: u32,
    /// SGLang `--max-running-requests`.
    pub max_running_requests: Option<u32>,
    /// SGLang and LightLLM `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// SGLang and LightLLM `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// The speculative decoding draft (SGLang's running limit follows it).
    pub speculative: SpecAlgorithm,
    /// vLLM's memory terms set by hand.
    pub memory: MemoryOverrides,
    /// vLLM V0 `--num-scheduler-steps`.
    pub num_scheduler_steps: Option<u32>,
    /// vLLM V0 `--disable-async-output-proc`.
    pub disable_async_output_proc: bool,
    /// vLLM `--enforce-eager` (no CUDA graphs).
    pub enforce_eager: bool,
    /// `--async-scheduling` / `--no-async-scheduling` (SGLang `--disable-overlap-schedule`).
    pub overlap: Option<bool>,
    /// Pipeline stages.
    pub pp: u64,
    /// vLLM `--block-size` (the paged cache's block, tokens).
    pub block_size: u32,
    /// vLLM `--num-gpu-blocks-override`.
    pub num_gpu_blocks_override: Option<u64>,
}

/// The machine an engine is launched on, as resolved before the engine: the catalog's GPU and
/// model, the parallel layout, the memory share and the longest request.
#[derive(Debug, Clone, Copy)]
pub struct Machine<'a> {
    pub gpu: &'a Gpu,
    pub model: &'a Model,
    pub layout: &'a Deployment,
    pub tp: u64,
    /// `--gpu-memory-utilization` (or the bundle's default): vLLM's and TensorRT-LLM's share.
    pub gpu_memory_utilization: f64,
    pub max_model_len: u64,
    pub kv_bytes_per_token_per_rank: u64,
    /// vLLM's LoRA slots on one rank (0 without `--enable-lora`).
    pub lora_slot_bytes_per_rank: u64,
}

impl Machine<'_> {
    /// Attention data-parallel groups, each with its own KV pool.
    pub fn dp(&self) -> u64 {
        self.layout.parallel.dp_attention.max(1)
    }

    /// The model's weights on one rank, in bytes.
    pub fn weight_bytes_per_rank(&self) -> f64 {
        self.layout.parallel.weight_bytes_per_rank(self.model)
    }
}

/// What an engine decided at start-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    /// SGLang's and LightLLM's chunk (0: off); 0 for the others.
    pub chunked_prefill_size: u32,
    /// The KV pool in tokens, all attention DP groups together.
    pub kv_tokens: u64,
    /// The pool the engine's own sizing gave before a user's `--max-total-tokens` capped it
    /// (SGLang warns when the cap is above it).
    pub profiled_kv_tokens: u64,
    /// SGLang's and LightLLM's memory share.
    pub mem_fraction_static: Option<f64>,
    /// vLLM's memory budget and the profile run it was measured with.
    pub vllm_memory: Option<(VllmMemory, ProfileRun)>,
}

/// A launched engine as its start-up checks see it.
#[derive(Debug, Clone, Copy)]
pub struct Started<'a> {
    pub engine: &'a super::EngineConfig,
    pub model: &'a Model,
    pub max_model_len: u64,
    /// The paged cache's block size (`None`: another cache).
    pub block_size: Option<u32>,
    pub kv_capacity_tokens: u64,
    pub kv_bytes_per_token_per_rank: u64,
    /// `--num-gpu-blocks-override` was given.
    pub blocks_overridden: bool,
}

impl Started<'_> {
    /// The engine's refusal to start, with its message.
    pub fn refuse(&self, message: String) -> crate::error::Result<()> {
        Err(crate::error::Error::StartupRefused { engine: self.engine.engine.name().to_string(), message })
    }
}
