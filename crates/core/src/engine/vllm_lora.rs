//! vLLM's LoRA serving (`--enable-lora`) as vLLM 0.33 runs it:
//! - **adapters**: `--lora-modules` registers them at start-up in order, with ids 1, 2, …
//!   (`vllm/entrypoints/openai/models/serving.py` `OpenAIServingModels.init_static_loras`, the
//!   `lora_id_counter`); each is loaded then, as a request's would be, so the last
//!   `--max-cpu-loras` start in host memory and the last `--max-loras` in GPU slots;
//! - **the batch rule** (`vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`): after the
//!   running requests are scheduled, the adapters of every running request — scheduled this
//!   step or not — are recorded; a waiting request naming an adapter not among them while they
//!   number `--max-loras` is passed by (`skip_request`: it keeps its place, the queue goes on
//!   to the next), and an admitted request's adapter joins them;
//! - **loads** (`vllm/lora/worker_manager.py` `LRUCacheWorkerLoRAManager._apply_adapters` and
//!   `add_adapter`, `vllm/lora/model_manager.py` `LRUCacheLoRAModelManager.activate_adapter`):
//!   before each forward the worker makes every adapter of the batch resident, in the batch's
//!   order — one not in host memory is read from storage (evicting the least recently used of
//!   the `--max-cpu-loras`, which also frees its GPU slot), one not in a GPU slot is copied into
//!   one (evicting the least recently used of the `--max-loras` slots) — synchronously: the step
//!   waits for them;
//! - **memory**: the GPU slots (`max_loras` adapters at `max_lora_rank`, every wrapped layer,
//!   [`LoraShape`]) are allocated with the weights, before the KV cache is sized;
//! - **compute**: the shrink and expand kernels of a step that has an adapter
//!   ([`crate::cost::lora`]).
//!
//! The adapter is part of every block's hash (`vllm/v1/core/kv_cache_utils.py`
//! `_gen_lora_extra_hash_keys`): requests of different adapters, or of an adapter and the base
//! model, share no cached block. The workload carries that ([`crate::workload::lora`]).
//!
//! Not modelled: an adapter's own rank below `--max-lora-rank` (each is loaded at it), adapters
//! loaded or unloaded while serving (`/v1/load_lora_adapter`), LoRA with MoE or MLA models,
//! with pipeline parallelism, CPU offloading or disaggregation, and the older bundles.

use crate::catalog::Model;
use crate::cost::lora::{LoraKernels, LoraShape};
use crate::engine::vllm_offload::HOST_LINK_EFFICIENCY;
use crate::engine::{EngineKind, EngineVersion};
use crate::error::{Error, Result};
use crate::workload::lora::MAX_ADAPTERS;
use serde::Serialize;

/// `--max-lora-rank` values vLLM takes (`MaxLoRARanks`, `vllm/config/lora.py`).
pub const MAX_LORA_RANKS: &[u32] = &[1, 8, 16, 32, 64, 128, 256, 320, 512];
/// `LoRAConfig.max_lora_rank`'s default.
pub const DEFAULT_MAX_LORA_RANK: u32 = 16;
/// Default rate an adapter not in host memory is read at, GB/s: one NVMe drive's sequential
/// read and the checkpoint's parsing together (`--lora-load-gbps`).
pub const DEFAULT_LOAD_GBPS: f64 = 2.0;

/// The LoRA flags as given (`None`: vLLM's default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraOptions {
    /// `--enable-lora`.
    pub enable: bool,
    /// `--max-loras` (default 1).
    pub max_loras: Option<u32>,
    /// `--max-cpu-loras` (default `--max-loras`).
    pub max_cpu_loras: Option<u32>,
    /// `--max-lora-rank` (default 16).
    pub max_lora_rank: Option<u32>,
    /// `--lora-modules`: the adapters' names, in the order they are registered.
    pub modules: Vec<String>,
    /// `--lora-load-gbps`: the rate an adapter is read from storage at.
    pub load_gbps: Option<f64>,
}

impl LoraOptions {
    /// The flags given without `--enable-lora`, which would then mean nothing.
    fn given(&self) -> Option<&'static str> {
        [
            (self.max_loras.is_some(), "--max-loras"),
            (self.max_cpu_loras.is_some(), "--max-cpu-loras"),
            (self.max_lora_rank.is_some(), "--max-lora-rank"),
            (!self.modules.is_empty(), "--lora-modules"),
            (self.load_gbps.is_some(), "--lora-load-gbps"),
        ]
        .into_iter()
        .find_map(|(on, flag)| on.then_some(flag))
    }
}

