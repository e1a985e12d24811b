//! A serving run's configuration: what the user set ([`RunOptions`]) resolved into every value
//! the engine will use ([`RunConfig`]), engine defaults included — vLLM's limits by GPU class
//! (ENGINE_SPEC §2.2) and its KV capacity from `gpu_memory_utilization` (§1.1). The resolved
//! config is echoed in every report, so a run can be compared with a real `vllm serve`.

use crate::cache::{CacheSpec, Policy};
use crate::cost::{Efficiency, Roofline};
use crate::engine::{EngineConfig, EngineKind, EngineVersion, SchedulePolicy};
use crate::error::{Error, Result};
use crate::profile::{self, Gpu, Model};
use crate::workload::arrivals::ArrivalOptions;
use serde::Serialize;
use std::path::PathBuf;

/// What the user asked for; `None` means "the engine's default".
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub engine: EngineKind,
    /// `--engine-version`; `None` = the engine's newest bundle.
    pub engine_version: Option<EngineVersion>,
    pub model: String,
    pub model_file: Option<PathBuf>,
    pub gpu: String,
    pub gpu_file: Option<PathBuf>,
    pub tp: u64,
    /// Cache model; default: the engine's own (vLLM → paged).
    pub policy: Option<Policy>,
    pub block_size: u32,
    pub page_size: u32,
    pub gpu_memory_utilization: f64,
    /// Weights aside, memory the engine keeps for activations and runtime, per GPU (GB).
    pub activation_reserve_gb: f64,
    pub num_gpu_blocks_override: Option<u64>,
    pub max_total_tokens: Option<u64>,
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM chunked prefill; `None` = the engine's default (on for v1, off for V0).
    pub enable_chunked_prefill: Option<bool>,
    pub long_prefill_token_threshold: u32,
    pub max_model_len: Option<u64>,
    /// SGLang `--max-running-requests` (default derived from the pool).
    pub max_running_requests: Option<u32>,
    /// SGLang `--chunked-prefill-size` (default by GPU memory; 0 or less = off).
    pub chunked_prefill_size: Option<i64>,
    pub max_prefill_tokens: u32,
    pub schedule_policy: SchedulePolicy,
    pub schedule_conservativeness: f64,
    /// SGLang `--mem-fraction-static` (default derived from GPU memory).
    pub mem_fraction_static: Option<f64>,
    /// Host work overlapped with the forward pass (vLLM async scheduling, SGLang overlap
    /// schedule); `None` = the engine's default (on for vLLM v1 and SGLang, off otherwise).
    pub overlap: Option<bool>,
    pub arrivals: ArrivalOptions,
    pub max_concurrency: Option<u32>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            engine: EngineKind::Vllm,
            engine_version: None,
            model: "llama-3.1-8b".into(),
            model_file: None,
            gpu: "h100-sxm".into(),
            gpu_file: None,
            tp: 1,
            policy: None,
            block_size: 16,
            page_size: 1,
            gpu_memory_utilization: 0.9,
            activation_reserve_gb: 2.0,
            num_gpu_blocks_override: None,
            max_total_tokens: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            enable_chunked_prefill: None,
            long_prefill_token_threshold: 0,
            max_model_len: None,
            max_running_requests: None,
            chunked_prefill_size: None,
            max_prefill_tokens: 16384,
            schedule_policy: SchedulePolicy::Fcfs,
            schedule_conservativeness: 1.0,
            mem_fraction_static: None,
            overlap: None,
            arrivals: ArrivalOptions::default(),
            max_concurrency: None,
        }
    }
}

/// Every value the run uses.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub engine: EngineConfig,
    pub cache: CacheSpec,
    pub model: Model,
    pub gpu: Gpu,
    pub tp: u64,
    pub max_model_len: u64,
    pub gpu_memory_utilization: f64,
    pub activation_reserve_gb: f64,
    /// SGLang's static memory fraction (SGLang engine only).
    pub mem_fraction_static: Option<f64>,
    /// vLLM's block count, the null block included (paged caches).
    pub num_gpu_blocks: Option<u64>,
    pub kv_capacity_tokens: u64,
    pub kv_bytes_per_token: u64,
    pub arrivals: ArrivalOptions,
    pub max_concurrency: Option<u32>,
    pub efficiency: Efficiency,
}

