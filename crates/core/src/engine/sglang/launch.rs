//! SGLang's launch (`server_args.py`, `model_executor/model_runner.py`, 0.4.10 and 0.5.23 by
//! bundle): the chunk and decode graphs its memory defaults give, the running limit (48 under
//! EAGLE/MTP speculation when not given), the default `mem_fraction_static` and the token pool it
//! leaves, capped by `--max-total-tokens` (with SGLang's warning when the cap is above it);
//! `--max-running-requests 0` refused; the vLLM memory flags and `--enable-chunked-prefill`
//! refused, with the flags SGLang sizes and chunks by.

use super::memory::{sglang_mem_fraction_static, sglang_memory_defaults, sglang_pool_tokens_per_rank};
use crate::cost::spec::SpecAlgorithm;
use crate::engine::launch::{EngineFlags, Launch, Machine, Started};
use crate::engine::EngineVersion;
use crate::error::{Error, Result};

/// SGLang's `max_running_requests` when EAGLE or MTP speculation runs and none is given.
pub const EAGLE_MAX_RUNNING_REQUESTS: u32 = 48;

/// SGLang's limits and token pool at start-up.
pub fn launch(version: EngineVersion, flags: &EngineFlags, m: &Machine) -> Result<Launch> {
    let rules = version.rules();
    // 0 would leave SGLang a request pool that admits nothing (its scheduler waits forever),
    // refused as vLLM's `--max-num-seqs 0` is.
    if flags.max_running_requests == Some(0) {
        return Err(Error::invalid("--max-running-requests", "0 must be at least 1"));
    }
    let (chunk_default, mut graphs) = sglang_memory_defaults(m.gpu, m.tp, rules.sglang_reserve_by_chunk);
    let chunk = match flags.chunked_prefill_size {
        None => chunk_default,
        Some(c) if c <= 0 => 0,
        Some(c) => c.min(u32::MAX as i64) as u32,
    };
    // EAGLE-style speculation (EAGLE, EAGLE3, NEXTN = MTP) sets max_running_requests to
    // 48 when it is not given (sglang python/sglang/srt/server_args.py
    // `ServerArgs.__post_init__` in 0.4.x, `_handle_speculative_decoding` in 0.5.x).
    // 0.4.3.post2 set none (`Rules::sglang_spec_one_prefill`).
    let max_running_requests =
        flags.max_running_requests.or((matches!(flags.speculative, SpecAlgorithm::Mtp | SpecAlgorithm::Eagle)
            && !rules.sglang_spec_one_prefill)
            .then_some(EAGLE_MAX_RUNNING_REQUESTS));
    if let Some(r) = max_running_requests {
        // A default decode-graph batch above the user's running limit is cut to it.
        graphs = graphs.min(r);
    }
    let frac = match flags.mem_fraction_static {
        Some(f) if f > 0.0 && f <= 1.0 => f,
        Some(f) => return Err(Error::invalid("--mem-fraction-static", format!("{f} is not in (0, 1]"))),
        // The reserve follows the chunk in use (max_prefill_tokens with chunking off).
        None => sglang_mem_fraction_static(
            m.gpu,
            m.tp,
            chunk,
            flags.max_prefill_tokens,
            graphs,
            rules.sglang_reserve_by_chunk,
        ),
    };
    let kv =
        sglang_pool_tokens_per_rank(m.gpu, m.weight_bytes_per_rank(), m.kv_bytes_per_token_per_rank, frac) * m.dp();
    // `ModelRunner.init_memory_pool` (model_runner.py, 0.4.10 and 0.5.23): a `--max-total-tokens`
    // above the profiled pool is capped at it, with the warning `max_total_tokens=… is larger
    // than the profiled value …` (`config::notes` prints it).
    let profiled = kv;
    let kv = flags.max_total_tokens.map_or(kv, |t| t.min(kv));
    let max_num_reqs = ((kv as f64 / m.max_model_len as f64 * 512.0) as u64).clamp(2048, 4096);
    let running = match max_running_requests {
        None => (kv / 2).min(max_num_reqs),
        Some(r) if rules.sglang_cap_running_by_tokens => (r as u64).min(kv / 2),
        Some(r) => r as u64,
    };
    Ok(Launch {
        max_num_seqs: running.max(1) as u32,
        max_num_batched_tokens: flags.max_prefill_tokens,
        chunked_prefill_size: chunk,
        kv_tokens: kv,
        profiled_kv_tokens: profiled,
        mem_fraction_static: Some(frac),
        vllm_memory: None,
    })
}

/// SGLang's start-up refusals: a context length above the model's (unless allowed by its
/// environment variable) and a pool too small for any request (`max_req_input_len > 0`).
pub fn check_start(s: &Started) -> Result<()> {
    let refuse = |message: String| s.refuse(message);
    if s.max_model_len > s.model.max_context {
        return refuse(format!(
            "Warning: User-specified context_length ({}) is greater than the derived context_length ({}). \
             This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length \
             may differ from max_position_embeddings in the model's config. To allow overriding this \
             maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
            s.max_model_len, s.model.max_context
        ));
    }
    let max_req_len = (s.max_model_len.saturating_sub(1)).min(s.kv_capacity_tokens.saturating_sub(1));
    if max_req_len <= 5 {
        return refuse(format!(
            "Memory pool size is too small (max_total_num_tokens {}, context_len {}: \
             max_req_input_len = min(context_len - 1, max_total_num_tokens - 1) - 5 must be positive)",
            s.kv_capacity_tokens, s.max_model_len
        ));
    }
    Ok(())
}