/// What LoRA is resolved against.
#[derive(Debug, Clone, Copy)]
pub struct LoraMachine<'a> {
    pub engine: EngineKind,
    pub version: EngineVersion,
    pub model: &'a Model,
    pub tp: u64,
    pub pp: u64,
    pub offloading: bool,
    pub disaggregated: bool,
    /// The GPU's PCIe rate, GB/s both ways together.
    pub pcie_gbps: f64,
}

/// One instance's LoRA serving, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoraConfig {
    /// Adapters registered (`--lora-modules`), ids 1 to this.
    pub adapters: u16,
    pub max_loras: u32,
    pub max_cpu_loras: u32,
    pub max_lora_rank: u32,
    /// Seconds to read one adapter from storage into host memory.
    pub read_s: f64,
    /// Seconds to copy one adapter from host memory into a GPU slot (each rank its shard over
    /// its own link at the rate a pinned copy achieves, all at once).
    pub copy_s: f64,
    /// Bytes of the GPU slots on one rank.
    pub slot_bytes_per_rank: u64,
    /// The kernels a step with an adapter runs.
    #[serde(skip)]
    pub kernels: LoraKernels,
}

impl LoraConfig {
    /// The run report's words for it.
    pub fn describe(&self) -> String {
        format!(
            "LoRA: {} adapters · max_loras {} · max_cpu_loras {} · max_lora_rank {}",
            self.adapters, self.max_loras, self.max_cpu_loras, self.max_lora_rank
        )
    }
}

/// The LoRA configuration from the flags, refusing what vLLM refuses and what is not modelled;
/// `None` without `--enable-lora`.
pub fn resolve(o: &LoraOptions, m: &LoraMachine) -> Result<Option<LoraConfig>> {
    if !o.enable {
        return match o.given() {
            Some(flag) => Err(Error::invalid(flag, "a LoRA flag: it means nothing without --enable-lora")),
            None => Ok(None),
        };
    }
    let flag = "--enable-lora";
    if m.engine != EngineKind::Vllm || m.version != EngineVersion::Vllm033 {
        return Err(Error::invalid(
            flag,
            format!("LoRA serving is modelled for vLLM 0.33 (--engine-version vllm@0.33), not for {}", m.version),
        ));
    }
    let max_loras = o.max_loras.unwrap_or(1);
    if max_loras == 0 {
        // pydantic's `Field(ge=1)`.
        return Err(Error::invalid("--max-loras", "Input should be greater than or equal to 1 (vLLM's check)"));
    }
    let max_cpu_loras = o.max_cpu_loras.unwrap_or(max_loras);
    if max_cpu_loras < max_loras {
        return Err(Error::invalid(
            "--max-cpu-loras",
            format!("max_cpu_loras ({max_cpu_loras}) must be >= max_loras ({max_loras}). (vLLM's check)"),
        ));
    }
    let max_lora_rank = o.max_lora_rank.unwrap_or(DEFAULT_MAX_LORA_RANK);
    if !MAX_LORA_RANKS.contains(&max_lora_rank) {
        return Err(Error::invalid(
            "--max-lora-rank",
            format!("invalid choice: {max_lora_rank} (choose from {MAX_LORA_RANKS:?}, vLLM's MaxLoRARanks)"),
        ));
    }
    let load_gbps = o.load_gbps.unwrap_or(DEFAULT_LOAD_GBPS);
    if !(load_gbps.is_finite() && load_gbps > 0.0 && load_gbps <= 1e4) {
        return Err(Error::invalid("--lora-load-gbps", format!("{load_gbps} is not a read rate in GB/s")));
    }
    check_modules(&o.modules)?;
    let Some(shape) = LoraShape::of(m.model, m.tp) else {
        return Err(Error::invalid(
            flag,
            format!("LoRA with {}'s experts or MLA projections is not modelled (dense models are)", m.model.name),
        ));
    };
    for (on, what) in [
        (m.pp > 1, "pipeline parallelism (--pp)"),
        (m.offloading, "CPU KV offloading (--kv-offloading-size)"),
        (m.disaggregated, "prefill/decode disaggregation"),
    ] {
        if on {
            return Err(Error::invalid(flag, format!("LoRA with {what} is not modelled")));
        }
    }
    let shard = shape.elems_per_rank_unit * max_lora_rank as u64 * crate::cost::lora::LORA_DTYPE_BYTES;
    Ok(Some(LoraConfig {
        adapters: o.modules.len() as u16,
        max_loras,
        max_cpu_loras,
        max_lora_rank,
        read_s: shape.adapter_bytes(max_lora_rank) as f64 / (load_gbps * 1e9),
        copy_s: shard as f64 / (m.pcie_gbps / 2.0 * HOST_LINK_EFFICIENCY * 1e9),
        slot_bytes_per_rank: shape.slot_bytes(max_lora_rank) * max_loras as u64,
        kernels: LoraKernels { shape, max_lora_rank },
    }))
}

