//! SGLang's memory sizing at start-up: GPU memory as SGLang reads it, the defaults that follow it
//! (chunked prefill size, decode CUDA graphs), the default `mem_fraction_static` and the token
//! pool it leaves (ENGINE_SPEC §3.1).

use crate::catalog::Gpu;

/// GPU memory as SGLang reads it (`utils/common.py` `get_nvgpu_memory_capacity`: nvidia-smi's
/// `memory.total`, MiB), which is what its memory defaults compare and divide. Known values of
/// the built-in GPUs; otherwise the datasheet GiB.
pub fn sglang_gpu_mem_mib(gpu: &Gpu) -> f64 {
    match gpu.name.as_str() {
        "h100-sxm" | "h100-pcie" | "h800" => 81_559.0,
        "h200" => 143_771.0,
        "h20" => 97_871.0,
        "a100-80gb" => 81_920.0,
        "a100-40gb" => 40_960.0,
        "l40s" => 46_068.0,
        "a10" => 23_028.0,
        _ => gpu.memory_gb * 1024.0,
    }
}

/// SGLang's defaults that depend on GPU memory (ENGINE_SPEC §3.1): chunked_prefill_size and
/// the decode CUDA graphs' max batch size, by nvidia-smi MiB. `reserve_by_chunk`: 0.5.23's table
/// (`_handle_gpu_memory_settings`); else 0.4.10's chunk sizes (its graphs do not enter its
/// memory reserve).
pub fn sglang_memory_defaults(gpu: &Gpu, tp: u64, reserve_by_chunk: bool) -> (u32, u32) {
    let mib = sglang_gpu_mem_mib(gpu);
    let gib = |g: f64| g * 1024.0;
    let big_tp = tp >= 4;
    if !reserve_by_chunk {
        let chunk = if mib < gib(35.0) {
            2048
        } else if mib < gib(160.0) {
            8192
        } else {
            16384
        };
        return (chunk, if big_tp { 512 } else { 256 });
    }
    match mib {
        m if m < gib(20.0) => (2048, 8),
        m if m < gib(35.0) => (4096, if big_tp { 160 } else { 48 }),
        m if m < gib(60.0) => (4096, if big_tp { 160 } else { 32 }),
        m if m < gib(160.0) => (8192, if big_tp { 512 } else { 256 }),
        _ => (16384, 512),
    }
}

/// SGLang's default `mem_fraction_static`, rounded to 3 decimals. `reserve_by_chunk` (0.5.23,
/// `arg_groups/memory_hook.py`): the GPU memory less 512 MiB, 1.5 MiB per activation token —
/// `max(chunked_prefill_size, 2048)` with the chunk in use, `max(max_prefill_tokens, 2048)`
/// with chunking off (`chunked_prefill_size` 0) — 2 MiB per decode CUDA graph batch and TP/8
/// GiB, at least 10 GiB on GPUs above 60 GiB. Else 0.4.10's fixed reserve by GPU memory.
pub fn sglang_mem_fraction_static(
    gpu: &Gpu,
    tp: u64,
    chunked_prefill_size: u32,
    max_prefill_tokens: u32,
    cuda_graph_max_bs: u32,
    reserve_by_chunk: bool,
) -> f64 {
    let mib = sglang_gpu_mem_mib(gpu);
    let gib = |g: f64| g * 1024.0;
    let reserved = if reserve_by_chunk {
        let activation_tokens =
            if chunked_prefill_size > 0 { chunked_prefill_size } else { max_prefill_tokens }.max(2048) as f64;
        let r = 512.0 + activation_tokens * 1.5 + tp as f64 / 8.0 * 1024.0 + cuda_graph_max_bs as f64 * 2.0;
        if mib > gib(60.0) {
            r.max(gib(10.0))
        } else {
            r
        }
    } else {
        let p = tp as f64;
        match mib {
            m if m < gib(35.0) => gib(2.8 + p / 10.0),
            m if m < gib(90.0) => gib(9.5 + p / 2.0),
            m if m < gib(160.0) => gib(12.0 + p / 2.0),
            _ => gib(32.0),
        }
    };
    (((mib - reserved) / mib) * 1000.0).round() / 1000.0
}

/// KV capacity in tokens of one rank as SGLang computes it (`profile_max_num_token`):
/// `mem_fraction_static × memory − weights` over the rank's KV bytes per token (`get_cell_size_per_token`: for MLA the whole latent,
/// else the rank's KV heads, of the rank's layers).
pub fn sglang_pool_tokens_per_rank(gpu: &Gpu, weights: f64, kv_bytes_per_token: u64, mem_fraction_static: f64) -> u64 {
    (sglang_rest_bytes_per_rank(gpu, weights, mem_fraction_static) / kv_bytes_per_token.max(1) as f64).max(0.0) as u64
}

/// The bytes of one rank left for the caches (`_profile_available_bytes`' `rest_memory`):
/// `mem_fraction_static × memory − weights`.
pub fn sglang_rest_bytes_per_rank(gpu: &Gpu, weights: f64, mem_fraction_static: f64) -> f64 {
    sglang_gpu_mem_mib(gpu) * (1u64 << 20) as f64 * mem_fraction_static - weights
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::gpu;

    #[test]
    fn sglang_defaults_follow_the_spec_example() {
        // H100-80GB, TP1: reserved = max(512 + 8192 × 1.5 + 256 × 2 + 128, 10240) = 13440 MiB
        // of nvidia-smi's 81559 MiB → 0.835, the spec's example.
        let h100 = gpu("h100-sxm", None).unwrap();
        let (chunk, graphs) = sglang_memory_defaults(&h100, 1, true);
        assert_eq!((chunk, graphs), (8192, 256));
        assert_eq!(sglang_mem_fraction_static(&h100, 1, chunk, 16384, graphs, true), 0.835);
        assert_eq!(sglang_memory_defaults(&gpu("a100-40gb", None).unwrap(), 1, true), (4096, 32));
        // A10 (23028 MiB): 0.5.23 chunks by 4096 with 48 graphs; 0.4.10 by 2048.
        let a10 = gpu("a10", None).unwrap();
        assert_eq!(sglang_memory_defaults(&a10, 1, true), (4096, 48));
        assert_eq!(sglang_memory_defaults(&a10, 1, false).0, 2048);
        // Chunking off: the activation reserve follows max_prefill_tokens (16384 → 512 + 24576 +
        // 512 + 128 = 25728 MiB) instead of the chunk (13440 MiB).
        assert_eq!(sglang_mem_fraction_static(&h100, 1, 0, 16384, graphs, true), 0.685);
        // A user's 2048-token chunk: 512 + 3072 + 512 + 128 = 4224 → the 10 GiB floor.
        assert_eq!(sglang_mem_fraction_static(&h100, 1, 2048, 16384, graphs, true), 0.874);
        // 0.4.10: (9.5 + 1/2) GiB of 81559 MiB whatever the chunk.
        assert_eq!(sglang_mem_fraction_static(&h100, 1, 0, 16384, graphs, false), 0.874);
        assert_eq!(sglang_mem_fraction_static(&gpu("h200", None).unwrap(), 2, 8192, 16384, 256, false), 0.907);
    }
}
