//! A serving run's configuration: what the user set ([`RunOptions`]) resolved into every value
//! the engine will use ([`RunConfig`]), engine defaults included — vLLM's limits by GPU class
//! (ENGINE_SPEC §2.2) and its KV capacity from `gpu_memory_utilization` and the modelled
//! profile run (§1.1, [`crate::vllm_memory`]). The resolved config is echoed in every report, so
//! a run can be compared with a real `vllm serve`.

use crate::cache::{CacheSpec, Policy};
use crate::catalog::{self, Gpu, Model};
use crate::cluster::ClusterConfig;
use crate::cost::spec::SpecAlgorithm;
use crate::cost::{Deployment, Efficiency, Roofline};
use crate::engine::frontend::RequestLimits;
use crate::engine::{EngineConfig, EngineKind, EngineVersion, SchedulePolicy, SchedulingPolicy};
use crate::error::{Error, Result};
use crate::layout::LayoutOptions;
use crate::vllm_memory::{MemoryOverrides, VllmMemory};
use crate::workload::arrivals::ArrivalOptions;
use serde::Serialize;
use std::path::PathBuf;

/// Default [`RunConfig::request_overhead_ms`]: what a request spends between the client's
/// send and the engine's scheduler (HTTP, JSON, tokenisation), in ms. Read off the published
/// low-load SGLang points (Llama-3.1-8B on A100 and 70B TP4 on H100 at 4 req/s: 9–12 ms of
/// median TTFT left once prefill is priced at the measured decode speed; docs/engines/
/// clients.md); calibration can refit it.
pub const DEFAULT_REQUEST_OVERHEAD_MS: f64 = 10.0;

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
    /// vLLM `--gpu-memory-utilization`; `None` = the bundle's default (0.92 or 0.9).
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM memory terms set by hand instead of modelled.
    pub memory: MemoryOverrides,
    pub num_gpu_blocks_override: Option<u64>,
    pub max_total_tokens: Option<u64>,
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM chunked prefill; `None` = the engine's default (on for v1, off for V0).
    pub enable_chunked_prefill: Option<bool>,
    pub long_prefill_token_threshold: u32,
    /// vLLM v1 `--scheduling-policy` (FCFS unless set; only `--engine vllm` takes it).
    pub scheduling_policy: SchedulingPolicy,
    /// vLLM V0 `--num-scheduler-steps` (multi-step scheduling); `None` = 1, one step per
    /// scheduling. Only `--engine vllm-v0` takes it.
    pub num_scheduler_steps: Option<u32>,
    /// vLLM V0 `--disable-async-output-proc`: turn async output processing off (on by default
    /// where vLLM has it on). Only `--engine vllm-v0` takes it.
    pub disable_async_output_proc: bool,
    /// vLLM `--enforce-eager` (no CUDA graphs): modelled only as it turns V0's async output
    /// processing off; the step times stay the profile's. Only `--engine vllm-v0` takes it.
    pub enforce_eager: bool,
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
    /// Send-to-engine delay per request, ms; `None` = [`DEFAULT_REQUEST_OVERHEAD_MS`].
    pub request_overhead_ms: Option<f64>,
    /// How the client counts a multi-token chunk's inter-token latency (`--client-itl`).
    pub client_itl: crate::metrics::ItlCount,
    /// Pipeline, expert and DP-attention parallelism, nodes, KV dtype, speculative decoding.
    pub layout: LayoutOptions,
    /// Which step-time factors price the steps.
    pub calibration: Calibration,
    /// Instances and the router in front of them.
    pub cluster: ClusterConfig,
    /// Instance failures and what becomes of their requests (none by default).
    pub faults: crate::cluster::faults::FaultOptions,
    /// Autoscaling (none by default).
    pub autoscale: crate::cluster::autoscale::AutoscaleOptions,
    /// The client's per-request limits (`--goodput` words, as `vllm bench serve` takes them:
    /// `ttft:500`).
    pub goodput: Option<Vec<String>>,
    /// vLLM's CPU KV offloading (off by default).
    pub offload: crate::engine::vllm_offload::OffloadOptions,
    /// SGLang's hierarchical cache (off by default).
    pub hicache: crate::engine::sglang::hicache::HiCacheOptions,
    /// vLLM's hybrid KV cache manager (on for models with sliding-window layers).
    pub hybrid: crate::engine::vllm_hybrid::HybridOptions,
    /// SGLang's window pool (on for gpt-oss and Llama 4).
    pub sglang_swa: crate::engine::sglang::swa::SwaOptions,
    /// SGLang's recurrent-state pool (on for models with linear-attention layers: Qwen3-Next).
    pub sglang_mamba: crate::engine::sglang::mamba::MambaOptions,
    /// SGLang's priority scheduling (off by default).
    pub sglang_priority: crate::engine::sglang::priority::PriorityOptions,
    /// vLLM's LoRA serving (off by default).
    pub lora: crate::engine::vllm_lora::LoraOptions,
    /// SGLang `--max-queued-requests` (unbounded by default).
    pub max_queued_requests: Option<u32>,
}

/// Where the step-time factors ([`Efficiency`]) come from.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Calibration {
    /// The built-in fitted profile of `calibration/profiles/` matching the GPU, engine family
    /// and model, else the composed prior ([`crate::calibration::prior::composed`]).
    #[default]
    Auto,
    /// The raw roofline: [`Efficiency::default`].
    None,
    /// A profile file (`cachesim calibrate --fit --out`).
    File(PathBuf),
    /// `--calibration kernels`: the composed prior whether or not a fitted profile matches —
    /// the device factors of the built-in kernel-step profile (GEMM, HBM and attention
    /// efficiency, the per-kernel floor, measured on a GPU with no serving engine), host and
    /// communication factors at the priors ([`crate::calibration::prior::composed`]).
    Kernels,
}

/// The step-time factors for `o`, how they were chosen (echoed with the config), and whether the
/// composed prior chose them ([`RunConfig::composed_prior`]).
fn calibration(o: &RunOptions, gpu: &Gpu, model: &Model) -> Result<(Efficiency, String, bool)> {
    use crate::calibration::profile;
    let family = profile::family(o.engine);
    let speculative = o.layout.speculative_algorithm != SpecAlgorithm::None;
    // The composed prior, with what its kernel steps leave unmeasured for this model.
    let prior = || {
        let class = crate::calibration::prior::model_class(model, speculative);
        let c = crate::calibration::prior::composed(gpu, o.engine, &class);
        let caveat = if c.kernel_device() && class != "dense" {
            format!(
                " (the kernel steps are dense Llama: {} is {class}, whose own kernels are not measured)",
                model.name
            )
        } else {
            String::new()
        };
        (c.efficiency, format!("{}{caveat}", c.words))
    };
    Ok(match &o.calibration {
        Calibration::Kernels => {
            let (e, words) = prior();
            (e, format!("kernels (the composed prior, --calibration kernels): {words}"), true)
        }
        Calibration::None => (Efficiency::default(), "none (raw roofline, --calibration none)".into(), false),
        Calibration::File(p) => {
            let prof = profile::read(p)?;
            let how = if prof.fit.cases.is_empty() {
                "not fitted".to_string()
            } else {
                format!("fitted on {}; {}", prof.fit.cases_named(), prof.quality())
            };
            if prof.efficiency.law.is_some() && speculative {
                return Err(Error::invalid(
                    "--calibration",
                    format!(
                        "{}: its step law (fitted with --unknown-hardware) times plain steps; it does not know the \
                         verify and draft passes of speculative decoding",
                        p.display()
                    ),
                ));
            }
            (prof.efficiency, format!("{} ({}, {how})", prof.name, p.display()), false)
        }
        Calibration::Auto => match profile::builtin_for(&gpu.name, o.engine, &model.name) {
            Some((file, prof)) => (
                prof.efficiency,
                format!(
                    "{} (calibration/profiles/{file}, fitted on {}; {})",
                    prof.name,
                    prof.fit.cases_named(),
                    prof.quality()
                ),
                false,
            ),
            None => {
                let (e, words) = prior();
                (e, format!("prior (no fitted profile for {} / {family} / {}): {words}", gpu.name, model.name), true)
            }
        },
    })
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
            gpu_memory_utilization: None,
            memory: MemoryOverrides::default(),
            num_gpu_blocks_override: None,
            max_total_tokens: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            enable_chunked_prefill: None,
            long_prefill_token_threshold: 0,
            scheduling_policy: SchedulingPolicy::Fcfs,
            num_scheduler_steps: None,
            disable_async_output_proc: false,
            enforce_eager: false,
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
            request_overhead_ms: None,
            client_itl: crate::metrics::ItlCount::Chunk,
            layout: LayoutOptions::default(),
            calibration: Calibration::Auto,
            cluster: ClusterConfig::default(),
            faults: Default::default(),
            autoscale: Default::default(),
            goodput: None,
            offload: Default::default(),
            hicache: Default::default(),
            hybrid: Default::default(),
            sglang_swa: Default::default(),
            sglang_mamba: Default::default(),
            sglang_priority: Default::default(),
            max_queued_requests: None,
            lora: Default::default(),
        }
    }
}

/// What a run says about its deployment file (text echo and `--json`'s `config.deployment`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeploymentEcho {
    /// The file, as given on the command line.
    pub path: String,
    pub name: Option<String>,
    /// The file's keys the command line overrode (or that conflict with a flag given there).
    pub overridden: Vec<String>,
    /// The overridden keys' values in the file, in `overridden`'s order.
    #[serde(skip)]
    pub file_values: Vec<String>,
}