/// `--lora-modules`: at least one name, each once, as a served model name can be written.
pub fn check_modules(modules: &[String]) -> Result<()> {
    let flag = "--lora-modules";
    if modules.len() > MAX_ADAPTERS {
        return Err(Error::invalid(flag, format!("{} adapters: at most {MAX_ADAPTERS}", modules.len())));
    }
    for (i, name) in modules.iter().enumerate() {
        if name.is_empty() || name.contains('=') || name.chars().any(char::is_whitespace) {
            return Err(Error::invalid(
                flag,
                format!(
                    "`{name}` is not an adapter name (a served model name; cachesim loads no file, so give no =PATH)"
                ),
            ));
        }
        if modules[..i].contains(name) {
            // `OpenAIServingModels._check_load_lora_adapter_request`.
            return Err(Error::invalid(
                flag,
                format!("The lora adapter '{name}' has already been loaded. (vLLM's error)"),
            ));
        }
    }
    Ok(())
}

/// Adapter loads over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LoraStats {
    /// Adapters read from storage into host memory while serving.
    pub reads: u64,
    /// Adapters copied from host memory into a GPU slot while serving.
    pub copies: u64,
    /// Seconds steps waited for them.
    pub load_s: f64,
}

impl LoraStats {
    /// Adds another instance's loads.
    pub fn add(&mut self, o: &LoraStats) {
        self.reads += o.reads;
        self.copies += o.copies;
        self.load_s += o.load_s;
    }
}

/// The worker's two least-recently-used caches of adapters: host memory (`max_cpu_loras`) and
/// the GPU slots (`max_loras`), each oldest first.
#[derive(Debug, Clone)]
pub struct Resident {
    cfg: LoraConfig,
    host: Vec<u16>,
    gpu: Vec<u16>,
    stats: LoraStats,
}

impl Resident {
    /// The caches after start-up: every registered adapter loaded in order.
    pub fn new(cfg: LoraConfig) -> Self {
        let mut r = Self { cfg, host: Vec::new(), gpu: Vec::new(), stats: LoraStats::default() };
        for id in 1..=cfg.adapters {
            r.add(id);
        }
        r.stats = LoraStats::default();
        r
    }

    /// Makes `ids` (a batch's adapters, distinct, in batch order) resident; returns the seconds
    /// their loads take.
    pub fn apply(&mut self, ids: &[u16]) -> f64 {
        debug_assert!(ids.len() <= self.cfg.max_loras as usize, "the batch rule keeps a batch within max_loras");
        let before = self.stats.load_s;
        for &id in ids {
            self.add(id);
        }
        self.stats.load_s - before
    }

    /// `LRUCacheWorkerLoRAManager.add_adapter`: read into host memory when absent there
    /// (evicting the oldest, with its slot), then `activate_adapter`.
    fn add(&mut self, id: u16) {
        match self.host.iter().position(|&h| h == id) {
            Some(i) => {
                self.host.remove(i);
            }
            None => {
                self.stats.reads += 1;
                self.stats.load_s += self.cfg.read_s;
                if self.host.len() + 1 > self.cfg.max_cpu_loras as usize {
                    let old = self.host.remove(0);
                    self.gpu.retain(|&g| g != old);
                }
            }
        }
        self.host.push(id);
        match self.gpu.iter().position(|&g| g == id) {
            Some(i) => {
                self.gpu.remove(i);
            }
            None => {
                if self.gpu.len() >= self.cfg.max_loras as usize {
                    self.gpu.remove(0);
                }
                self.stats.copies += 1;
                self.stats.load_s += self.cfg.copy_s;
            }
        }
        self.gpu.push(id);
    }

    /// The loads so far.
    pub fn stats(&self) -> LoraStats {
        self.stats
    }
}

/// The scheduler's record of the adapters running requests hold (`scheduled_loras`).
#[derive(Debug, Default)]
pub struct Scheduled {
    ids: Vec<u16>,
}

impl Scheduled {
    /// Starts the step's record from the running requests' adapters.
    pub fn reset(&mut self, running: impl Iterator<Item = u16>) {
        self.ids.clear();
        for id in running.filter(|&id| id != 0) {
            if !self.ids.contains(&id) {
                self.ids.push(id);
            }
        }
    }

    /// Whether a waiting request of adapter `id` must be passed by: it names one not recorded
    /// while `max_loras` are.
    pub fn blocks(&self, id: u16, max_loras: u32) -> bool {
        id != 0 && self.ids.len() >= max_loras as usize && !self.ids.contains(&id)
    }