impl RunConfig {
    /// The step-time model of this configuration.
    pub fn cost(&self) -> Roofline {
        Roofline::new(&self.gpu, &self.model, self.tp, self.efficiency)
    }
}

fn positive(field: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(Error::invalid(field, format!("{v} must be a positive number")))
    }
}

/// vLLM serve's limits by device class, then its post-processing (ENGINE_SPEC §2.2).
fn vllm_limits(o: &RunOptions, gpu: &Gpu, max_model_len: u64) -> Result<(u32, u32)> {
    let (seqs_default, tokens_default) = if gpu.vllm_large() { (1024, 8192) } else { (256, 2048) };
    let mut max_num_seqs = o.max_num_seqs.unwrap_or(seqs_default);
    let mut max_num_batched_tokens = o.max_num_batched_tokens.unwrap_or(tokens_default);
    if o.max_num_batched_tokens.is_none() {
        if o.enable_chunked_prefill == Some(false) {
            max_num_batched_tokens = max_num_batched_tokens.max(max_model_len.min(u32::MAX as u64) as u32);
        }
        max_num_batched_tokens = (max_num_batched_tokens as u64)
            .min((max_num_seqs as u64).saturating_mul(max_model_len))
            .min(u32::MAX as u64) as u32;
    }
    if o.max_num_seqs.is_none() {
        max_num_seqs = max_num_seqs.min(max_num_batched_tokens);
    }
    if o.max_num_seqs == Some(0) {
        return Err(Error::invalid("--max-num-seqs", "0 must be at least 1"));
    }
    if max_num_seqs == 0 || max_num_batched_tokens < max_num_seqs {
        return Err(Error::invalid(
            "--max-num-batched-tokens",
            format!("{max_num_batched_tokens} must be at least --max-num-seqs ({max_num_seqs})"),
        ));
    }
    Ok((max_num_seqs, max_num_batched_tokens))
}

/// The error for fewer than two KV blocks, naming the setting that caused it: the override when
/// one was given, else the activation reserve when the weights alone would leave room, else the
/// memory share (the model does not fit).
fn no_kv_blocks(o: &RunOptions, gpu: &Gpu, model: &Model, util: f64, blocks: u64) -> Error {
    let weights_gb = model.weight_bytes(2) / o.tp as f64 / 1e9;
    let usable_gb = gpu.memory_bytes() * util / 1e9;
    if o.num_gpu_blocks_override.is_some() {
        return Error::invalid("--num-gpu-blocks-override", format!("{blocks}: at least 2 KV blocks are needed"));
    }
    let without_reserve = profile::vllm_kv_tokens(gpu, model, o.tp, util, 0.0) / o.block_size as u64;
    if o.activation_reserve_gb > 0.0 && without_reserve >= 2 {
        return Error::invalid(
            "--activation-reserve-gb",
            format!(
                "{} GB leaves no room for the KV cache: {usable_gb:.1} GB usable per GPU \
                 (gpu_memory_utilization {util}) − {weights_gb:.1} GB of weights",
                o.activation_reserve_gb
            ),
        );
    }
    Error::invalid(
        "--gpu-memory-utilization",
        format!(
            "{util}: the model does not fit (weights {weights_gb:.1} GB per GPU, {usable_gb:.1} GB usable; \
             try --tp or a larger GPU)"
        ),
    )
}