impl DeploymentEcho {
    /// The config echo's line.
    pub fn text(&self) -> String {
        let name = self.name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
        let over = if self.overridden.is_empty() {
            String::new()
        } else {
            let kv: Vec<String> =
                self.overridden.iter().zip(&self.file_values).map(|(k, v)| format!("{k} (file: {v})")).collect();
            format!(" · the command line overrides {}", kv.join(", "))
        };
        format!("Deployment:     {}{name}{over}\n", self.path)
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
    /// vLLM's `gpu_memory_utilization` (the bundle's default unless set).
    pub gpu_memory_utilization: f64,
    /// vLLM's memory budget per GPU, term by term (vLLM engines only).
    pub vllm_memory: Option<VllmMemory>,
    /// SGLang's static memory fraction (SGLang engine only).
    pub mem_fraction_static: Option<f64>,
    /// vLLM's block count, the null block included (paged caches).
    pub num_gpu_blocks: Option<u64>,
    pub kv_capacity_tokens: u64,
    pub kv_bytes_per_token: u64,
    /// KV bytes per token on one GPU: its stage's layers, its share of the KV heads (an MLA
    /// latent is whole on every rank), at the KV dtype.
    pub kv_bytes_per_token_per_rank: u64,
    /// The layout beyond TP and what the step cost needs of it.
    pub deployment: Deployment,
    pub arrivals: ArrivalOptions,
    pub max_concurrency: Option<u32>,
    /// Per request, ms from the client's send to the engine's scheduler (HTTP, JSON parsing,
    /// tokenisation). Every client-measured latency (TTFT, E2E) includes it; TPOT and ITL do
    /// not. A plain number so calibration can fit it.
    pub request_overhead_ms: f64,
    /// How the client counts a chunk of several tokens' inter-token latency (echoed only where
    /// it divides the gap over them).
    #[serde(skip_serializing_if = "crate::metrics::ItlCount::is_chunk")]
    pub client_itl: crate::metrics::ItlCount,
    pub efficiency: Efficiency,
    /// Which profile set [`RunConfig::efficiency`], in words.
    pub calibration: String,
    /// Whether the composed prior set it (by default or under `--calibration kernels`):
    /// `validate` reprices such a case without the engine pieces fitted on its own group.
    #[serde(skip)]
    pub composed_prior: bool,
    /// Instances and the router in front of them.
    pub cluster: ClusterConfig,
    /// Instance failures ([`crate::cluster::faults`]); `None`: every instance serves throughout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<crate::cluster::faults::FaultPlan>,
    /// The autoscaler ([`crate::cluster::autoscale`]); `None`: the fleet keeps its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<crate::cluster::autoscale::AutoscalePlan>,
    /// The client's per-request limits for goodput (`--goodput`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<crate::metrics::Goodput>,
    /// The `--deployment` file the run came from (set by the binary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment_file: Option<DeploymentEcho>,
    /// What the engine would warn of at start-up ([`notes`] prints it).
    #[serde(skip)]
    pub startup_notes: Vec<String>,
}

impl RunConfig {
    /// The model's class for calibration ([`crate::calibration::prior::model_class`]): dense or
    /// MoE, and whether it decodes speculatively.
    pub fn model_class(&self) -> String {
        crate::calibration::prior::model_class(&self.model, self.deployment.spec.is_some())
    }

    /// The step-time model of this configuration.
    pub fn cost(&self) -> Roofline {
        let r = Roofline::deployed(&self.gpu, &self.model, self.deployment.clone(), self.efficiency);
        match self.engine.lora {
            None => r,
            Some(l) => r.with_lora(Some(l.kernels), self.lora_kernel_floor_s()),
        }
    }

    /// The floor each LoRA kernel pays: the calibration's per-kernel floor, or, where it states
    /// none (a profile fitted without kernel steps, the bare roofline), the one measured on
    /// this GPU's kernels ([`crate::calibration::prior::device_prior`]) — launching a kernel
    /// costs time whatever the profile absorbed elsewhere.
    fn lora_kernel_floor_s(&self) -> f64 {
        match self.efficiency.kernel_floor_s {
            f if f > 0.0 => f,
            _ => crate::calibration::prior::device_prior(&self.gpu).0.kernel_floor_s,
        }
    }

    /// What the engine's frontend checks each request against.
    pub fn request_limits(&self) -> RequestLimits {
        RequestLimits { max_model_len: self.max_model_len, pool_tokens: self.kv_capacity_tokens }
    }
}

fn positive(field: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(Error::invalid(field, format!("{v} must be a positive number")))
    }
}

/// Memory terms set by hand must be finite and not negative; a KV budget must be positive.
fn check_overrides(m: &MemoryOverrides) -> Result<()> {
    for (flag, v) in [
        ("--activation-peak-gib", m.activation_peak_gib),
        ("--cudagraph-memory-gib", m.cudagraph_memory_gib),
        ("--non-torch-memory-gib", m.non_torch_memory_gib),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(Error::invalid(flag, format!("{v} must be a number of GiB, 0 or more")));
        }
    }
    if m.kv_cache_memory_bytes == Some(0) {
        return Err(Error::invalid("--kv-cache-memory-bytes", "0 leaves no KV cache"));
    }
    Ok(())
}

/// What resolving changed without being asked, worth telling the user: vLLM's `EngineArgs`
/// (`_set_default_args`, vllm/engine/arg_utils.py, 0.33) lowers an unset `max_num_seqs` to
/// `max_num_batched_tokens` silently; cachesim follows it and says so. It also says when an
/// override leaves too few blocks for one longest request (vLLM starts regardless).
pub fn notes(o: &RunOptions, c: &RunConfig) -> Vec<String> {
    let mut out = c.startup_notes.clone();
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
    if let (true, Some(blocks), Some(b)) = (vllm, o.num_gpu_blocks_override, c.cache.block_size) {
        let needed = c.max_model_len.div_ceil(b as u64);
        if needed > blocks.saturating_sub(1) {
            out.push(format!(
                "max_model_len {} needs {needed} blocks of {b} tokens but --num-gpu-blocks-override {blocks} leaves {} \
                 (one is the null block); vLLM starts anyway (it checks memory before applying the override), and \
                 a request that can never fit fails",
                c.max_model_len,
                blocks.saturating_sub(1)
            ));
        }
    }
    out
}

/// The KV pool in tokens: the launch's, or a user's `--max-total-tokens` no larger than it.
fn pool(o: &RunOptions, kv_tokens: u64) -> u64 {
    o.max_total_tokens.map_or(kv_tokens, |t| t.min(kv_tokens))
}

