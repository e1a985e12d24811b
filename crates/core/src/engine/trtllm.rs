//! TensorRT-LLM 1.0 (PyTorch backend) sizing: the engine's defaults, the KV capacity its
//! `KvCacheCreator` arrives at, and the `max_batch_size` / `max_num_tokens` that `trtllm-bench
//! throughput` chooses when not told (docs/engines/trtllm.md has the upstream files). The
//! scheduling itself is vLLM v1's rule under [`Rules::trtllm_reserve_to_completion`](super::Rules)
//! ([`super::vllm`]).

use super::launch::{EngineFlags, Launch, Machine};
use crate::catalog::{Gpu, Model};
use crate::error::{Error, Result};

/// `max_batch_size` of `BaseLlmArgs` (`llmapi/llm_args.py`, 1.0) when neither the user nor
/// `trtllm-bench` sets it.
pub const DEFAULT_MAX_BATCH_SIZE: u32 = 2048;

/// `max_num_tokens` of `BaseLlmArgs` (`llmapi/llm_args.py`, 1.0).
pub const DEFAULT_MAX_NUM_TOKENS: u32 = 8192;

/// `tokens_per_block` of the KV cache (`KvCacheConfig`, 32 tokens a block).
pub const TOKENS_PER_BLOCK: u32 = 32;

/// Memory the profiling run holds beside weights and activations (CUDA context, cuBLAS and
/// NCCL workspaces), bytes per GPU: vLLM's measured non-torch figure stands in
/// ([`crate::vllm_memory::NON_TORCH_GIB`]).
const NON_TORCH_BYTES: f64 = crate::vllm_memory::NON_TORCH_GIB * (1u64 << 30) as f64;

/// TensorRT-LLM's launch as `trtllm-bench throughput` runs it: `max_batch_size` and
/// `max_num_tokens` (given, else its defaults) and the KV pool [`kv_tokens_per_rank`] leaves; its
/// context chunking, off by default, is refused as not modelled.
pub fn launch(flags: &EngineFlags, m: &Machine) -> Result<Launch> {
    let seqs = flags.max_num_seqs.unwrap_or(DEFAULT_MAX_BATCH_SIZE);
    let tokens = flags.max_num_batched_tokens.unwrap_or(DEFAULT_MAX_NUM_TOKENS);
    let kv = kv_tokens_per_rank(
        m.gpu,
        m.model,
        m.tp,
        m.weight_bytes_per_rank(),
        m.kv_bytes_per_token_per_rank,
        m.gpu_memory_utilization,
        tokens,
    );
    if flags.enable_chunked_prefill == Some(true) {
        return Err(Error::invalid(
            "--enable-chunked-prefill",
            "TensorRT-LLM's context chunking (off by default, as trtllm-bench runs) is not modelled",
        ));
    }
    Ok(Launch {
        max_num_seqs: seqs,
        max_num_batched_tokens: tokens,
        chunked_prefill_size: 0,
        kv_tokens: kv * m.dp(),
        profiled_kv_tokens: kv * m.dp(),
        mem_fraction_static: None,
        vllm_memory: None,
    })
}

/// KV tokens of one rank: `KvCacheCreator` (`_torch/pyexecutor/_util.py`, `_cal_max_tokens`)
/// takes `(total − peak) × free_gpu_memory_fraction` over the KV bytes per token, the peak
/// being what its profiling forward over `max_num_tokens` tokens held: the weights, the
/// activations (modelled as vLLM's profile-run peak, [`crate::vllm_memory::activation_peak_bytes`],
/// with one sampled row a dummy request) and the non-torch memory.
pub fn kv_tokens_per_rank(
    gpu: &Gpu,
    model: &Model,
    tp: u64,
    weights_per_rank: f64,
    kv_bytes_per_token_per_rank: u64,
    fraction: f64,
    max_num_tokens: u32,
) -> u64 {
    let activations = crate::vllm_memory::activation_peak_bytes(model, tp, max_num_tokens, 1) as f64;
    let free = gpu.cuda_total_bytes() as f64 - weights_per_rank - activations - NON_TORCH_BYTES;
    (free * fraction / kv_bytes_per_token_per_rank.max(1) as f64).max(0.0) as u64
}

/// What `trtllm-bench` is told about the run: the data set's mean lengths and its longest
/// prompt, the parallelism, the KV share and the checkpoint's dtypes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchInput {
    pub avg_isl: f64,
    pub avg_osl: f64,
    pub max_isl: u32,
    pub tp: u64,
    pub pp: u64,
    /// `--kv_cache_free_gpu_mem_fraction`.
    pub kv_fraction: f64,
    /// Bytes per weight of the quantisation (`BYTES_PER_ELEM`: FP8 1, none 2).
    pub weight_bytes: f64,
    /// Bytes per KV element (the checkpoint's `kv_cache_quant_algo`: FP8 1, none 2).
    pub kv_bytes: f64,
    /// `--enable_chunked_prefill` (off by default).
    pub chunked: bool,
}