    /// An admitted request's adapter joins the record.
    pub fn admit(&mut self, id: u16) {
        if id != 0 && !self.ids.contains(&id) {
            self.ids.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::model;

    fn options(modules: &[&str]) -> LoraOptions {
        LoraOptions { enable: true, modules: modules.iter().map(|s| s.to_string()).collect(), ..LoraOptions::default() }
    }

    fn machine(m: &Model) -> LoraMachine<'_> {
        LoraMachine {
            engine: EngineKind::Vllm,
            version: EngineVersion::Vllm033,
            model: m,
            tp: 1,
            pp: 1,
            offloading: false,
            disaggregated: false,
            pcie_gbps: 128.0,
        }
    }

    #[test]
    fn refusals_follow_vllm() {
        let m = model("llama-3.1-8b", None).unwrap();
        let err = |o: LoraOptions| resolve(&o, &machine(&m)).unwrap_err().to_string();
        assert!(
            err(LoraOptions { enable: false, max_loras: Some(2), ..LoraOptions::default() }).contains("--enable-lora")
        );
        assert!(err(LoraOptions { max_loras: Some(0), ..options(&["a"]) }).contains("greater than or equal to 1"));
        assert!(err(LoraOptions { max_loras: Some(4), max_cpu_loras: Some(2), ..options(&["a"]) })
            .contains("max_cpu_loras (2) must be >= max_loras (4)"));
        assert!(err(LoraOptions { max_lora_rank: Some(12), ..options(&["a"]) }).contains("invalid choice: 12"));
        assert!(err(options(&["a", "b", "a"])).contains("'a' has already been loaded"));
        assert!(err(options(&["a=/x"])).contains("no =PATH"));
        let moe = model("qwen3-30b-a3b", None).unwrap();
        assert!(resolve(&options(&["a"]), &machine(&moe)).unwrap_err().to_string().contains("not modelled"));
        let old = LoraMachine { version: EngineVersion::Vllm018, ..machine(&m) };
        assert!(resolve(&options(&["a"]), &old).unwrap_err().to_string().contains("vllm@0.33"));
        assert_eq!(resolve(&LoraOptions::default(), &machine(&m)).unwrap(), None);
    }

    #[test]
    fn defaults_and_load_times_by_hand() {
        let m = model("llama-3.1-8b", None).unwrap();
        let c = resolve(&options(&["a", "b"]), &machine(&m)).unwrap().unwrap();
        assert_eq!((c.adapters, c.max_loras, c.max_cpu_loras, c.max_lora_rank), (2, 1, 1, 16));
        // 2,886,144 elements per rank unit × 16 × 2 bytes = 92.4 MB: 46.2 ms at 2 GB/s, 1.66 ms
        // over a 64 GB/s link at 87 %.
        let bytes = 2_886_144.0 * 16.0 * 2.0;
        assert!((c.read_s - bytes / 2e9).abs() < 1e-12 && (c.copy_s - bytes / (64e9 * 0.87)).abs() < 1e-12);
        assert_eq!(c.slot_bytes_per_rank, 2_886_144 * 16 * 2);
    }

    /// Two GPU slots and three host places, adapters 1–4 registered: start-up leaves 2, 3, 4 in
    /// host memory and 3, 4 in the slots (the last ones loaded).
    #[test]
    fn the_caches_are_least_recently_used() {
        let m = model("llama-3.1-8b", None).unwrap();
        let o = LoraOptions { max_loras: Some(2), max_cpu_loras: Some(3), ..options(&["a", "b", "c", "d"]) };
        let c = resolve(&o, &machine(&m)).unwrap().unwrap();
        let mut r = Resident::new(c);
        assert_eq!((r.host.clone(), r.gpu.clone()), (vec![2, 3, 4], vec![3, 4]));
        assert_eq!(r.apply(&[4]), 0.0, "resident: no load");
        // 2 is in host memory: one copy, evicting slot 3 (the older).
        assert!((r.apply(&[2]) - c.copy_s).abs() < 1e-15);
        assert_eq!(r.gpu, vec![4, 2]);
        // 1 is read (evicting 3 from host memory) and copied (evicting 4's slot).
        assert!((r.apply(&[1]) - (c.read_s + c.copy_s)).abs() < 1e-15);
        assert_eq!((r.host.clone(), r.gpu.clone()), (vec![4, 2, 1], vec![2, 1]));
        let s = r.stats();
        assert_eq!((s.reads, s.copies), (1, 2));
        assert!((s.load_s - (c.read_s + 2.0 * c.copy_s)).abs() < 1e-15);
    }

    #[test]
    fn the_batch_rule_passes_by_a_new_adapter_once_max_loras_run() {
        let mut s = Scheduled::default();
        s.reset([0, 3, 3, 0].into_iter());
        assert!(!s.blocks(3, 1) && !s.blocks(0, 1), "its own adapter and the base model pass");
        assert!(s.blocks(5, 1));
        assert!(!s.blocks(5, 2));
        s.admit(5);
        assert!(s.blocks(6, 2));
    }
}