/// What resolving changed without being asked, worth telling the user: vLLM's `EngineArgs`
/// (`_set_default_args`, vllm/engine/arg_utils.py, 0.33) lowers an unset `max_num_seqs` to
/// `max_num_batched_tokens` silently; cachesim follows it and says so.
pub fn notes(o: &RunOptions, c: &RunConfig) -> Vec<String> {
    let mut out = Vec::new();
    let vllm = matches!(o.engine, EngineKind::Vllm | EngineKind::VllmV0);
    if vllm && o.max_num_seqs.is_none() && o.max_num_batched_tokens.is_some() {
        let default = if c.gpu.vllm_large() { 1024 } else { 256 };
        if c.engine.max_num_seqs < default {
            out.push(format!(
                "max_num_seqs lowered from its default {default} to {} = --max-num-batched-tokens (as vLLM does)",
                c.engine.max_num_seqs
            ));
        }
    }
    out
}

/// Resolves options into a full configuration.
pub fn resolve(o: &RunOptions) -> Result<RunConfig> {
    let model = profile::model(&o.model, o.model_file.as_deref())?;
    let gpu = profile::gpu(&o.gpu, o.gpu_file.as_deref())?;
    if o.tp == 0 || o.tp > 64 {
        return Err(Error::invalid("--tp", format!("{} must be between 1 and 64", o.tp)));
    }
    if o.model_file.is_none() && model.heads % o.tp != 0 {
        return Err(Error::invalid("--tp", format!("{} attention heads do not split over {} GPUs", model.heads, o.tp)));
    }
    let util = positive("--gpu-memory-utilization", o.gpu_memory_utilization)?;
    if util > 1.0 {
        return Err(Error::invalid("--gpu-memory-utilization", format!("{util} is above 1")));
    }
    if !(o.activation_reserve_gb.is_finite() && o.activation_reserve_gb >= 0.0) {
        return Err(Error::invalid(
            "--activation-reserve-gb",
            format!("{} must be a number of GB, 0 or more", o.activation_reserve_gb),
        ));
    }
    positive("--schedule-conservativeness", o.schedule_conservativeness)?;
    let max_model_len = o.max_model_len.unwrap_or(model.max_context);
    let version = match o.engine_version {
        None => EngineVersion::newest(o.engine),
        Some(v) if v.engine() == o.engine => v,
        Some(v) => {
            return Err(Error::invalid(
                "--engine-version",
                format!("{v} is a bundle of the {} engine, not of --engine {}", v.engine().name(), o.engine.name()),
            ))
        }
    };
    let policy = o.policy.unwrap_or(match o.engine {
        EngineKind::Vllm | EngineKind::VllmV0 => Policy::Paged,
        EngineKind::Sglang => Policy::Radix,
        EngineKind::Lightllm => Policy::Token,
    });
    let (limits, kv_tokens, mem_fraction_static) = match o.engine {
        EngineKind::Vllm | EngineKind::VllmV0 => {
            // Without chunked prefill (V0's default) the budget covers a whole prompt.
            let chunked = o.enable_chunked_prefill.unwrap_or(o.engine == EngineKind::Vllm);
            let (seqs, tokens) =
                vllm_limits(&RunOptions { enable_chunked_prefill: Some(chunked), ..o.clone() }, &gpu, max_model_len)?;
            let kv = profile::vllm_kv_tokens(&gpu, &model, o.tp, util, o.activation_reserve_gb);
            ((seqs, tokens, 0u32), kv, None)
        }
        EngineKind::Sglang => {
            let (chunk_default, graphs) = profile::sglang_memory_defaults(&gpu, o.tp);
            let chunk = match o.chunked_prefill_size {
                None => chunk_default,
                Some(c) if c <= 0 => 0,
                Some(c) => c.min(u32::MAX as i64) as u32,
            };
            let frac = match o.mem_fraction_static {
                Some(f) if f > 0.0 && f <= 1.0 => f,
                Some(f) => return Err(Error::invalid("--mem-fraction-static", format!("{f} is not in (0, 1]"))),
                None => profile::sglang_mem_fraction_static(&gpu, o.tp, chunk.max(chunk_default), graphs),
            };
            let kv = profile::sglang_kv_tokens(&gpu, &model, o.tp, frac);
            let kv = o.max_total_tokens.map_or(kv, |m| m.min(kv));
            let max_num_reqs = ((kv as f64 / max_model_len as f64 * 512.0) as u64).clamp(2048, 4096);
            let running = o.max_running_requests.map_or((kv / 2).min(max_num_reqs).max(1) as u32, |r| r.max(1));
            ((running, o.max_prefill_tokens, chunk), kv, Some(frac))
        }
        EngineKind::Lightllm => {
            // api_cli defaults: running_max_req_size 1000, chunked_prefill_size 4096,
            // batch_max_tokens = min(max_req_total_len 16384, 2 × chunk + 256); mem_fraction 0.9.
            let chunk = match o.chunked_prefill_size {
                None => 4096,
                Some(c) if c <= 0 => 0,
                Some(c) => c.min(u32::MAX as i64) as u32,
            };
            let batch_max = o.max_num_batched_tokens.unwrap_or(if chunk == 0 {
                16384
            } else {
                (2 * chunk as u64 + 256).min(16384) as u32
            });
            let frac = o.mem_fraction_static.unwrap_or(0.9);
            if !(frac > 0.0 && frac <= 1.0) {
                return Err(Error::invalid("--mem-fraction-static", format!("{frac} is not in (0, 1]")));
            }
            let kv = profile::sglang_kv_tokens(&gpu, &model, o.tp, frac);
            let kv = o.max_total_tokens.map_or(kv, |m| m.min(kv));
            ((o.max_num_seqs.unwrap_or(1000), batch_max, chunk), kv, Some(frac))
        }
    };
    let (max_num_seqs, max_num_batched_tokens, chunked_prefill_size) = limits;
    if matches!(o.engine, EngineKind::Sglang | EngineKind::Lightllm) && o.enable_chunked_prefill.is_some() {
        return Err(Error::invalid(
            "--enable-chunked-prefill",
            "applies to the vLLM engines; SGLang and LightLLM chunk by --chunked-prefill-size",
        ));
    }
    let overlap = match (o.engine, o.overlap) {
        (EngineKind::Vllm | EngineKind::Sglang, None) => true,
        (EngineKind::Vllm | EngineKind::Sglang, Some(on)) => on,
        (_, None | Some(false)) => false,
        (_, Some(true)) => {
            return Err(Error::invalid(
                "--async-scheduling",
                "only vLLM v1 and SGLang overlap scheduling with the forward pass",
            ))
        }
    };
    let (num_gpu_blocks, capacity) = match policy {
        Policy::Paged => {
            let blocks = o.num_gpu_blocks_override.unwrap_or(kv_tokens / o.block_size as u64);
            if blocks < 2 {
                return Err(no_kv_blocks(o, &gpu, &model, util, blocks));
            }
            if blocks > u32::MAX as u64 {
                return Err(Error::invalid(
                    "--num-gpu-blocks-override",
                    format!("{blocks} KV blocks: at most {} (block ids are 32-bit)", u32::MAX),
                ));
            }
            (Some(blocks), (blocks - 1) * o.block_size as u64)
        }
        Policy::Radix => (None, o.max_total_tokens.unwrap_or(kv_tokens) / o.page_size as u64 * o.page_size as u64),
        _ => (None, o.max_total_tokens.unwrap_or(kv_tokens)),
    };
    if capacity == 0 {
        return Err(Error::invalid(
            "--gpu-memory-utilization",
            "no memory left for the KV cache: the model does not fit",
        ));
    }
    Ok(RunConfig {
        engine: EngineConfig {
            engine: o.engine,
            version,
            rules: version.rules(),
            max_num_seqs,
            max_num_batched_tokens,
            enable_chunked_prefill: o.enable_chunked_prefill.unwrap_or(o.engine == EngineKind::Vllm),
            long_prefill_token_threshold: o.long_prefill_token_threshold,
            chunked_prefill_size,
            max_prefill_tokens: o.max_prefill_tokens,
            schedule_policy: o.schedule_policy,
            schedule_conservativeness: o.schedule_conservativeness,
            page_size: o.page_size,
            seed: o.arrivals.seed,
            overlap,
        },
        cache: CacheSpec {
            policy,
            block_size: (policy == Policy::Paged).then_some(o.block_size),
            page_size: (policy == Policy::Radix).then_some(o.page_size),
            capacity_tokens: Some(capacity),
        },
        kv_bytes_per_token: model.kv_bytes_per_token(2),
        model,
        gpu,
        tp: o.tp,
        max_model_len,
        gpu_memory_utilization: util,
        activation_reserve_gb: o.activation_reserve_gb,
        mem_fraction_static,
        num_gpu_blocks,
        kv_capacity_tokens: capacity,
        arrivals: o.arrivals,
        max_concurrency: o.max_concurrency,
        efficiency: Efficiency::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_defaults_by_gpu_class() {
        let c = resolve(&RunOptions::default()).unwrap();
        assert_eq!((c.engine.max_num_seqs, c.engine.max_num_batched_tokens), (1024, 8192));
        assert_eq!(c.cache.block_size, Some(16));
        let blocks = c.num_gpu_blocks.unwrap();
        assert_eq!(c.kv_capacity_tokens, (blocks - 1) * 16);
        let a100 = resolve(&RunOptions { gpu: "a100-80gb".into(), ..Default::default() }).unwrap();
        assert_eq!((a100.engine.max_num_seqs, a100.engine.max_num_batched_tokens), (256, 2048));
        let o = RunOptions { num_gpu_blocks_override: Some(16384), ..Default::default() };
        assert_eq!(resolve(&o).unwrap().kv_capacity_tokens, 16383 * 16);
    }

    #[test]
    fn vllm_v0_budget_covers_a_whole_prompt() {
        let c = resolve(&RunOptions { engine: EngineKind::VllmV0, ..Default::default() }).unwrap();
        assert_eq!(c.engine.max_num_batched_tokens, 131_072);
        assert!(!c.engine.enable_chunked_prefill);
    }

    #[test]
    fn lightllm_defaults() {
        let c = resolve(&RunOptions { engine: EngineKind::Lightllm, ..Default::default() }).unwrap();
        assert_eq!(c.cache.policy, Policy::Token);
        assert_eq!(
            (c.engine.max_num_seqs, c.engine.max_num_batched_tokens, c.engine.chunked_prefill_size),
            (1000, 8448, 4096)
        );
        assert_eq!(c.mem_fraction_static, Some(0.9));
    }

    #[test]
    fn sglang_defaults() {
        let c = resolve(&RunOptions { engine: EngineKind::Sglang, ..Default::default() }).unwrap();
        assert_eq!(c.cache.policy, Policy::Radix);
        assert_eq!(c.mem_fraction_static, Some(0.836));
        assert_eq!((c.engine.chunked_prefill_size, c.engine.max_prefill_tokens), (8192, 16384));
        // max_running_requests = min(tokens / 2, clamp(tokens / context × 512, 2048, 4096)).
        assert_eq!(c.engine.max_num_seqs, 2048);
        let small =
            resolve(&RunOptions { engine: EngineKind::Sglang, max_total_tokens: Some(3000), ..Default::default() });
        assert_eq!(small.unwrap().engine.max_num_seqs, 1500);
    }

    #[test]
    fn overlap_is_on_where_the_engine_has_it() {
        let on =
            |engine, overlap| resolve(&RunOptions { engine, overlap, ..Default::default() }).map(|c| c.engine.overlap);
        assert!(on(EngineKind::Vllm, None).unwrap(), "vLLM v1 async scheduling");
        assert!(on(EngineKind::Sglang, None).unwrap(), "SGLang overlap schedule");
        assert!(!on(EngineKind::VllmV0, None).unwrap());
        assert!(!on(EngineKind::Lightllm, None).unwrap());
        assert!(!on(EngineKind::Vllm, Some(false)).unwrap());
        assert!(!on(EngineKind::Lightllm, Some(false)).unwrap());
        let e = on(EngineKind::VllmV0, Some(true)).unwrap_err().to_string();
        assert!(e.contains("--async-scheduling") && e.contains("only vLLM v1 and SGLang"), "{e}");
    }

    #[test]
    fn bad_settings_are_named() {
        let e = resolve(&RunOptions { max_num_seqs: Some(64), max_num_batched_tokens: Some(32), ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--max-num-batched-tokens"));
        let e = resolve(&RunOptions { model: "llama-3.1-70b".into(), gpu: "a10".into(), ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("does not fit"));
        let e = resolve(&RunOptions { tp: 3, ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--tp"));
        let e = resolve(&RunOptions { gpu_memory_utilization: 1.5, ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("above 1"));
    }

    fn blamed(o: RunOptions) -> String {
        match resolve(&o).unwrap_err() {
            Error::InvalidArgument { field, .. } => field,
            e => panic!("not an argument error: {e}"),
        }
    }

    #[test]
    fn each_error_names_the_flag_at_fault() {
        assert_eq!(blamed(RunOptions { max_num_seqs: Some(0), ..Default::default() }), "--max-num-seqs");
        assert_eq!(
            blamed(RunOptions { max_num_seqs: Some(64), max_num_batched_tokens: Some(32), ..Default::default() }),
            "--max-num-batched-tokens"
        );
        assert_eq!(
            blamed(RunOptions { activation_reserve_gb: 1000.0, ..Default::default() }),
            "--activation-reserve-gb"
        );
        assert_eq!(blamed(RunOptions { activation_reserve_gb: -1.0, ..Default::default() }), "--activation-reserve-gb");
        assert_eq!(
            blamed(RunOptions { num_gpu_blocks_override: Some(1), ..Default::default() }),
            "--num-gpu-blocks-override"
        );
        assert_eq!(
            blamed(RunOptions { model: "llama-3.1-70b".into(), gpu: "a10".into(), ..Default::default() }),
            "--gpu-memory-utilization"
        );
        assert_eq!(
            blamed(RunOptions { engine: EngineKind::Sglang, schedule_conservativeness: -1.0, ..Default::default() }),
            "--schedule-conservativeness"
        );
    }

    /// Found by tests/fuzz.rs: `max_num_seqs × max_model_len` overflowed.
    #[test]
    fn a_huge_max_model_len_does_not_overflow() {
        let o = RunOptions { max_model_len: Some(u64::MAX), ..Default::default() };
        assert_eq!(resolve(&o).unwrap().engine.max_num_batched_tokens, 8192);
    }

    /// Found by tests/fuzz.rs: LightLLM's `2 × chunk + 256` overflowed.
    #[test]
    fn a_huge_lightllm_chunk_saturates() {
        let o = RunOptions { engine: EngineKind::Lightllm, chunked_prefill_size: Some(i64::MAX), ..Default::default() };
        assert_eq!(resolve(&o).unwrap().engine.max_num_batched_tokens, 16384);
    }

    /// Found by tests/fuzz.rs: `(blocks − 1) × block_size` overflowed.
    #[test]
    fn a_huge_block_override_is_refused() {
        let o = RunOptions { num_gpu_blocks_override: Some(u64::MAX), block_size: 512, ..Default::default() };
        assert_eq!(blamed(o), "--num-gpu-blocks-override");
    }

    #[test]
    fn a_lowered_max_num_seqs_is_said() {
        let o = RunOptions { max_num_batched_tokens: Some(1), ..Default::default() };
        let c = resolve(&o).unwrap();
        assert_eq!(c.engine.max_num_seqs, 1);
        let n = notes(&o, &c);
        assert_eq!(n.len(), 1);
        assert!(n[0].contains("from its default 1024 to 1"), "{n:?}");
        assert!(notes(&RunOptions::default(), &resolve(&RunOptions::default()).unwrap()).is_empty());
    }
}