/// Refuses a workload whose requests name LoRA adapters the run does not serve: without
/// `--enable-lora`, or under another list of `--lora-modules` (vLLM answers a request for a
/// model it does not serve 404, `The model \`x\` does not exist.`).
pub fn check_adapters(c: &RunConfig, w: &crate::workload::Workload) -> Result<()> {
    let named = w.info.adapters.len();
    let served = c.engine.lora.map_or(0, |l| l.adapters as usize);
    if named == 0 || !w.requests.iter().any(|r| r.lora != 0) {
        return Ok(());
    }
    match c.engine.lora {
        None => Err(Error::invalid(
            "--enable-lora",
            format!("the requests name LoRA adapters ({}): serve them with --enable-lora", w.info.adapters.join(", ")),
        )),
        Some(_) if served != named => Err(Error::invalid(
            "--lora-modules",
            format!(
                "the workload was built over {named} adapters and the run serves {served}: give both the same list"
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// What a run does with its requests' priorities when they are not all 0 and no rule here
/// reads them: vLLM 0.33 under `--scheduling-policy fcfs` accepts and ignores them (no check in
/// `vllm/v1/engine/input_processor.py`; the FCFS queue never reads `Request.priority`), as
/// SGLang does without `--enable-priority-scheduling`; the other engines' rules here have no
/// priority order. Under SGLang's priority scheduling, says which requests sent without a
/// priority get the least preferred value (`Scheduler._set_or_validate_priority`).
pub fn priorities_note(c: &RunConfig, w: &crate::workload::Workload) -> Option<String> {
    if let Some(p) = c.engine.sglang_priority.filter(|p| p.default_value.is_none()) {
        let without = w.requests.iter().filter(|r| r.priority.is_none()).count();
        if without > 0 && without < w.requests.len() {
            return Some(format!(
                "{without} requests carry no priority: SGLang schedules them as the least important ({}), \
                 as it does without --default-priority-value; the report counts them in class 0",
                if p.low_values_first { "sys.maxsize" } else { "-sys.maxsize - 1" }
            ));
        }
    }
    let n = w.requests.iter().filter(|r| r.class() != 0).count();
    let served = match c.engine.engine {
        EngineKind::Vllm => c.engine.scheduling_policy == SchedulingPolicy::Priority,
        // Read, or (`--abort-on-priority-when-disabled`) refused, which the failures say.
        EngineKind::Sglang => c.engine.sglang_priority.is_some() || c.engine.abort_on_priority_when_disabled,
        _ => false,
    };
    if n == 0 || served {
        return None;
    }
    let what = if c.engine.engine == EngineKind::Vllm {
        "--scheduling-policy fcfs ignores them, as vLLM does (pass --scheduling-policy priority to serve them by priority)"
            .to_string()
    } else if c.engine.engine == EngineKind::Sglang {
        "SGLang keeps and ignores them without --enable-priority-scheduling".to_string()
    } else {
        format!("cachesim's --engine {} rules have no priority order, so they are ignored", c.engine.engine.name())
    };
    Some(format!("{} requests carry a priority other than 0: {what}; the report still splits its figures by class", n))
}

/// The most tensor-parallel ranks an instance may have (`--tp`).
pub const MAX_TP: u64 = 144;

/// The engine-specific flags `o` sets (a value, or one other than the default), as the command
/// line spells them, for [`crate::engine::flags::refuse_foreign`].
pub fn engine_specific_flags(o: &RunOptions) -> Vec<&'static str> {
    let d = RunOptions::default();
    let m = o.memory;
    let l = &o.layout;
    [
        (o.max_num_seqs.is_some(), "--max-num-seqs"),
        (o.max_num_batched_tokens.is_some(), "--max-num-batched-tokens"),
        (o.max_running_requests.is_some(), "--max-running-requests"),
        (o.max_prefill_tokens != d.max_prefill_tokens, "--max-prefill-tokens"),
        (o.schedule_policy != d.schedule_policy, "--schedule-policy"),
        (o.schedule_conservativeness != d.schedule_conservativeness, "--schedule-conservativeness"),
        (o.mem_fraction_static.is_some(), "--mem-fraction-static"),
        (o.gpu_memory_utilization.is_some(), "--gpu-memory-utilization"),
        (o.enable_chunked_prefill == Some(true), "--enable-chunked-prefill"),
        (o.enable_chunked_prefill == Some(false), "--no-enable-chunked-prefill"),
        (o.chunked_prefill_size.is_some(), "--chunked-prefill-size"),
        (o.long_prefill_token_threshold != d.long_prefill_token_threshold, "--long-prefill-token-threshold"),
        (o.scheduling_policy != d.scheduling_policy, "--scheduling-policy"),
        (o.num_scheduler_steps.is_some(), "--num-scheduler-steps"),
        (o.disable_async_output_proc, "--disable-async-output-proc"),
        (o.enforce_eager, "--enforce-eager"),
        (m.activation_peak_gib.is_some(), "--activation-peak-gib"),
        (m.cudagraph_memory_gib.is_some(), "--cudagraph-memory-gib"),
        (m.non_torch_memory_gib.is_some(), "--non-torch-memory-gib"),
        (m.kv_cache_memory_bytes.is_some(), "--kv-cache-memory-bytes"),
        (l.dp_attention, "--enable-dp-attention"),
        (l.dp_size.is_some(), "--dp-size"),
        (l.moe_a2a_backend != d.layout.moe_a2a_backend, "--moe-a2a-backend"),
        (l.deepep_mode != d.layout.deepep_mode, "--deepep-mode"),
        (l.two_batch_overlap, "--enable-two-batch-overlap"),
        (o.offload.size_gib.is_some(), "--kv-offloading-size"),
        (o.offload.backend.is_some(), "--kv-offloading-backend"),
        (o.offload.host_link_gbps.is_some(), "--host-link-gbps"),
        (o.offload.lmcache_chunk_size.is_some(), "--lmcache-chunk-size"),
        (o.offload.lmcache_disk_gib.is_some(), "--lmcache-max-local-disk-size"),
        (o.offload.lmcache_disk_gbps.is_some(), "--lmcache-disk-gbps"),
        (o.offload.lmcache_remote_url.is_some(), "--lmcache-remote-url"),
        (o.offload.lmcache_remote_rtt_us.is_some(), "--lmcache-remote-rtt-us"),
        (o.offload.lmcache_remote_gbps.is_some(), "--lmcache-remote-gbps"),
        (o.hicache.enable, "--enable-hierarchical-cache"),
        (o.hicache.ratio.is_some(), "--hicache-ratio"),
        (o.hicache.size_gb.is_some(), "--hicache-size"),
        (o.hicache.write_policy.is_some(), "--hicache-write-policy"),
        (o.hicache.storage_backend.is_some(), "--hicache-storage-backend"),
        (o.hicache.prefetch_policy.is_some(), "--hicache-storage-prefetch-policy"),
        (o.hicache.storage_gbps.is_some(), "--storage-gbps"),
        (o.hicache.storage_latency_ms.is_some(), "--storage-latency-ms"),
        (o.hybrid.disable, "--disable-hybrid-kv-cache-manager"),
        (o.hybrid.retention.is_some(), "--prefix-cache-retention-interval"),
        (o.sglang_swa.ratio.is_some(), "--swa-full-tokens-ratio"),
        (o.sglang_swa.disable, "--disable-hybrid-swa-memory"),
        (o.sglang_mamba.strategy.is_some(), "--mamba-radix-cache-strategy"),
        (o.sglang_mamba.full_memory_ratio.is_some(), "--mamba-full-memory-ratio"),
        (o.sglang_mamba.max_cache_size.is_some(), "--max-mamba-cache-size"),
        (o.sglang_mamba.track_interval.is_some(), "--mamba-track-interval"),
        (o.sglang_priority.enable, "--enable-priority-scheduling"),
        (o.sglang_priority.low_values_first, "--schedule-low-priority-values-first"),
        (o.sglang_priority.preemption_threshold.is_some(), "--priority-scheduling-preemption-threshold"),
        (o.sglang_priority.disable_preemption, "--disable-priority-preemption"),
        (o.sglang_priority.default_value.is_some(), "--default-priority-value"),
        (o.sglang_priority.retraction.is_some(), "--retraction-policy"),
        (o.max_queued_requests.is_some(), "--max-queued-requests"),
        (o.sglang_priority.abort_when_disabled, "--abort-on-priority-when-disabled"),
        (o.lora.enable, "--enable-lora"),
        (o.lora.max_loras.is_some(), "--max-loras"),
        (o.lora.max_cpu_loras.is_some(), "--max-cpu-loras"),
        (o.lora.max_lora_rank.is_some(), "--max-lora-rank"),
        (!o.lora.modules.is_empty(), "--lora-modules"),
        (o.lora.load_gbps.is_some(), "--lora-load-gbps"),
    ]
    .into_iter()
    .filter_map(|(set, flag)| set.then_some(flag))
    .collect()
}

/// The flags an engine reads at start-up, from the run options.
fn engine_flags(o: &RunOptions) -> crate::engine::launch::EngineFlags {
    crate::engine::launch::EngineFlags {
        max_num_seqs: o.max_num_seqs,
        max_num_batched_tokens: o.max_num_batched_tokens,
        enable_chunked_prefill: o.enable_chunked_prefill,
        chunked_prefill_size: o.chunked_prefill_size,
        max_prefill_tokens: o.max_prefill_tokens,
        max_running_requests: o.max_running_requests,
        mem_fraction_static: o.mem_fraction_static,
        max_total_tokens: o.max_total_tokens,
        speculative: o.layout.speculative_algorithm,
        memory: o.memory,
        num_scheduler_steps: o.num_scheduler_steps,
        disable_async_output_proc: o.disable_async_output_proc,
        enforce_eager: o.enforce_eager,
        overlap: o.overlap,
        pp: o.layout.pp,
        block_size: o.block_size,
        num_gpu_blocks_override: o.num_gpu_blocks_override,
    }
}

/// The layout on the GPUs the nodes hold: TP × PP GPUs within `--nnodes` nodes of the GPU
/// catalog's `gpus_per_node` (an HGX board's 8, an NVL72 rack's 72).
fn check_nodes(gpu: &Gpu, layout: &Deployment) -> Result<()> {
    let p = layout.parallel;
    let per_node = gpu.gpus_per_node();
    if p.world() > p.nnodes.saturating_mul(per_node) {
        let need = p.world().div_ceil(per_node);
        return Err(Error::invalid(
            "--nnodes",
            format!(
                "{}: TP {} × PP {} = {} GPUs do not fit {} node{} of {per_node} {} GPUs (`gpus_per_node` of the GPU \
                 catalog); give --nnodes {need} or fewer ranks",
                p.nnodes,
                p.tp,
                p.pp,
                p.world(),
                p.nnodes,
                if p.nnodes == 1 { "" } else { "s" },
                gpu.name
            ),
        ));
    }
    Ok(())
}

/// KV heads over the attention TP ranks as vLLM's and SGLang's `QKVParallelLinear` lay them out
/// (`vllm/model_executor/layers/linear.py`; `sglang/srt/layers/linear.py`): with TP at or above
/// the KV heads each rank holds one, replicated `tp / kv_heads` times (`divide`, which asserts
/// "X is not divisible by Y"); below, each holds `kv_heads / tp`. Either quotient must be whole.
/// (The KV bytes per rank follow it: `max(1, kv_heads / tp)` heads, `cost::parallel`.)
fn check_kv_heads(model: &Model, attn_tp: u64) -> Result<()> {
    let kv = model.kv_heads;
    if model.is_mla() || kv == 0 {
        return Ok(());
    }
    let (num, den) = if attn_tp >= kv { (attn_tp, kv) } else { (kv, attn_tp) };
    if num.is_multiple_of(den) {
        return Ok(());
    }
    Err(Error::invalid(
        "--tp",
        format!(
            "{} KV heads over {attn_tp} GPUs: vLLM and SGLang replicate KV heads only when the TP size is a multiple \
             of them and split them only when they are a multiple of it ({num} is not divisible by {den})",
            model.kv_heads
        ),
    ))
}

/// Resolves options into a full configuration.
pub fn resolve(o: &RunOptions) -> Result<RunConfig> {
    crate::engine::flags::refuse_foreign(o.engine, engine_specific_flags(o))?;
    // An engine whose blocks are not vLLM's 16 tokens takes its own unless --block-size is given.
    let own_block;
    let o = match crate::engine::default_block_size(o.engine) {
        Some(b) if o.block_size == RunOptions::default().block_size => {
            own_block = RunOptions { block_size: b, ..o.clone() };
            &own_block
        }
        _ => o,
    };
    let model = catalog::model(&o.model, o.model_file.as_deref())?;
    let gpu = catalog::gpu(&o.gpu, o.gpu_file.as_deref())?;
    let (efficiency, calibration, composed_prior) = calibration(o, &gpu, &model)?;
    // Up to 18 nodes of 8: DeepSeek's own decode layout, EP 144 with DP attention.
    if o.tp == 0 || o.tp > MAX_TP {
        return Err(Error::invalid("--tp", format!("{} must be between 1 and {MAX_TP}", o.tp)));
    }
    crate::engine::linear::check(&model, o.engine, o.layout.ssm_dtype)?;
    let layout = o.layout.resolve(&model, o.tp, crate::engine::linear::ssm_default(o.engine))?;
    // The heads split over one attention TP group: all of TP, or TP / --dp-size with DP
    // attention (SGLang `dp_attention.compute_dp_attention_world_info`: attn_tp_size = tp / dp).
    let attn_tp = layout.parallel.attn_tp();
    if o.model_file.is_none() && model.heads % attn_tp != 0 {
        return Err(Error::invalid(
            "--tp",
            format!("{} attention heads do not split over {attn_tp} GPUs", model.heads),
        ));
    }
    check_kv_heads(&model, attn_tp)?;
    check_nodes(&gpu, &layout)?;
    let kv_dtype_bytes = layout.kv_dtype.bytes();
    let max_model_len = o.max_model_len.unwrap_or(crate::engine::default_max_model_len(o.engine, &model));
    if max_model_len == 0 {
        return Err(Error::invalid("--max-model-len", "0 must be at least 1"));
    }
    let request_overhead_ms = o.request_overhead_ms.unwrap_or(DEFAULT_REQUEST_OVERHEAD_MS);
    if !(request_overhead_ms.is_finite() && (0.0..=3.6e6).contains(&request_overhead_ms)) {
        return Err(Error::invalid(
            "--request-overhead-ms",
            format!("{request_overhead_ms} must be a number of ms between 0 and 3600000"),
        ));
    }
    positive("--schedule-conservativeness", o.schedule_conservativeness)?;
    o.cluster.validate()?;
    let goodput = o
        .goodput
        .as_ref()
        .map(|w| crate::metrics::Goodput::parse(w))
        .transpose()
        .map_err(|e| Error::invalid("--goodput", e))?;
    // A scale-down drains as a rolling restart does, under the same --drain-timeout-s.
    let drain_timeout_s = o.faults.drain_timeout_s.unwrap_or(crate::cluster::faults::DEFAULT_DRAIN_TIMEOUT_S);
    let pools = o.cluster.pd.as_ref().map(|pd| (pd.prefill, pd.decode));
    let mut autoscale = o.autoscale.plan(
        pools.map_or(o.cluster.instances, |(p, d)| p + d),
        layout.parallel.world().min(u32::MAX as u64) as u32,
        layout.parallel.weight_bytes_per_rank(&model),
        drain_timeout_s,
        pools,
    )?;
    if let Some(crate::cluster::autoscale::Rule::Sla(p)) = autoscale.as_mut().map(|a| &mut a.rule) {
        // Dynamo's KV router reports the KV hit rate the planner discounts prompts by.
        p.router_kv_hit_rate = o.cluster.router == crate::cluster::router::RouterKind::KvAware;
    }
    if let Some(a) = autoscale.as_mut().filter(|_| pools.is_some()) {
        // A pool's instance drains to its end: what a drain timeout would cut (allocations and
        // KV transfers between the pools in flight) is not modelled.
        if o.faults.drain_timeout_s.is_some() {
            return Err(Error::invalid(
                "--drain-timeout-s",
                "is not modelled for prefill/decode pools: a scaled-down instance finishes what it holds and what \
                 is handed to it",
            ));
        }
        a.drain_timeout_s = f64::INFINITY;
    }
    let faults = match &autoscale {
        None => o.faults.plan(o.arrivals.seed)?,
        Some(a) => {
            a.validate(o.cluster.pd.is_some(), o.engine)?;
            let drain = crate::cluster::faults::FaultOptions { drain_timeout_s: None, ..o.faults.clone() };
            if drain != crate::cluster::faults::FaultOptions::default() {
                return Err(Error::invalid(
                    "--autoscale",
                    "instance failures and rolling restarts in an autoscaled fleet are not modelled yet: drop the \
                     failure flags or --autoscale",
                ));
            }
            None
        }
    };
    if let Some(f) = &faults {
        f.validate(o.cluster.instances, o.cluster.pd.is_some(), o.engine)?;
    }
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
    let util = positive(
        "--gpu-memory-utilization",
        o.gpu_memory_utilization.unwrap_or(version.rules().gpu_memory_utilization),
    )?;
    if util > 1.0 {
        return Err(Error::invalid("--gpu-memory-utilization", format!("{util} is above 1")));
    }
    check_overrides(&o.memory)?;
    // SGLang 0.4.3.post2 under EAGLE/NEXTN: one request per prefill batch, no radix cache, no
    // chunked prefill (`ServerArgs.__post_init__` overrides both).
    let prefill_only_one_req = o.engine == EngineKind::Sglang
        && version.rules().sglang_spec_one_prefill
        && matches!(o.layout.speculative_algorithm, SpecAlgorithm::Mtp | SpecAlgorithm::Eagle);
    let policy = if prefill_only_one_req {
        Policy::None
    } else {
        o.policy.unwrap_or(crate::engine::default_policy(o.engine, version))
    };
    let hybrid = crate::engine::vllm_hybrid::resolve(
        &o.hybrid,
        &crate::engine::vllm_hybrid::HybridMachine {
            engine: o.engine,
            version,
            model: &model,
            policy,
            block_size: o.block_size,
            pp: layout.parallel.pp,
            disaggregated: o.cluster.pd.is_some(),
            offloading: o.offload.size_gib.is_some(),
            chunked_prefill: o.enable_chunked_prefill != Some(false),
            speculative: layout.spec.is_some(),
        },
    )?;
    // A Mamba state raises vLLM's block size until one block of attention holds it.
    let mamba_block;
    // FlashInfer's prefill checkpoints matter only to prefix caching (`mamba_cache_mode` align).
    let flashinfer_gdn = crate::engine::vllm_hybrid::flashinfer_gdn(&gpu, &model) && policy == Policy::Paged;
    let mut block_note = None;
    let o = match &hybrid {
        Some(g) if g.mamba_groups > 0 => {
            crate::engine::vllm::check_block_size(o.engine, o.block_size)?;
            let attn_page =
                layout.parallel.kv_bytes_per_token_per_rank(&model, kv_dtype_bytes) / model.kv_cache_layers();
            let state = crate::engine::vllm_hybrid::state_bytes(&model, layout.parallel.attn_tp(), layout.ssm_dtype);
            let b = crate::engine::vllm_hybrid::mamba_block_size(o.block_size, attn_page, state, flashinfer_gdn);
            block_note = Some(format!(
                "{}: block size {} raised to {b} tokens, so that one block of a full-attention layer ({} bytes a \
                 token on a GPU) holds one sequence's state of a linear layer ({state} bytes, {} recurrence; {}) \
                 (vLLM Platform._align_hybrid_block_size)",
                model.name,
                o.block_size,
                attn_page,
                layout.ssm_dtype.name(),
                if flashinfer_gdn {
                    "FlashInfer's GDN prefill kernel, states checkpointed every 64 tokens"
                } else if policy == Policy::Paged {
                    "Triton's GDN prefill kernel"
                } else {
                    "prefix caching off"
                }
            ));
            mamba_block = RunOptions { block_size: b, ..o.clone() };
            &mamba_block
        }
        _ => o,
    };
    let mut flags = engine_flags(o);
    if prefill_only_one_req {
        flags.chunked_prefill_size = Some(-1);
    }
    let swa = crate::engine::sglang::swa::resolve(
        &o.sglang_swa,
        &crate::engine::sglang::swa::SwaMachine {
            engine: o.engine,
            version,
            model: &model,
            radix: policy == Policy::Radix,
            disaggregated: o.cluster.pd.is_some(),
        },
    )?;
    // KV bytes of one token slot of the pool on one rank: every layer's, under vLLM's hybrid
    // manager the largest group's layers' (a block holds one group's tokens), under SGLang's
    // window pool the full layers' and the window layers' share.
    let kv_bytes_per_token_per_rank = {
        let all = layout.parallel.kv_bytes_per_token_per_rank(&model, kv_dtype_bytes);
        match (&hybrid, &swa) {
            (Some(g), _) => all / model.kv_cache_layers() * g.layers_per_group,
            (None, Some(p)) => p.cell_bytes(all / model.layers),
            (None, None) => all,
        }
    };
    let lora = crate::engine::vllm_lora::resolve(
        &o.lora,
        &crate::engine::vllm_lora::LoraMachine {
            engine: o.engine,
            version,
            model: &model,
            tp: layout.parallel.tp,
            pp: layout.parallel.pp,
            offloading: o.offload.size_gib.is_some(),
            disaggregated: o.cluster.pd.is_some(),
            pcie_gbps: gpu.pcie_gbps,
        },
    )?;
    let machine = crate::engine::launch::Machine {
        gpu: &gpu,
        model: &model,
        layout: &layout,
        tp: o.tp,
        gpu_memory_utilization: util,
        max_model_len,
        kv_bytes_per_token_per_rank,
        lora_slot_bytes_per_rank: lora.map_or(0, |l| l.slot_bytes_per_rank),
    };
    let vllm = matches!(o.engine, EngineKind::Vllm | EngineKind::VllmV0);
    if vllm {
        crate::engine::vllm_pool::check_kv_budget(&flags, &machine)?;
    }
    let launched = crate::engine::start(o.engine, version, &flags, &machine)?;
    // SGLang's recurrent-state pool for a model with linear layers takes its share of the memory
    // first, and its slots cap the running requests (docs/engines/sglang-mamba.md).
    let mamba_machine = crate::engine::sglang::mamba::MambaMachine {
        engine: o.engine,
        version,
        radix: policy == Policy::Radix,
        page: o.page_size,
        disaggregated: o.cluster.pd.is_some(),
        hicache: o.hicache.enable,
    };
    let states = crate::engine::sglang::mamba::apply(&o.sglang_mamba, &mamba_machine, launched, &flags, &machine)?;
    let launched = states.as_ref().map_or(launched, |s| s.launch);
    let vllm_memory = launched.vllm_memory.map(|(m, _)| m);
    let (max_num_seqs, max_num_batched_tokens, chunked_prefill_size) =
        (launched.max_num_seqs, launched.max_num_batched_tokens, launched.chunked_prefill_size);
    let (kv_tokens, mem_fraction_static) = (launched.kv_tokens, launched.mem_fraction_static);
    let num_scheduler_steps = crate::engine::vllm_v0::scheduler_steps(o.engine, &flags)?;
    let async_output_proc = crate::engine::vllm_v0::async_output_proc(o.engine, &flags)?;
    let virtual_engines =
        crate::engine::vllm_v0::virtual_engines(o.engine, &flags, num_scheduler_steps, o.cluster.pd.is_some())?;
    let overlap = crate::engine::overlap(o.engine, version, &flags)?;
    let (num_gpu_blocks, capacity) = match policy {
        // vLLM's blocks, the hybrid manager's with prefix caching off too.
        Policy::Paged | Policy::None if hybrid.is_some() || policy == Policy::Paged => {
            let blocks = crate::engine::vllm_pool::gpu_blocks(vllm, &flags, &machine, &launched)?;
            (Some(blocks), (blocks - 1) * o.block_size as u64)
        }
        // A pool set by hand is no larger than what memory holds: the engines cap it (SGLang, with
        // its warning) or refuse it (LightLLM) at launch, so the launch's pool is the pool.
        Policy::Radix => (None, pool(o, kv_tokens) / o.page_size as u64 * o.page_size as u64),
        // SGLang's pool is whole pages with the radix cache off too.
        Policy::None if o.engine == EngineKind::Sglang => {
            (None, pool(o, kv_tokens) / o.page_size as u64 * o.page_size as u64)
        }
        _ => (None, pool(o, kv_tokens)),
    };
    // SGLang's window pool sizes both pools its own way.
    let (capacity, window_tokens) = match &swa {
        Some(p) => {
            let (full, window) = p.pools(&crate::engine::sglang::swa::PoolInputs {
                memory_tokens: kv_tokens,
                max_total_tokens: o.max_total_tokens,
                max_running_requests: o.max_running_requests,
                chunked_prefill_size,
                page: o.page_size,
            });
            (full, Some(window))
        }
        None => (capacity, None),
    };
    if capacity == 0 {
        return Err(Error::invalid(
            "--gpu-memory-utilization",
            "no memory left for the KV cache: the model does not fit",
        ));
    }
    let sglang_priority = match o.engine {
        EngineKind::Sglang => crate::engine::sglang::priority::resolve(&o.sglang_priority, version, o.schedule_policy)?,
        _ => None,
    };
    crate::engine::sglang::priority::check_queue_bound(o.max_queued_requests, o.cluster.pd.is_some())?;
    // The host link prices whichever host tier is on: under HiCache, not vLLM's offloading.
    let offload_flags = crate::engine::vllm_offload::OffloadOptions {
        host_link_gbps: o.offload.host_link_gbps.filter(|_| !o.hicache.enable),
        ..o.offload.clone()
    };
    let offload = crate::engine::vllm_offload::resolve(
        &offload_flags,
        &crate::engine::vllm_offload::TierMachine {
            engine: o.engine,
            version,
            paged: policy == Policy::Paged,
            block_size: o.block_size,
            kv_bytes_per_token_per_rank,
            ranks: if model.is_mla() { layout.parallel.pp } else { layout.parallel.world() },
            world: layout.parallel.world(),
            pp: layout.parallel.pp,
            disaggregated: o.cluster.pd.is_some(),
            pcie_gbps: gpu.pcie_gbps,
        },
    )?;
    let hicache = crate::engine::sglang::hicache::resolve(
        &o.hicache,
        &crate::engine::sglang::hicache::HiCacheMachine {
            engine: o.engine,
            version,
            radix: policy == Policy::Radix,
            device_tokens: capacity,
            page_size: o.page_size,
            token_bytes_per_rank: kv_bytes_per_token_per_rank,
            ranks: layout.parallel.world(),
            pp: layout.parallel.pp,
            disaggregated: o.cluster.pd.is_some(),
            window_pool: swa.is_some(),
            host_link_gbps: o.offload.host_link_gbps,
            pcie_gbps: gpu.pcie_gbps,
        },
    )?;
    if o.cluster.reads_kv_events() && (policy != Policy::Paged || hybrid.is_some()) {
        return Err(Error::invalid(
            if o.cluster.router == crate::cluster::router::RouterKind::LlmD {
                "--precise-prefix-cache-scorer-weight"
            } else {
                "--kv-event-delay-ms"
            },
            "KV events are modelled for vLLM's paged cache of one KV cache group (the radix and token-pool caches \
             and the hybrid manager publish none here)",
        ));
    }
    let mut startup_notes: Vec<String> = block_note.into_iter().collect();
    let overridden: Vec<&str> = [
        (o.policy.is_some_and(|p| p != Policy::None), "--policy"),
        (o.chunked_prefill_size.is_some_and(|c| c > 0), "--chunked-prefill-size"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| (given && prefill_only_one_req).then_some(flag))
    .collect();
    if !overridden.is_empty() {
        startup_notes.push(format!(
            "{} overridden: {version} with speculative decoding turns the radix cache and chunked prefill off \
             and prefills one request per batch (SGLang 0.4.3.post2, ServerArgs.__post_init__ under EAGLE/NEXTN)",
            overridden.join(" and ")
        ));
    }
    let swa_layout = match (&swa, window_tokens) {
        (Some(p), Some(tokens)) => {
            crate::engine::sglang::swa::check_pool(p, tokens, o.page_size)?;
            startup_notes.push(format!(
                "{}: SGLang's hybrid window pool: {} full-attention tokens, {} sliding-window tokens \
                 (--swa-full-tokens-ratio {}), window {} (docs/engines/sglang-swa.md)",
                model.name, capacity, tokens, p.ratio, p.window
            ));
            Some(crate::cache::swa::SwaLayout { window: p.window, tokens, sharing: p.sharing })
        }
        _ => None,
    };
    let sglang_pool = match states {
        Some(s) => {
            startup_notes.push(s.note);
            s.layout.map(crate::cache::SglangPool::States)
        }
        None => swa_layout.map(crate::cache::SglangPool::Window),
    };
    if model.is_hybrid() && hybrid.is_none() && swa.is_none() {
        startup_notes.push(format!(
            "{}'s {} layers are cached as full attention: every token's KV kept in every layer ({}; \
             docs/engines/hybrid-attention.md)",
            model.name,
            if model.uses(crate::catalog::AttentionKind::Chunked) { "chunked" } else { "sliding-window" },
            match o.engine {
                EngineKind::Vllm if o.hybrid.disable => "--disable-hybrid-kv-cache-manager",
                EngineKind::Vllm => "vLLM runs chunked-local layers without its hybrid manager by default",
                EngineKind::Sglang if o.sglang_swa.disable => "--disable-hybrid-swa-memory",
                EngineKind::Sglang if model.layers_by_kind()[0] == 0 =>
                    "SGLang gives a window pool only to its is_hybrid_swa_model architectures; a model with no \
                     full-attention layer, such as Mistral-7B-v0.1, is served with one pool",
                EngineKind::Sglang if version == EngineVersion::Sglang05 =>
                    "SGLang serves Gemma 2 and 3 with disable_hybrid_swa_memory",
                EngineKind::Sglang => "the window pool of sglang@0.5.1 (0.4.10's SWARadixCache) is not modelled",
                _ => "this engine's sliding-window memory pool is not modelled",
            }
        ));
    }
    if let (EngineKind::Sglang, Some(t)) = (o.engine, o.max_total_tokens) {
        if t > launched.profiled_kv_tokens {
            startup_notes.push(format!(
                "max_total_tokens={t} is larger than the profiled value {}. Use the profiled value instead. \
                 (SGLang's warning, model_runner.py init_memory_pool: the pool is capped at what memory holds)",
                launched.profiled_kv_tokens
            ));
        }
    }
    let c = RunConfig {
        engine: EngineConfig {
            engine: o.engine,
            version,
            rules: version.rules(),
            max_num_seqs,
            max_num_batched_tokens,
            enable_chunked_prefill: crate::engine::vllm::chunked_prefill(
                o.engine,
                version,
                &flags,
                &model,
                max_model_len,
            ),
            long_prefill_token_threshold: o.long_prefill_token_threshold,
            scheduling_policy: o.scheduling_policy,
            chunked_prefill_size,
            max_prefill_tokens: o.max_prefill_tokens,
            schedule_policy: o.schedule_policy,
            schedule_conservativeness: o.schedule_conservativeness,
            page_size: o.page_size,
            seed: o.arrivals.seed,
            overlap,
            num_scheduler_steps,
            async_output_proc,
            virtual_engines,
            offload,
            hicache_storage: crate::engine::sglang::hicache::resolve_storage(
                &o.hicache,
                hicache.as_ref(),
                o.page_size,
                // MLA's latent is stored once for every rank (`_get_mla_buffer_meta`).
                if model.is_mla() { 1 } else { layout.parallel.world() as u64 },
            )?,
            hicache,
            sglang_priority,
            max_queued_requests: o.max_queued_requests,
            abort_on_priority_when_disabled: o.sglang_priority.abort_when_disabled,
            prefill_only_one_req,
            decode_graphs: if prefill_only_one_req {
                crate::engine::DecodeGraphs::Exact043
            } else {
                crate::engine::DecodeGraphs::Padded
            },
            lora,
        },
        cache: CacheSpec {
            policy,
            block_size: (policy == Policy::Paged || hybrid.is_some()).then_some(o.block_size),
            page_size: (policy == Policy::Radix || policy == Policy::None && o.engine == EngineKind::Sglang)
                .then_some(o.page_size),
            capacity_tokens: Some(capacity),
            hybrid: hybrid.map(|g| {
                let threshold =
                    if o.long_prefill_token_threshold > 0 { o.long_prefill_token_threshold } else { u32::MAX };
                crate::engine::vllm_hybrid::layout(
                    &g,
                    &model,
                    &crate::engine::vllm_hybrid::LayoutInputs {
                        retention: o.hybrid.retention,
                        block_size: o.block_size,
                        max_in_flight_tokens: max_num_batched_tokens as u64 * if overlap { 2 } else { 1 },
                        max_model_len,
                        max_prefill_tokens: max_num_batched_tokens.min(threshold),
                        flashinfer: flashinfer_gdn,
                        prefix_caching: policy == Policy::Paged,
                    },
                )
            }),
            sglang_pool,
        },
        kv_bytes_per_token: model.kv_bytes_per_token(kv_dtype_bytes),
        kv_bytes_per_token_per_rank,
        deployment: layout,
        model,
        gpu,
        tp: o.tp,
        max_model_len,
        gpu_memory_utilization: util,
        vllm_memory,
        mem_fraction_static,
        num_gpu_blocks,
        kv_capacity_tokens: capacity,
        arrivals: o.arrivals,
        max_concurrency: o.max_concurrency,
        request_overhead_ms,
        client_itl: o.client_itl,
        efficiency,
        calibration,
        composed_prior,
        cluster: ClusterConfig {
            // kv-aware counts blocks of the engines' own size.
            router_params: crate::cluster::router::RouterParams {
                kv_block_size: match policy {
                    Policy::Paged => o.block_size,
                    Policy::Radix => o.page_size,
                    _ => 1,
                },
                ..o.cluster.router_params
            },
            ..o.cluster
        },
        faults,
        autoscale,
        goodput,
        deployment_file: None,
        startup_notes,
    };
    crate::engine::check_start(&crate::engine::launch::Started {
        engine: &c.engine,
        model: &c.model,
        max_model_len: c.max_model_len,
        block_size: c.cache.block_size,
        kv_capacity_tokens: c.kv_capacity_tokens,
        kv_bytes_per_token_per_rank: c.kv_bytes_per_token_per_rank,
        blocks_overridden: o.num_gpu_blocks_override.is_some(),
    })?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_defaults_by_gpu_class() {
        let c = resolve(&RunOptions::default()).unwrap();
        assert_eq!((c.engine.max_num_seqs, c.engine.max_num_batched_tokens), (1024, 8192));
        assert_eq!(c.cache.block_size, Some(16));
        // The modelled budget of vllm_memory's hand-computed test: 27,474 blocks at 0.92.
        assert_eq!(c.gpu_memory_utilization, 0.92);
        assert_eq!(c.num_gpu_blocks, Some(27_474));
        assert_eq!(c.kv_capacity_tokens, 27_473 * 16);
        let a100 = resolve(&RunOptions { gpu: "a100-80gb".into(), ..Default::default() }).unwrap();
        assert_eq!((a100.engine.max_num_seqs, a100.engine.max_num_batched_tokens), (256, 2048));
        let o = RunOptions { num_gpu_blocks_override: Some(16384), ..Default::default() };
        assert_eq!(resolve(&o).unwrap().kv_capacity_tokens, 16383 * 16);
    }

    /// `--calibration kernels` and the default without a matching profile: the kernel-step
    /// profile's device factors with the engine piece's host, floor and collective factors (vLLM's,
    /// fitted on the H100 Qwen3-32B silicon rows), echoed piece by
    /// piece; for an MoE/MLA model or under speculative decoding the echo says what the dense
    /// kernel steps leave unmeasured; a matching fitted profile still wins by default.
    #[test]
    fn composed_prior_prices_what_no_profile_matches() {
        let o = RunOptions { calibration: Calibration::Kernels, ..Default::default() };
        let c = resolve(&o).unwrap();
        let (_, k) = crate::calibration::profile::builtin_kernels();
        let device = crate::calibration::prior::kernel_device_prior(&k.efficiency);
        let (_, piece) = crate::calibration::prior::engine_piece(EngineKind::Vllm, |_| true).expect("vLLM's piece");
        let e = &c.efficiency;
        assert_eq!(
            (e.gemm_flops, e.mem_bw, e.attn_flops, e.comm_bw),
            (device.gemm_flops, device.mem_bw, device.attn_flops, device.comm_bw)
        );
        let p = &piece.efficiency;
        assert_eq!(
            (e.step_overhead_s, e.per_seq_overhead_s, e.kernel_floor_s, e.comm_latency_s),
            (p.step_overhead_s, p.per_seq_overhead_s, p.kernel_floor_s, p.comm_latency_s)
        );
        assert!(
            c.calibration.contains("; engine: vllm's own factors, fitted on 18 cases: aic-h100/"),
            "{}",
            c.calibration
        );
        assert!(
            c.calibration
                .starts_with("kernels (the composed prior, --calibration kernels): device: the Hopper family's prior")
                && !c.calibration.contains("not measured"),
            "{}",
            c.calibration
        );
        let auto = resolve(&RunOptions::default()).unwrap();
        assert_eq!(auto.efficiency, c.efficiency);
        let none = resolve(&RunOptions { calibration: Calibration::None, ..Default::default() }).unwrap();
        let fitted = resolve(&RunOptions { gpu: "a100-80gb".into(), engine: EngineKind::Sglang, ..Default::default() });
        assert!(c.composed_prior && auto.composed_prior);
        assert!(!none.composed_prior && !fitted.unwrap().composed_prior);
        assert!(auto.calibration.starts_with("prior (no fitted profile for h100-sxm / vllm / llama-3.1-8b): device:"));
        let moe = RunOptions { model: "deepseek-r1".into(), gpu: "h200".into(), tp: 8, ..o.clone() };
        let m = resolve(&moe).unwrap();
        assert_eq!(m.efficiency, c.efficiency);
        assert!(
            m.calibration.contains("device: measured on this GPU")
                && m.calibration.ends_with("deepseek-r1 is MoE, whose own kernels are not measured)"),
            "{}",
            m.calibration
        );
        let layout = LayoutOptions {
            speculative_algorithm: SpecAlgorithm::Ngram,
            spec_acceptance_rate: vec![0.5],
            ..Default::default()
        };
        let spec = resolve(&RunOptions { layout, ..o }).unwrap();
        assert!(spec.calibration.ends_with("llama-3.1-8b is dense, speculative, whose own kernels are not measured)"));
        let fitted = RunOptions { gpu: "a100-80gb".into(), engine: EngineKind::Sglang, ..Default::default() };
        let f = resolve(&fitted).unwrap();
        assert!(f.calibration.starts_with("a100-80gb-sglang (calibration/profiles/"), "{}", f.calibration);
    }

    /// A profile stating a step law (`calibrate --fit --unknown-hardware`) prices the run with
    /// the law, echoed with the profile's name; it is refused under speculative decoding, whose
    /// verify and draft passes the law does not know.
    #[test]
    fn step_law_profile_prices_plain_steps_only() {
        let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../calibration/profiles/seed-vllm-ttft-sweep.toml");
        let o = RunOptions {
            calibration: Calibration::File(f),
            gpu: "v100".into(),
            model: "llama-3.2-11b".into(),
            max_model_len: Some(4096),
            ..Default::default()
        };
        let c = resolve(&o).unwrap();
        assert!(c.efficiency.law.is_some_and(|l| l.step_s > 0.0), "{:?}", c.efficiency);
        assert!(c.calibration.starts_with("seed-vllm-ttft-sweep ("), "{}", c.calibration);
        let layout = LayoutOptions { speculative_algorithm: SpecAlgorithm::Ngram, ..Default::default() };
        let e = resolve(&RunOptions { layout, ..o }).unwrap_err().to_string();
        assert!(e.contains("--calibration") && e.contains("its step law (fitted with --unknown-hardware)"), "{e}");
    }

    #[test]
    fn utilization_defaults_per_bundle_and_the_users_value_wins() {
        let util = |engine, engine_version, set| {
            let o = RunOptions { engine, engine_version, gpu_memory_utilization: set, ..Default::default() };
            resolve(&o).unwrap().gpu_memory_utilization
        };
        assert_eq!(util(EngineKind::Vllm, None, None), 0.92);
        assert_eq!(util(EngineKind::Vllm, Some(EngineVersion::Vllm018), None), 0.9);
        assert_eq!(util(EngineKind::VllmV0, None, None), 0.9);
        assert_eq!(util(EngineKind::Vllm, None, Some(0.8)), 0.8);
        assert_eq!(util(EngineKind::Vllm, Some(EngineVersion::Vllm018), Some(0.95)), 0.95);
        // The user's value reaches the budget: 0.8 × 85,061,827,297 B, ceil.
        let c = resolve(&RunOptions { gpu_memory_utilization: Some(0.8), ..Default::default() }).unwrap();
        assert_eq!(c.vllm_memory.unwrap().requested_bytes, 68_049_461_838);
    }

    #[test]
    fn a_logged_kv_budget_reproduces_its_blocks() {
        // vLLM logs "Available KV cache memory"; --kv-cache-memory-bytes takes it as is.
        let memory = MemoryOverrides { kv_cache_memory_bytes: Some(50 << 30), ..Default::default() };
        let c = resolve(&RunOptions { memory, ..Default::default() }).unwrap();
        assert_eq!(c.num_gpu_blocks, Some((50 << 30) / (16 * 131_072)));
        // The activation term alone, set as measured, with the graphs not charged.
        let memory =
            MemoryOverrides { activation_peak_gib: Some(1.26), cudagraph_memory_gib: Some(0.0), ..Default::default() };
        let m = resolve(&RunOptions { memory, ..Default::default() }).unwrap().vllm_memory.unwrap();
        assert_eq!((m.activation_peak_bytes, m.cudagraph_bytes), (1_352_914_698, 0));
        assert!(resolve(&RunOptions { engine: EngineKind::Sglang, ..Default::default() })
            .unwrap()
            .vllm_memory
            .is_none());
        let e = resolve(&RunOptions { engine: EngineKind::Lightllm, memory, ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("not a flag of --engine lightllm"), "{e}");
    }

    #[test]
    fn vllm_v0_budget_covers_a_whole_prompt() {
        let c = resolve(&RunOptions { engine: EngineKind::VllmV0, ..Default::default() }).unwrap();
        assert_eq!(c.engine.max_num_batched_tokens, 131_072);
        assert!(!c.engine.enable_chunked_prefill);
    }

    /// vllm-v0@0.8: `EngineArgs._set_default_args_v0`'s defaults, and V0's virtual engines under
    /// pipeline parallelism (refused beside multi-step scheduling).
    #[test]
    fn vllm_v0_08_defaults_and_virtual_engines() {
        let v08 = RunOptions {
            engine: EngineKind::VllmV0,
            engine_version: Some(EngineVersion::VllmV008),
            ..Default::default()
        };
        // Llama-3.1-8B (128K context, no MLA) on an H100: chunked prefill on with the 2,048-token
        // budget, 256 sequences (no device class), prefix caching off, one scheduler.
        let c = resolve(&v08).unwrap();
        assert!(c.engine.enable_chunked_prefill);
        assert_eq!((c.engine.max_num_seqs, c.engine.max_num_batched_tokens), (256, 2048));
        assert_eq!((c.cache.policy, c.engine.virtual_engines), (Policy::None, 1));
        // vllm-v0@0.9 keeps the device class, no chunking and prefix caching.
        let c9 = resolve(&RunOptions { engine: EngineKind::VllmV0, ..Default::default() }).unwrap();
        assert_eq!(
            (c9.engine.max_num_seqs, c9.engine.enable_chunked_prefill, c9.cache.policy),
            (1024, false, Policy::Paged)
        );
        // A 32K context does not chunk.
        let short = resolve(&RunOptions { max_model_len: Some(32768), ..v08.clone() }).unwrap();
        assert!(!short.engine.enable_chunked_prefill);
        assert_eq!(short.engine.max_num_batched_tokens, 32768);
        // DeepSeek-R1 (MLA) on 16 H200s, TP 8 × PP 2: no chunking, a budget of max_model_len,
        // two virtual engines.
        let ds = RunOptions {
            model: "deepseek-r1".into(),
            gpu: "h200".into(),
            tp: 8,
            layout: LayoutOptions { pp: 2, nnodes: 2, ..Default::default() },
            ..v08
        };
        let c = resolve(&ds).unwrap();
        assert!(!c.engine.enable_chunked_prefill);
        assert_eq!((c.engine.max_num_seqs, c.engine.max_num_batched_tokens), (256, 163_840));
        assert_eq!(c.engine.virtual_engines, 2);
        assert!(c.engine.settings_line().contains("2 virtual engines"), "{}", c.engine.settings_line());
        let e = resolve(&RunOptions { num_scheduler_steps: Some(4), ..ds }).unwrap_err().to_string();
        assert!(e.contains("virtual engines") && e.contains("not modelled"), "{e}");
    }

    /// sglang@0.4.3 under EAGLE/NEXTN: one request per prefill batch, no radix cache, no chunked
    /// prefill, no 48-request default (0.4.3.post2 `ServerArgs.__post_init__`); without
    /// speculation, or under sglang@0.5, none of that.
    #[test]
    fn sglang_043_speculative_settings() {
        let spec = LayoutOptions {
            speculative_algorithm: SpecAlgorithm::Eagle,
            num_speculative_tokens: Some(3),
            spec_acceptance_rate: vec![0.8],
            ..Default::default()
        };
        let o = RunOptions {
            engine: EngineKind::Sglang,
            engine_version: Some(EngineVersion::Sglang043),
            layout: spec.clone(),
            ..Default::default()
        };
        let c = resolve(&o).unwrap();
        assert!(c.engine.prefill_only_one_req);
        assert_eq!((c.cache.policy, c.engine.chunked_prefill_size), (Policy::None, 0));
        assert!(c.engine.max_num_seqs > 48, "{}", c.engine.max_num_seqs);
        assert!(c.engine.settings_line().contains("one request per prefill batch"));
        let plain = resolve(&RunOptions { layout: LayoutOptions::default(), ..o.clone() }).unwrap();
        assert!(!plain.engine.prefill_only_one_req);
        assert_eq!((plain.cache.policy, plain.engine.chunked_prefill_size), (Policy::Radix, 8192));
        assert!(notes(&o, &c).is_empty(), "{:?}", notes(&o, &c));
        // Given explicitly, the settings SGLang overrides are overridden, and the run says so.
        let explicit = RunOptions { policy: Some(Policy::Radix), chunked_prefill_size: Some(4096), ..o.clone() };
        let e = resolve(&explicit).unwrap();
        assert_eq!((e.cache.policy, e.engine.chunked_prefill_size), (Policy::None, 0));
        let said = notes(&explicit, &e);
        assert!(said.iter().any(|n| n.starts_with("--policy and --chunked-prefill-size overridden")), "{said:?}");
        let newer = resolve(&RunOptions { engine_version: Some(EngineVersion::Sglang05), ..o }).unwrap();
        assert!(!newer.engine.prefill_only_one_req);
        assert_eq!(newer.engine.max_num_seqs, 48);
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
        assert_eq!(c.mem_fraction_static, Some(0.835));
        assert_eq!((c.engine.chunked_prefill_size, c.engine.max_prefill_tokens), (8192, 16384));
        // max_running_requests = min(tokens / 2, clamp(tokens / context × 512, 2048, 4096)).
        assert_eq!(c.engine.max_num_seqs, 2048);
        let small =
            resolve(&RunOptions { engine: EngineKind::Sglang, max_total_tokens: Some(3000), ..Default::default() });
        assert_eq!(small.unwrap().engine.max_num_seqs, 1500);
    }

    /// 0.5.23 caps a user's --max-running-requests at token capacity / 2 (`resolve_max_num_reqs`);
    /// 0.4.10 takes it as given.
    #[test]
    fn sglang_caps_a_users_running_limit_at_half_the_tokens() {
        let o = |v| RunOptions {
            engine: EngineKind::Sglang,
            engine_version: Some(v),
            max_total_tokens: Some(3000),
            max_running_requests: Some(5000),
            ..Default::default()
        };
        assert_eq!(resolve(&o(EngineVersion::Sglang05)).unwrap().engine.max_num_seqs, 1500);
        assert_eq!(resolve(&o(EngineVersion::Sglang051)).unwrap().engine.max_num_seqs, 5000);
        let under = RunOptions { max_running_requests: Some(64), ..o(EngineVersion::Sglang05) };
        assert_eq!(resolve(&under).unwrap().engine.max_num_seqs, 64);
    }

    /// With chunking off the memory reserve follows max_prefill_tokens, not the default chunk:
    /// less KV than with chunking, where cachesim used to give 30% more.
    #[test]
    fn sglang_memory_reserve_follows_the_chunk_in_use() {
        let frac = |chunk| {
            let o = RunOptions { engine: EngineKind::Sglang, chunked_prefill_size: chunk, ..Default::default() };
            let c = resolve(&o).unwrap();
            (c.mem_fraction_static.unwrap(), c.kv_capacity_tokens)
        };
        let (on, kv_on) = frac(None);
        let (off, kv_off) = frac(Some(-1));
        assert_eq!((on, off), (0.835, 0.685));
        assert!(kv_off < kv_on, "{kv_off} < {kv_on}");
        // The 0.5.1 bundle's reserve does not depend on the chunk.
        let old = |chunk| {
            let o = RunOptions {
                engine: EngineKind::Sglang,
                engine_version: Some(EngineVersion::Sglang051),
                chunked_prefill_size: chunk,
                ..Default::default()
            };
            resolve(&o).unwrap().mem_fraction_static.unwrap()
        };
        assert_eq!((old(None), old(Some(-1))), (0.874, 0.874));
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

    /// Async output processing: on for vLLM V0 by default, off with `--disable-async-output-proc`,
    /// `--enforce-eager`, speculative decoding or pipeline parallelism; the flags are refused for
    /// the other engines.
    #[test]
    fn async_output_proc_as_vllm_decides_it() {
        let on = |o: RunOptions| resolve(&o).map(|c| c.engine.async_output_proc);
        let v0 = RunOptions { engine: EngineKind::VllmV0, ..Default::default() };
        assert!(on(v0.clone()).unwrap(), "on by default");
        assert!(!on(RunOptions { disable_async_output_proc: true, ..v0.clone() }).unwrap());
        assert!(!on(RunOptions { enforce_eager: true, ..v0.clone() }).unwrap());
        let spec = LayoutOptions { speculative_algorithm: SpecAlgorithm::Ngram, ..Default::default() };
        assert!(
            !crate::engine::vllm_v0::async_output_proc(
                v0.engine,
                &engine_flags(&RunOptions { layout: spec, ..v0.clone() })
            )
            .unwrap(),
            "not with speculative decoding"
        );
        let pp = LayoutOptions { pp: 2, ..Default::default() };
        assert!(
            !crate::engine::vllm_v0::async_output_proc(
                v0.engine,
                &engine_flags(&RunOptions { layout: pp, ..v0.clone() })
            )
            .unwrap(),
            "not under pipeline parallelism"
        );
        assert!(!on(RunOptions::default()).unwrap(), "vLLM v1 has none");
        let e = on(RunOptions { enforce_eager: true, ..Default::default() }).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument { field, .. } if field == "--enforce-eager"), "{e}");
    }

    /// `--num-scheduler-steps`: vLLM V0's only, 1 by default, refused with chunked prefill or
    /// speculation as vLLM 0.6.0 refuses them; echoed on the engine line only when above 1.
    #[test]
    fn num_scheduler_steps_is_v0_only() {
        let steps = |engine, n: Option<u32>, chunked: Option<bool>| {
            resolve(&RunOptions {
                engine,
                num_scheduler_steps: n,
                enable_chunked_prefill: chunked,
                ..Default::default()
            })
            .map(|c| c.engine)
        };
        let one = steps(EngineKind::VllmV0, None, None).unwrap();
        assert_eq!(one.num_scheduler_steps, 1);
        assert!(!one.settings_line().contains("num_scheduler_steps"));
        let ten = steps(EngineKind::VllmV0, Some(10), None).unwrap();
        assert_eq!(ten.num_scheduler_steps, 10);
        assert!(
            ten.settings_line().ends_with("· num_scheduler_steps 10 (multi-step) · async output processing on"),
            "{}",
            ten.settings_line()
        );
        for engine in [EngineKind::Vllm, EngineKind::Sglang, EngineKind::Lightllm, EngineKind::Trtllm] {
            let e = steps(engine, Some(10), None).unwrap_err();
            assert!(matches!(&e, Error::InvalidArgument { field, .. } if field == "--num-scheduler-steps"), "{e}");
            assert!(e.to_string().contains("--engine vllm-v0"), "{e}");
        }
        for (n, chunked, says) in [(Some(0), None, "at least 1"), (Some(10), Some(true), "chunked prefill")] {
            let e = steps(EngineKind::VllmV0, n, chunked).unwrap_err().to_string();
            assert!(e.contains("--num-scheduler-steps") && e.contains(says), "{e}");
        }
        assert_eq!(steps(EngineKind::VllmV0, Some(1), Some(true)).unwrap().num_scheduler_steps, 1);
    }

    /// SGLang under EAGLE/MTP: the overlap schedule off and max_running_requests 48 unless
    /// given (server_args.py `_handle_speculative_decoding`); n-gram only turns overlap off.
    #[test]
    fn sglang_speculation_defaults() {
        let run = |algo, running: Option<u32>, overlap: Option<bool>| {
            let rate = if matches!(algo, SpecAlgorithm::Eagle | SpecAlgorithm::Ngram) { vec![0.7] } else { Vec::new() };
            let layout =
                LayoutOptions { speculative_algorithm: algo, spec_acceptance_rate: rate, ..Default::default() };
            let o = RunOptions {
                engine: EngineKind::Sglang,
                model: "deepseek-r1".into(),
                gpu: "h200".into(),
                tp: 8,
                layout,
                max_running_requests: running,
                overlap,
                ..Default::default()
            };
            let c = resolve(&o).unwrap();
            (c.engine.max_num_seqs, c.engine.overlap)
        };
        assert_eq!(run(SpecAlgorithm::Mtp, None, None), (48, false));
        assert_eq!(run(SpecAlgorithm::Eagle, None, None), (48, false));
        assert_eq!(run(SpecAlgorithm::Mtp, Some(512), None), (512, false));
        assert_eq!(run(SpecAlgorithm::Mtp, None, Some(true)), (48, true));
        let (ngram_running, ngram_overlap) = run(SpecAlgorithm::Ngram, None, None);
        assert!(ngram_running > 48 && !ngram_overlap);
        let (plain_running, plain_overlap) = run(SpecAlgorithm::None, None, None);
        assert!(plain_running > 48 && plain_overlap);
    }

    /// vLLM 0.18 runs its host-side n-gram proposer synchronously (async scheduling off by
    /// default, `--async-scheduling` refused: `VllmConfig.__post_init__`); 0.33's V2 model runner
    /// drafts n-grams on the GPU and keeps it on. EAGLE/MTP keep it on in both.
    #[test]
    fn vllm_async_scheduling_with_speculation_by_release() {
        let run = |version, algo, overlap: Option<bool>| {
            let rate = if algo == SpecAlgorithm::None { Vec::new() } else { vec![0.7] };
            let layout =
                LayoutOptions { speculative_algorithm: algo, spec_acceptance_rate: rate, ..Default::default() };
            let o = RunOptions { engine_version: Some(version), layout, overlap, ..Default::default() };
            resolve(&o).map(|c| c.engine.overlap)
        };
        assert!(!run(EngineVersion::Vllm018, SpecAlgorithm::Ngram, None).unwrap());
        assert!(!run(EngineVersion::Vllm018, SpecAlgorithm::Ngram, Some(false)).unwrap());
        let e = run(EngineVersion::Vllm018, SpecAlgorithm::Ngram, Some(true)).unwrap_err().to_string();
        assert!(e.contains("--async-scheduling") && e.contains("vllm@0.18") && e.contains("NGram GPU"), "{e}");
        assert!(run(EngineVersion::Vllm018, SpecAlgorithm::Eagle, None).unwrap());
        assert!(run(EngineVersion::Vllm018, SpecAlgorithm::None, None).unwrap());
        assert!(run(EngineVersion::Vllm033, SpecAlgorithm::Ngram, None).unwrap());
        assert!(run(EngineVersion::Vllm033, SpecAlgorithm::Ngram, Some(true)).unwrap());
    }

    #[test]
    fn bad_settings_are_named() {
        let e = resolve(&RunOptions { max_num_seqs: Some(64), max_num_batched_tokens: Some(32), ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--max-num-batched-tokens"));
        let e = resolve(&RunOptions { model: "llama-3.1-70b".into(), gpu: "a10".into(), ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("does not fit"));
        let e = resolve(&RunOptions { tp: 3, ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--tp"));
        let e = resolve(&RunOptions { gpu_memory_utilization: Some(1.5), ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("above 1"));
        let nan = MemoryOverrides { activation_peak_gib: Some(f64::NAN), ..Default::default() };
        let e = resolve(&RunOptions { memory: nan, ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--activation-peak-gib"));
        let zero = MemoryOverrides { kv_cache_memory_bytes: Some(0), ..Default::default() };
        let e = resolve(&RunOptions { memory: zero, ..Default::default() });
        assert!(e.unwrap_err().to_string().contains("--kv-cache-memory-bytes"));
    }

    #[test]
    fn startup_refusals_at_their_boundaries() {
        let refused = |o: RunOptions| matches!(resolve(&o), Err(Error::StartupRefused { .. }));
        // SGLang: max_req_input_len = min(context − 1, pool − 1) − 5 must be positive.
        let sglang = |t| RunOptions { engine: EngineKind::Sglang, max_total_tokens: Some(t), ..Default::default() };
        assert!(refused(sglang(6)));
        assert!(!refused(sglang(7)));
        // vLLM starts with any --num-gpu-blocks-override (memory is checked before it applies); a
        // note says when ceil(max_model_len / block) blocks exceed the usable ones (null block aside).
        let vllm = |blocks, len| RunOptions {
            num_gpu_blocks_override: Some(blocks),
            max_model_len: Some(len),
            ..Default::default()
        };
        let noted = |o: RunOptions| {
            let c = resolve(&o).expect("vLLM starts with any block override");
            notes(&o, &c).iter().any(|n| n.contains("--num-gpu-blocks-override"))
        };
        assert!(!noted(vllm(11, 160)));
        assert!(noted(vllm(11, 161)));
        assert!(noted(vllm(10, 160)));
        // Without chunked prefill the budget must cover max_model_len; an unset budget is raised to it.
        let v0 = |budget| RunOptions {
            engine: EngineKind::VllmV0,
            max_num_batched_tokens: budget,
            max_model_len: Some(4096),
            ..Default::default()
        };
        assert!(refused(v0(Some(4095))));
        assert!(!refused(v0(Some(4096))));
        assert!(!refused(v0(None)));
        // vLLM: no longer than the model's own context.
        assert!(refused(RunOptions { max_model_len: Some(131_073), ..Default::default() }));
        assert!(!refused(RunOptions { max_model_len: Some(131_072), ..Default::default() }));
        let sglang_len = |l| RunOptions { engine: EngineKind::Sglang, max_model_len: Some(l), ..Default::default() };
        assert!(refused(sglang_len(131_073)));
        assert!(!refused(sglang_len(131_072)));
        // LightLLM's model length is its max_req_total_len, 16384 by default.
        let l = resolve(&RunOptions { engine: EngineKind::Lightllm, ..Default::default() }).unwrap();
        assert_eq!(l.max_model_len, crate::engine::lightllm::MAX_REQ_TOTAL_LEN);
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
        let huge = MemoryOverrides { activation_peak_gib: Some(1000.0), ..Default::default() };
        assert_eq!(blamed(RunOptions { memory: huge, ..Default::default() }), "--activation-peak-gib");
        let negative = MemoryOverrides { activation_peak_gib: Some(-1.0), ..Default::default() };
        assert_eq!(blamed(RunOptions { memory: negative, ..Default::default() }), "--activation-peak-gib");
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

    /// Found by tests/suite/fuzz.rs: `max_num_seqs × max_model_len` overflowed. Such a length is now
    /// refused (above the model's own), without overflowing on the way.
    #[test]
    fn a_huge_max_model_len_does_not_overflow() {
        let o = RunOptions { max_model_len: Some(u64::MAX), ..Default::default() };
        assert!(matches!(resolve(&o), Err(Error::StartupRefused { .. })));
        let file = RunOptions { model_file: None, max_model_len: Some(u64::MAX / 2), ..Default::default() };
        assert!(matches!(resolve(&file), Err(Error::StartupRefused { .. })));
    }

    /// Found by tests/suite/fuzz.rs: LightLLM's `2 × chunk + 256` overflowed.
    #[test]
    fn a_huge_lightllm_chunk_saturates() {
        let o = RunOptions { engine: EngineKind::Lightllm, chunked_prefill_size: Some(i64::MAX), ..Default::default() };
        assert_eq!(resolve(&o).unwrap().engine.max_num_batched_tokens, 16384);
    }

    /// Found by tests/suite/fuzz.rs: `(blocks − 1) × block_size` overflowed.
    #[test]
    fn a_huge_block_override_is_refused() {
        let o = RunOptions { num_gpu_blocks_override: Some(u64::MAX), block_size: 256, ..Default::default() };
        assert_eq!(blamed(o), "--num-gpu-blocks-override");
    }

    /// Issue 28 §2: nothing the hardware cannot hold is simulated. A layout of more GPUs than
    /// the nodes hold, KV heads that neither split nor replicate evenly, a pool set by hand above
    /// the GPU memory, a block size vLLM does not take and SGLang's running limit of 0 are
    /// refused, each naming its flag; SGLang caps a `--max-total-tokens` above its profiled pool
    /// with its own warning.
    #[test]
    fn nothing_impossible_is_simulated() {
        let tp = |tp, nnodes, gpu: &str| RunOptions {
            tp,
            gpu: gpu.into(),
            model: "llama-3.1-70b".into(),
            layout: LayoutOptions { nnodes, ..Default::default() },
            ..Default::default()
        };
        assert_eq!(blamed(tp(16, 1, "h100-sxm")), "--nnodes");
        assert!(resolve(&tp(16, 2, "h100-sxm")).is_ok());
        assert!(resolve(&tp(8, 1, "h100-sxm")).is_ok());
        // An NVL72 rack is one NVLink domain of 72.
        assert!(resolve(&tp(16, 1, "gb200")).is_ok());
        assert_eq!(blamed(RunOptions { tp: 7, model: "qwen2.5-7b".into(), ..Default::default() }), "--tp");
        // TP above the KV heads replicates them: one head per rank, 8 KV heads over TP 16.
        let c = resolve(&tp(16, 2, "h100-sxm")).unwrap();
        assert_eq!(c.kv_bytes_per_token_per_rank, 80 * 2 * 128 * 2);
        let memory = MemoryOverrides { kv_cache_memory_bytes: Some(1 << 40), ..Default::default() };
        assert_eq!(blamed(RunOptions { memory, ..Default::default() }), "--kv-cache-memory-bytes");
        assert_eq!(
            blamed(RunOptions { num_gpu_blocks_override: Some(100_000_000), ..Default::default() }),
            "--num-gpu-blocks-override"
        );
        assert_eq!(blamed(RunOptions { block_size: 24, ..Default::default() }), "--block-size");
        assert!(resolve(&RunOptions { block_size: 256, ..Default::default() }).is_ok());
        let v0 = RunOptions { engine: EngineKind::VllmV0, block_size: 256, ..Default::default() };
        assert_eq!(blamed(v0), "--block-size");
        let sglang = |running, total| RunOptions {
            engine: EngineKind::Sglang,
            max_running_requests: running,
            max_total_tokens: total,
            ..Default::default()
        };
        assert_eq!(blamed(sglang(Some(0), None)), "--max-running-requests");
        let profiled = resolve(&sglang(None, None)).unwrap().kv_capacity_tokens;
        let o = sglang(None, Some(1 << 40));
        let c = resolve(&o).unwrap();
        assert_eq!(c.kv_capacity_tokens, profiled);
        let n = notes(&o, &c);
        assert!(
            n[0].starts_with(&format!("max_total_tokens={} is larger than the profiled value {profiled}.", 1u64 << 40)),
            "{n:?}"
        );
        assert!(notes(&sglang(None, Some(1000)), &resolve(&sglang(None, Some(1000))).unwrap()).is_empty());
        // LightLLM allocates a given pool as is: within memory it is the pool, beyond it refused.
        let light = |t| RunOptions { engine: EngineKind::Lightllm, max_total_tokens: Some(t), ..Default::default() };
        assert_eq!(resolve(&light(500_000)).unwrap().kv_capacity_tokens, 500_000);
        assert_eq!(blamed(light(1 << 40)), "--max-total-tokens");
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
