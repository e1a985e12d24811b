//! vLLM's KV pool at start-up, as the paged cache sees it: a budget set by hand
//! (`--kv-cache-memory-bytes`, `--num-gpu-blocks-override`) must fit the GPU beside the weights,
//! the pool needs two blocks at least (block 0 is vLLM's null block), and too few blocks are
//! blamed on the setting at fault — the override, a memory term set by hand, or the memory share.
//! TensorRT-LLM's paged pool takes the same block count (its launch's token pool in blocks).

use super::launch::{EngineFlags, Launch, Machine};
use crate::catalog::Gpu;
use crate::error::{Error, Result};
use crate::vllm_memory::{MemoryOverrides, ProfileRun, VllmMemory};

/// A KV pool of `bytes_per_rank` on one rank within the GPU's memory less its weights, for the
/// flags that set the pool by hand (vLLM allocates what they ask after its memory check, and fails
/// with CUDA out of memory when it is more than the GPU holds).
fn check_pool_fits(flag: &str, asked: String, bytes_per_rank: f64, gpu: &Gpu, weights: f64) -> Result<()> {
    let room = gpu.cuda_total_bytes() as f64 - weights;
    if bytes_per_rank <= room {
        return Ok(());
    }
    let gib = |b: f64| b / (1u64 << 30) as f64;
    Err(Error::invalid(
        flag,
        format!(
            "{asked} need {:.1} GiB of KV per GPU, more than the {:.1} GiB a {} holds beside {:.1} GiB of weights \
             (vLLM would fail allocating the cache: CUDA out of memory)",
            gib(bytes_per_rank),
            gib(room.max(0.0)),
            gpu.name,
            gib(weights)
        ),
    ))
}

/// `--kv-cache-memory-bytes` within what one GPU holds beside its weights.
pub fn check_kv_budget(flags: &EngineFlags, m: &Machine) -> Result<()> {
    match flags.memory.kv_cache_memory_bytes {
        Some(b) => {
            check_pool_fits("--kv-cache-memory-bytes", format!("{b} bytes"), b as f64, m.gpu, m.weight_bytes_per_rank())
        }
        None => Ok(()),
    }
}

/// The paged pool's block count: `--num-gpu-blocks-override` when given, else what the launch's
/// memory budget holds (vLLM's profile run; the launch's token pool otherwise), on every attention
/// DP group. `vllm`: the override is checked against memory, as vLLM allocates it
/// (`kv_cache_utils.get_num_blocks` applies it after the memory check, on every rank of a group).
pub fn gpu_blocks(vllm: bool, flags: &EngineFlags, m: &Machine, launched: &Launch) -> Result<u64> {
    let dp = m.dp();
    let modelled = launched
        .vllm_memory
        .map_or(launched.kv_tokens / flags.block_size as u64, |(mem, _)| mem.num_gpu_blocks(flags.block_size) * dp);
    let blocks = flags.num_gpu_blocks_override.unwrap_or(modelled);
    if let (true, Some(b)) = (vllm, flags.num_gpu_blocks_override) {
        let per_rank = b.div_ceil(dp) as f64 * flags.block_size as f64 * m.kv_bytes_per_token_per_rank as f64;
        check_pool_fits(
            "--num-gpu-blocks-override",
            format!("{b} blocks"),
            per_rank,
            m.gpu,
            m.weight_bytes_per_rank(),
        )?;
    }
    if blocks < 2 {
        return Err(too_few_blocks(flags, m, blocks, launched.vllm_memory.map(|(_, r)| r)));
    }
    if blocks > u32::MAX as u64 {
        return Err(Error::invalid(
            "--num-gpu-blocks-override",
            format!("{blocks} KV blocks: at most {} (block ids are 32-bit)", u32::MAX),
        ));
    }
    Ok(blocks)
}

/// The error for fewer than two KV blocks, naming the setting that caused it: the override when
/// one was given, else a memory term set by hand when the modelled term would leave room, else
/// the memory share (the model does not fit).
fn too_few_blocks(flags: &EngineFlags, m: &Machine, blocks: u64, run: Option<ProfileRun>) -> Error {
    let util = m.gpu_memory_utilization;
    let weights_gb = m.weight_bytes_per_rank() / 1e9;
    let usable_gb = m.gpu.memory_bytes() * util / 1e9;
    if flags.num_gpu_blocks_override.is_some() {
        return Error::invalid("--num-gpu-blocks-override", format!("{blocks}: at least 2 KV blocks are needed"));
    }
    if let Some(run) = run {
        let o = flags.memory;
        let blocks_without = |cleared: MemoryOverrides| {
            VllmMemory::laid_out(m.gpu, m.model, m.layout.parallel, m.kv_bytes_per_token_per_rank, util, run, cleared)
                .num_gpu_blocks(flags.block_size)
        };
        let gib = |v: Option<f64>| v.map(|g| format!("{g} GiB"));
        let terms = [
            (
                "--kv-cache-memory-bytes",
                o.kv_cache_memory_bytes.map(|b| format!("{b} bytes")),
                MemoryOverrides { kv_cache_memory_bytes: None, ..o },
            ),
            ("--activation-peak-gib", gib(o.activation_peak_gib), MemoryOverrides { activation_peak_gib: None, ..o }),
            (
                "--cudagraph-memory-gib",
                gib(o.cudagraph_memory_gib),
                MemoryOverrides { cudagraph_memory_gib: None, ..o },
            ),
            (
                "--non-torch-memory-gib",
                gib(o.non_torch_memory_gib),
                MemoryOverrides { non_torch_memory_gib: None, ..o },
            ),
        ];
        for (flag, set, cleared) in terms {
            if let Some(value) = set.filter(|_| blocks_without(cleared) >= 2) {
                return Error::invalid(
                    flag,
                    format!(
                        "{value} leaves no room for the KV cache: {usable_gb:.1} GB usable per GPU \
                         (gpu_memory_utilization {util}) − {weights_gb:.1} GB of weights"
                    ),
                );
            }
        }
    }
    Error::invalid(
        "--gpu-memory-utilization",
        format!(
            "{util}: the model does not fit (weights {weights_gb:.1} GB per GPU, {usable_gb:.1} GB usable; \
             try --tp or a larger GPU)"
        ),
    )
}