/// `trtllm-bench throughput`'s `max_batch_size` and `max_num_tokens` when the command line
/// sets neither (`bench/benchmark/utils/general.py` `get_settings` →
/// `bench/build/build.py` `get_benchmark_engine_settings` → `bench/build/tuning.py`
/// `calc_engine_setting`, `finetune_setting`): the requests of mean length that fit the KV share
/// of `device memory × GPUs − weights` (KV heads at least TP), capped at 4,096 per pipeline
/// stage, rounded up (at least 64; to 32, 128 or 256 by size); tokens = that × (1 + ISL/OSL),
/// capped at 32,768, rounded up (at least 2,048; to 256, 512 or 1,024 by size); without chunking
/// at least the longest prompt plus the batch size.
pub fn bench_settings(gpu: &Gpu, model: &Model, b: BenchInput) -> (u32, u32) {
    const GIB: f64 = (1u64 << 30) as f64;
    let byte_per_token =
        2.0 * model.layers as f64 * b.tp.max(model.kv_heads) as f64 * model.head_dim as f64 * b.kv_bytes / GIB;
    let n_gpus = (b.tp * b.pp) as f64;
    let engine_size = model.params_b * 1e9 * b.weight_bytes / GIB;
    let total = gpu.cuda_total_bytes() as f64 / GIB * n_gpus;
    let cache_memory = (total - engine_size) * b.kv_fraction;
    let max_requests = (cache_memory / (byte_per_token * (b.avg_isl + b.avg_osl))).max(0.0);
    let raw_bs = max_requests.min(4096.0) / b.pp as f64;
    let raw_token = (raw_bs * (1.0 + b.avg_isl / b.avg_osl)).min(32768.0);
    let round = |x: f64, unit: f64| unit * (x / unit).ceil();
    let bs = if raw_bs < 256.0 {
        round(raw_bs, 32.0).max(64.0)
    } else if raw_bs < 1024.0 {
        round(raw_bs, 128.0)
    } else {
        round(raw_bs, 256.0)
    };
    let tokens = if raw_token < 4096.0 {
        round(raw_token, 256.0).max(2048.0)
    } else if raw_token < 8192.0 {
        round(raw_token, 512.0)
    } else {
        round(raw_token, 1024.0)
    };
    let (bs, mut tokens) = (bs as u32, tokens as u32);
    if !b.chunked {
        tokens = tokens.max(b.max_isl + bs);
    }
    (bs, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(isl: u32, osl: u32, tp: u64) -> BenchInput {
        BenchInput {
            avg_isl: isl as f64,
            avg_osl: osl as f64,
            max_isl: isl,
            tp,
            pp: 1,
            kv_fraction: 0.95,
            weight_bytes: 1.0,
            kv_bytes: 2.0,
            chunked: false,
        }
    }

    /// By hand, Llama-3.1-8B FP8 on one H200 (139.80 GiB as CUDA reports it), 0.95:
    /// engine 8.03e9 B = 7.4785 GiB; KV share (139.8007 − 7.4785) × 0.95 = 125.706 GiB;
    /// 2 × 32 × 8 × 128 × 2 B = 131,072 B = 1.2207e-4 GiB a token.
    /// 128/128: 125.706 / (1.2207e-4 × 256) = 4,022.6 requests → batch 256 × 16 = 4,096;
    /// tokens 8,045.2 → 512 × 16 = 8,192 (above 128 + 4,096).
    /// 20000/2000: 46.81 requests → batch 64 (the floor); tokens 46.81 × 11 = 514.9 → 2,048,
    /// raised to the longest prompt plus the batch, 20,064.
    /// 2048/128: 473.2 requests → 128 × 4 = 512; tokens 473.2 × 17 = 8,045.2 → 512 × 16 = 8,192
    /// (above 2,048 + 512).
    #[test]
    fn bench_settings_by_hand() {
        let gpu = crate::catalog::gpu("h200", None).unwrap();
        let m = crate::catalog::model("llama-3.1-8b", None).unwrap();
        assert_eq!(bench_settings(&gpu, &m, input(128, 128, 1)), (4096, 8192));
        assert_eq!(bench_settings(&gpu, &m, input(20000, 2000, 1)), (64, 20064));
        assert_eq!(bench_settings(&gpu, &m, input(2048, 128, 1)), (512, 8192));
        // Chunking on: no floor from the longest prompt.
        assert_eq!(bench_settings(&gpu, &m, BenchInput { chunked: true, ..input(20000, 2000, 1) }), (64, 2048));
    }

    /// KV tokens: the free memory after weights, activations and the non-torch share, times
    /// the fraction, over the bytes per token; nothing when the weights do not fit.
    #[test]
    fn kv_tokens_by_hand() {
        let gpu = crate::catalog::gpu("h200", None).unwrap();
        let m = crate::catalog::model("llama-3.1-8b", None).unwrap();
        let act = crate::vllm_memory::activation_peak_bytes(&m, 1, 8192, 1) as f64;
        let free = 150_109_880_320.0 - 10e9 - act - NON_TORCH_BYTES;
        let want = (free * 0.9 / 131072.0) as u64;
        assert_eq!(kv_tokens_per_rank(&gpu, &m, 1, 10e9, 131072, 0.9, 8192), want);
        assert_eq!(kv_tokens_per_rank(&gpu, &m, 1, 200e9, 131072, 0.9, 8192), 0);
    }
}
