//! vLLM's native CPU KV offloading (`--kv-offloading-size`, the `OffloadingConnector` with its
//! CPU backend) as vLLM 0.33 runs it (docs/engines/kv-offloading.md names each rule's upstream
//! file and function): its configuration ([`OffloadConfig`], from the flags by [`resolve`]) and
//! the connector's scheduler side ([`Connector`]), which the v1 scheduler consults
//! (`vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`, 0.33; the connector's scheduler half
//! in `distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`):
//! - **lookup**: a waiting request with nothing computed looks past its GPU prefix-cache hit `g`
//!   for consecutive chunks in the host tier, starting at the chunk holding token `g`, up to the
//!   last full chunk of its known tokens (no "last token recomputed" cap); a hit shorter than a
//!   chunk is none. A chunk still being stored among them (`HIT_PENDING`), or one being loaded
//!   by another request, defers the request to the next step, the queue passing it by;
//! - **load**: the request is allocated blocks for `g` + the hit, unregistered, takes no token
//!   budget and no running slot, and waits (`WAITING_FOR_REMOTE_KVS`) among the requests holding
//!   KV blocks (`kv_holding_waiting`, served before the waiting queue) while the chunks are
//!   copied to the GPU; the copy is submitted after the step's forward is launched and waits for
//!   it (0.29 on), so it is seen at the first poll after it ends — the poll ending a step, or at
//!   once when the engine has nothing to run, as it then steps empty, polling; seen, the
//!   request's blocks are registered and it is scheduled from `g` + hit computed (one token less
//!   when that is every known token);
//! - **stores**: each scheduled request's full prompt chunks after the step (prompt only:
//!   `offload_prompt_only`, 0.23 on), from where it last stored (0 after a lookup without load),
//!   less the chunks the tier holds, are stored whole or not at all; the worker submits them when
//!   the next step starts, so they are readable once seen at a poll after that step; a request
//!   preempted while its stores run makes its step wait for them (a flush); a finished request's
//!   remaining prompt chunks are offered at the next step, then the chunks it accessed are
//!   re-ranked ([`tier`]);
//! - **copies**: one first-in-first-out queue per direction; a chunk is the GPU block of every
//!   rank, each rank over its own host link, `chunk bytes / link bandwidth` per chunk.
//!
//! Checked step for step against vLLM 0.33's own scheduler and connector
//! (`tests/golden/vllm_offload`). Not modelled: the flush of a store whose freed blocks are
//! reallocated before it ends (stores are of prompt chunks and end milliseconds after their
//! prefill step, so only a request finishing within that window would wait),
//! the extra step async scheduling adds between a poll and the scheduler seeing it, synchronous
//! loads (`sync_load_budget_bytes`, off by default), chunks larger than a GPU block
//! (`block_size` in the connector's extra config) and the ARC policy.

pub mod lmcache;
pub mod tier;

use crate::cache::{PrefixCache, ReqId};
use crate::engine::ReqRt;
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::VecDeque;
use tier::{Found, HostTier};

/// `--kv-offloading-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OffloadBackend {
    /// vLLM's own CPU offloading (`OffloadingConnector`, the default since 0.14).
    #[default]
    Native,
    /// The LMCache connector with its local CPU backend, as vLLM up to 0.22 starts it
    /// ([`lmcache`]).
    Lmcache,
}

/// The host tier of one instance, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OffloadConfig {
    /// Which connector keeps the tier.
    pub backend: OffloadBackend,
    /// `--kv-offloading-size`: GiB of host memory over all the instance's ranks.
    pub size_gib: f64,
    /// Chunks the tier holds (each rank the same number).
    pub chunks: u64,
    /// Tokens per chunk (the GPU block natively; 256 under LMCache).
    pub chunk_tokens: u32,
    /// Tokens per GPU block (the run's `--block-size`, echoed elsewhere).
    #[serde(skip)]
    pub block_tokens: u32,
    /// One chunk's bytes on one rank (its GPU block's KV on that rank).
    pub chunk_bytes_per_rank: u64,
    /// Each direction of one rank's host link, bytes per second.
    pub link_bytes_per_s: f64,
    /// LMCache's local disk backend, if on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskConfig>,
    /// LMCache's remote server, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<lmcache::remote::RemoteConfig>,
}

/// LMCache's local disk backend, resolved (`--lmcache-max-local-disk-size`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DiskConfig {
    /// GiB of disk for each rank (LMCache's `max_local_disk_size`, read by every worker).
    pub size_gib: f64,
    /// Chunks it holds (each rank the same number).
    pub chunks: u64,
    /// One rank's disk reads and writes, bytes per second.
    pub bytes_per_s: f64,
}

/// The rate of a local disk when none is given: a local NVMe drive, as for SGLang's file
/// storage backend (an assumption).
pub const DEFAULT_DISK_GBPS: f64 = 5.0;

impl OffloadConfig {
    /// Seconds to copy `chunks` chunks one way.
    pub fn copy_s(&self, chunks: usize) -> f64 {
        chunks as f64 * self.chunk_bytes_per_rank as f64 / self.link_bytes_per_s
    }

    /// The run report's words for the tier.
    pub fn describe(&self) -> String {
        let what = match self.backend {
            OffloadBackend::Native => "CPU offloading",
            OffloadBackend::Lmcache => "LMCache CPU backend",
        };
        let disk = self.disk.map_or(String::new(), |d| {
            format!(
                " · LMCache local disk {} GiB a GPU ({} chunks, {:.1} GB/s)",
                d.size_gib,
                d.chunks,
                d.bytes_per_s / 1e9
            )
        });
        let remote = self.remote.map_or(String::new(), |r| {
            format!(
                " · LMCache remote lm:// server ({:.0} µs a round trip, {:.1} GB/s a GPU)",
                r.rtt_s * 1e6,
                r.bytes_per_s / 1e9
            )
        });
        format!(
            "{what} {} GiB ({} chunks of {} tokens, host link {:.1} GB/s each way){disk}{remote}",
            self.size_gib,
            self.chunks,
            self.chunk_tokens,
            self.link_bytes_per_s / 1e9
        )
    }
}

/// The offloading flags as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OffloadOptions {
    /// `--kv-offloading-size` (GiB); `None`: off.
    pub size_gib: Option<f64>,
    /// `--kv-offloading-backend`; `None`: native.
    pub backend: Option<OffloadBackend>,
    /// `--host-link-gbps`: GB/s each way between one GPU and host memory; `None`: the GPU's
    /// PCIe rate per direction × [`HOST_LINK_EFFICIENCY`].
    pub host_link_gbps: Option<f64>,
    /// `--lmcache-chunk-size` (tokens); `None`: [`lmcache::CHUNK_TOKENS`].
    pub lmcache_chunk_size: Option<u32>,
    /// `--lmcache-max-local-disk-size` (GiB a rank); `None`: no disk backend.
    pub lmcache_disk_gib: Option<f64>,
    /// `--lmcache-disk-gbps`; `None`: [`DEFAULT_DISK_GBPS`].
    pub lmcache_disk_gbps: Option<f64>,
    /// `--lmcache-remote-url` (`lm://HOST:PORT`); `None`: no remote backend.
    pub lmcache_remote_url: Option<String>,
    /// `--lmcache-remote-rtt-us`; `None`: [`lmcache::remote::DEFAULT_RTT_US`].
    pub lmcache_remote_rtt_us: Option<f64>,
    /// `--lmcache-remote-gbps`; `None`: [`lmcache::remote::DEFAULT_GBPS`].
    pub lmcache_remote_gbps: Option<f64>,
}

/// The share of a PCIe link's per-direction rate a pinned copy-engine copy achieves: NVIDIA's
/// NVbandwidth `host_to_device_memcpy_ce` shows 55.6 GB/s over a PCIe Gen5 x16 link's 64 GB/s
/// (the example output of its documentation). A prior, not a measurement of any one machine:
/// `--host-link-gbps` replaces it.
pub const HOST_LINK_EFFICIENCY: f64 = 0.87;

/// More host memory than any server holds: larger sizes are refused as not physical.
const MAX_SIZE_GIB: f64 = 65_536.0;

/// The page host memory is mapped in: vLLM 0.23 on rounds a chunk's bytes up to it
/// (`mmap.PAGESIZE`).
const PAGE_BYTES: u64 = 4096;

/// Each direction of one rank's host link, bytes per second: `--host-link-gbps` as given, else
/// the GPU's PCIe rate per direction (`pcie_gbps` bidirectional, as datasheets state it) ×
/// [`HOST_LINK_EFFICIENCY`]. Prices any host tier's copies (vLLM's offloading, SGLang's HiCache).
pub fn host_link_bytes_per_s(given_gbps: Option<f64>, pcie_gbps: f64) -> Result<f64> {
    match given_gbps {
        None => Ok(pcie_gbps / 2.0 * HOST_LINK_EFFICIENCY * 1e9),
        Some(g) if g.is_finite() && g > 0.0 && g <= 10_000.0 => Ok(g * 1e9),
        Some(g) => Err(Error::invalid(
            "--host-link-gbps",
            format!("{g} must be a bandwidth in GB/s above 0 and at most 10000"),
        )),
    }
}

/// What the tier's sizing reads from the resolved deployment.
#[derive(Debug, Clone, Copy)]
pub struct TierMachine {
    pub engine: crate::engine::EngineKind,
    pub version: crate::engine::EngineVersion,
    pub paged: bool,
    pub block_size: u32,
    pub kv_bytes_per_token_per_rank: u64,
    /// Ranks that each hold a copy of the tier's chunks' share: TP × PP, or PP alone for MLA
    /// (one latent copy over TP, counted once since vLLM 0.27).
    pub ranks: u64,
    /// TP × PP: LMCache's size is split over every rank, MLA or not.
    pub world: u64,
    pub pp: u64,
    pub disaggregated: bool,
    /// The GPU's PCIe rate, bidirectional GB/s as datasheets state it.
    pub pcie_gbps: f64,
}

/// The tier `o` asks for on `m`, or `None`; refuses what vLLM 0.33 refuses and what cachesim
/// does not model, saying which.
pub fn resolve(o: &OffloadOptions, m: &TierMachine) -> Result<Option<OffloadConfig>> {
    if o.backend != Some(OffloadBackend::Lmcache) {
        for (given, flag) in [
            (o.lmcache_chunk_size.is_some(), "--lmcache-chunk-size"),
            (o.lmcache_disk_gib.is_some(), "--lmcache-max-local-disk-size"),
            (o.lmcache_disk_gbps.is_some(), "--lmcache-disk-gbps"),
            (o.lmcache_remote_url.is_some(), "--lmcache-remote-url"),
            (o.lmcache_remote_rtt_us.is_some(), "--lmcache-remote-rtt-us"),
            (o.lmcache_remote_gbps.is_some(), "--lmcache-remote-gbps"),
        ] {
            if given {
                return Err(Error::invalid(flag, "an LMCache setting: give --kv-offloading-backend lmcache too"));
            }
        }
    }
    if o.lmcache_disk_gbps.is_some() && o.lmcache_disk_gib.is_none() {
        return Err(Error::invalid(
            "--lmcache-disk-gbps",
            "prices LMCache's local disk: give --lmcache-max-local-disk-size too",
        ));
    }
    let remote =
        lmcache::remote::resolve(o.lmcache_remote_url.as_deref(), o.lmcache_remote_rtt_us, o.lmcache_remote_gbps)?;
    let Some(size) = o.size_gib else {
        if o.backend.is_some() {
            return Err(Error::invalid(
                "--kv-offloading-backend",
                "turns nothing on without --kv-offloading-size (the host memory for the tier)",
            ));
        }
        if o.host_link_gbps.is_some() {
            return Err(Error::invalid(
                "--host-link-gbps",
                "prices a host KV tier's copies: give --kv-offloading-size (vLLM) or --enable-hierarchical-cache (SGLang) too",
            ));
        }
        return Ok(None);
    };
    let flag = "--kv-offloading-size";
    if !(size.is_finite() && size >= 0.0) {
        return Err(Error::invalid(flag, format!("{size} is not a size in GiB")));
    }
    if size == 0.0 {
        // `CPUOffloadingSpec.__init__` reads 0 bytes as unset.
        return Err(Error::invalid(
            flag,
            "0 GiB: vLLM refuses it (cpu_bytes_to_use must be specified in kv_connector_extra_config)",
        ));
    }
    if size > MAX_SIZE_GIB {
        return Err(Error::invalid(flag, format!("{size} GiB is more host memory than any server holds")));
    }
    if m.engine != crate::engine::EngineKind::Vllm {
        return Err(Error::invalid(flag, format!("a vLLM v1 flag: not a flag of --engine {}", m.engine.name())));
    }
    let backend = o.backend.unwrap_or_default();
    match (backend, m.version) {
        (OffloadBackend::Native, crate::engine::EngineVersion::Vllm033) => {}
        (OffloadBackend::Native, v) => {
            return Err(Error::invalid(
                flag,
                format!(
                    "not modelled for {v}: before vLLM 0.21 a request's stores complete only when it finishes and \
                     its GPU blocks are held until then; cachesim models vLLM 0.33's offloading (--engine-version vllm@0.33)"
                ),
            ))
        }
        (OffloadBackend::Lmcache, crate::engine::EngineVersion::Vllm018) => {}
        (OffloadBackend::Lmcache, v) => {
            return Err(Error::invalid(
                "--kv-offloading-backend",
                format!(
                    "lmcache is not modelled for {v}: from vLLM 0.23 the flag starts LMCacheMPConnector, which talks to a \
                     separate LMCache server whose size --kv-offloading-size does not set; --engine-version vllm@0.18 \
                     models LMCache inside the engine, as vLLM up to 0.22 starts it"
                ),
            ))
        }
    }
    if !m.paged {
        return Err(Error::invalid(
            flag,
            "needs vLLM's prefix caching (the paged cache): loads without it are not modelled",
        ));
    }
    if m.pp > 1 {
        return Err(Error::invalid(flag, "not modelled with pipeline parallelism (--pp)"));
    }
    if m.disaggregated {
        return Err(Error::invalid(
            flag,
            "not modelled in a prefill/decode deployment (the PD link is its own KV connector)",
        ));
    }
    let link_bytes_per_s = host_link_bytes_per_s(o.host_link_gbps, m.pcie_gbps)?;
    let bytes = size * (1u64 << 30) as f64;
    let (chunk_tokens, chunk_bytes, per_chunk) = match backend {
        OffloadBackend::Native => {
            let chunk_bytes = m.kv_bytes_per_token_per_rank * m.block_size as u64;
            (m.block_size, chunk_bytes, chunk_bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES * m.ranks.max(1))
        }
        OffloadBackend::Lmcache => {
            let chunk = o.lmcache_chunk_size.unwrap_or(lmcache::CHUNK_TOKENS);
            if chunk == 0 || chunk > 1 << 20 || !chunk.is_multiple_of(m.block_size) {
                return Err(Error::invalid(
                    "--lmcache-chunk-size",
                    format!(
                        "{chunk}: cachesim keys an LMCache chunk by its last GPU block, so it must be a whole number \
                         of {}-token blocks (--block-size), at most 1048576 tokens",
                        m.block_size
                    ),
                ));
            }
            // `lmcache.max_local_cpu_size` = the size over TP × PP ranks, each rank's chunk
            // rounded up to the allocator's alignment.
            let chunk_bytes = m.kv_bytes_per_token_per_rank * chunk as u64;
            (chunk, chunk_bytes, chunk_bytes.div_ceil(lmcache::ALIGN_BYTES) * lmcache::ALIGN_BYTES * m.world.max(1))
        }
    };
    let chunks = (bytes / per_chunk as f64).floor() as u64;
    if chunks == 0 {
        return Err(Error::invalid(
            flag,
            format!("{size} GiB hold no chunk: one is {per_chunk} bytes over the instance's GPUs"),
        ));
    }
    let disk = match o.lmcache_disk_gib {
        None => None,
        Some(gib) => {
            let flag = "--lmcache-max-local-disk-size";
            if !(gib.is_finite() && gib > 0.0 && gib <= MAX_SIZE_GIB) {
                return Err(Error::invalid(
                    flag,
                    format!(
                        "{gib} must be a size in GiB above 0 (0 starts no disk backend) and at most {MAX_SIZE_GIB}"
                    ),
                ));
            }
            let gbps = o.lmcache_disk_gbps.unwrap_or(DEFAULT_DISK_GBPS);
            if !(gbps.is_finite() && gbps > 0.0 && gbps <= 10_000.0) {
                return Err(Error::invalid(
                    "--lmcache-disk-gbps",
                    format!("{gbps} must be a rate above 0 and at most 10000 GB/s"),
                ));
            }
            // Every worker reads the setting whole; its chunks are the CPU allocator's size.
            let aligned = chunk_bytes.div_ceil(lmcache::ALIGN_BYTES) * lmcache::ALIGN_BYTES;
            let chunks = (gib * (1u64 << 30) as f64 / aligned as f64).floor() as u64;
            if chunks == 0 {
                return Err(Error::invalid(flag, format!("{gib} GiB hold no chunk: one is {aligned} bytes a GPU")));
            }
            Some(DiskConfig { size_gib: gib, chunks: chunks.min(u32::MAX as u64), bytes_per_s: gbps * 1e9 })
        }
    };
    Ok(Some(OffloadConfig {
        backend,
        size_gib: size,
        chunks: chunks.min(u32::MAX as u64),
        chunk_tokens,
        block_tokens: m.block_size,
        chunk_bytes_per_rank: chunk_bytes,
        link_bytes_per_s,
        disk,
        remote,
    }))
}

/// The host tier's figures over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OffloadStats {
    /// Prompt tokens loaded from the host tier (beyond the GPU's hits).
    pub host_hit_tokens: u64,
    /// Loads (one per request admitted with a host hit) and the chunks they copied.
    pub loads: u64,
    pub loaded_chunks: u64,
    /// Lookups that deferred a request (a chunk still being stored, or being loaded by another).
    pub deferred_lookups: u64,
    /// Stores a preemption made a step wait for.
    pub flushes: u64,
    /// Seconds the host link spent copying, each way.
    pub load_s: f64,
    pub store_s: f64,
    /// The tier's own counters.
    pub tier: tier::TierStats,
    /// LMCache's local disk backend, if on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<lmcache::DiskStats>,
    /// LMCache's remote server, if on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<lmcache::remote::RemoteStats>,
}

impl OffloadStats {
    /// Adds another instance's figures (the peak is the largest instance's).
    pub fn merge(&mut self, o: &OffloadStats) {
        self.host_hit_tokens += o.host_hit_tokens;
        self.loads += o.loads;
        self.loaded_chunks += o.loaded_chunks;
        self.deferred_lookups += o.deferred_lookups;
        self.flushes += o.flushes;
        self.load_s += o.load_s;
        self.store_s += o.store_s;
        self.tier.stored_chunks += o.tier.stored_chunks;
        self.tier.refused_stores += o.tier.refused_stores;
        self.tier.evicted_chunks += o.tier.evicted_chunks;
        self.tier.peak_chunks = self.tier.peak_chunks.max(o.tier.peak_chunks);
        match (&mut self.disk, &o.disk) {
            (Some(a), Some(b)) => a.merge(b),
            (None, Some(b)) => self.disk = Some(*b),
            _ => {}
        }
        match (&mut self.remote, &o.remote) {
            (Some(a), Some(b)) => a.merge(b),
            (None, Some(b)) => self.remote = Some(*b),
            _ => {}
        }
    }
}

/// A copy in one direction.
#[derive(Debug)]
struct Job {
    /// The request it loads for (loads) or stores from (stores).
    req: ReqId,
    keys: Vec<u32>,
    /// When the copy ends (`NaN` until its step is priced and it starts).
    done: f64,
    /// Steps with a forward formed before the one that submitted it, and whether that one had a
    /// forward.
    formed_at: u64,
    own_forward: bool,
    /// A store: its request's preemptions when it was submitted (a preemption since flushes it).
    preemptions: u32,
}

/// Where a request's load stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Load {
    #[default]
    None,
    /// Copying (or copied and not yet seen at a poll).
    InFlight,
    /// Seen: the request may be scheduled from its loaded tokens.
    Landed,
}

/// A request's connector state (`RequestOffloadState`, and the CPU manager's
/// `_RequestCacheAccess`).
#[derive(Debug, Clone, Default)]
struct ReqState {
    /// Chunks below this are not offered for storing again.
    next_stored: u32,
    /// Its rank in the tier's LRU (0: none yet).
    rank: u64,
    load: Load,
    /// The GPU hit and the host hit of its load.
    gpu_hit: u32,
    host_hit: u32,
    /// The chunks it accessed (stored, offered while held and ready, or loaded), by position
    /// (`UNSEEN` where not): re-ranked when it finishes.
    seen: Vec<u32>,
    /// Its last offer could not be stored: it offers those chunks again at its next step.
    refused: bool,
}

/// No chunk accessed at this position.
const UNSEEN: u32 = u32::MAX;

/// What a lookup decided for a waiting request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Skip it this step (`get_num_new_matched_tokens` returned `None`).
    Defer,
    /// Load this many tokens past the GPU hit (0: none; schedule it as usual).
    Load(usize),
}

/// What a waiting request's load state lets the scheduler do with it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// No load: look it up as usual.
    Fresh,
    /// Its load is still in flight: pass it by.
    Loading,
    /// Its load landed: schedule it from its loaded tokens.
    Landed,
}

/// The connector's scheduler side for one instance.
#[derive(Debug)]
pub struct Connector {
    cfg: OffloadConfig,
    tier: HostTier,
    reqs: Vec<ReqState>,
    loads: VecDeque<Job>,
    stores: VecDeque<Job>,
    /// When each direction's queue is next free.
    load_free: f64,
    store_free: f64,
    /// Steps with a forward formed so far, and whether the last step formed had none (the engine
    /// then steps empty, polling as copies end).
    formed: u64,
    last_empty: bool,
    /// Jobs submitted in the step being formed (they start when it is priced).
    unstarted: usize,
    /// Requests finished since the last step was formed.
    finished: Vec<ReqId>,
    /// Requests whose last offer was refused (they offer again when next scheduled).
    refused: u32,
    /// Buffers: an offer's chunk keys, those of them held and ready, those to store and those
    /// accessed (key, position), and the chunks an access reaches first.
    keys: Vec<u32>,
    ready: Vec<u32>,
    new: Vec<(u32, u32)>,
    accessed: Vec<(u32, u32)>,
    first_access: Vec<(u32, u32)>,
    pub stats: OffloadStats,
}

impl Connector {
    /// An empty tier under `cfg`.
    pub fn new(cfg: OffloadConfig) -> Self {
        Self {
            cfg,
            tier: HostTier::new(cfg.chunks as usize),
            reqs: Vec::new(),
            loads: VecDeque::new(),
            stores: VecDeque::new(),
            load_free: 0.0,
            store_free: 0.0,
            formed: 0,
            last_empty: true,
            unstarted: 0,
            finished: Vec::new(),
            refused: 0,
            keys: Vec::new(),
            ready: Vec::new(),
            new: Vec::new(),
            accessed: Vec::new(),
            first_access: Vec::new(),
            stats: OffloadStats::default(),
        }
    }

    fn req(&mut self, id: ReqId) -> &mut ReqState {
        let i = id as usize;
        if self.reqs.len() <= i {
            self.reqs.resize(i + 1, ReqState::default());
        }
        &mut self.reqs[i]
    }

    /// Whether a store that ended at `done`, submitted by a step formed after `formed_at` others
    /// (with a forward: `own_forward`), is seen at a poll by `now`: the poll ending the step
    /// after its own (the worker submits a step's stores when the next step starts), or any time
    /// while the engine steps empty. A load is seen at the first poll after it ends, the one
    /// ending its own step included.
    fn seen(&self, j: &Job, now: f64) -> bool {
        j.done <= now && (self.last_empty || self.formed > j.formed_at + j.own_forward as u64)
    }

    /// The step being formed at `now` begins: the copies seen by now complete (`update_from_output`
    /// then `_update_from_kv_xfer_finished`): stores become readable, loads landed.
    pub fn begin(&mut self, now: f64) {
        while self.stores.front().is_some_and(|j| self.seen(j, now)) {
            let j = self.stores.pop_front().expect("checked");
            self.tier.stored(&j.keys);
        }
        while self.loads.front().is_some_and(|j| j.done <= now) {
            let j = self.loads.pop_front().expect("checked");
            // Its chunks stay pinned until the scheduler reaches the request ([`Self::land`]).
            self.req(j.req).load = Load::Landed;
        }
    }

    /// Where waiting request `id`'s load stands.
    pub fn waiting(&self, id: ReqId) -> Waiting {
        match self.reqs.get(id as usize).map_or(Load::None, |r| r.load) {
            Load::None => Waiting::Fresh,
            Load::InFlight => Waiting::Loading,
            Load::Landed => Waiting::Landed,
        }
    }

    /// The chunk keys `from..to` of request `r`.
    fn chunk_keys(cache: &dyn PrefixCache, r: &ReqRt, from: usize, to: usize, out: &mut Vec<u32>) {
        out.clear();
        let keyed = cache.visit_block_keys(r.seq, from, to, &mut |k| {
            out.push(k);
            true
        });
        debug_assert!(keyed, "the paged cache keys its blocks");
    }

    /// Looks waiting request `id` (nothing computed, GPU hit `gpu_hit` tokens) up in the host
    /// tier (`OffloadingConnectorScheduler.get_num_new_matched_tokens`).
    pub fn lookup(&mut self, id: ReqId, r: &ReqRt, gpu_hit: usize, cache: &dyn PrefixCache) -> Lookup {
        let chunk = self.cfg.chunk_tokens as usize;
        // A lookup without a load stores from the first chunk again (dedup keeps what is held).
        self.req(id).next_stored = 0;
        let last = r.num_tokens as usize / chunk;
        let first = gpu_hit / chunk;
        if last * chunk < gpu_hit + chunk {
            return Lookup::Load(0);
        }
        // The leading held chunks, stopping at the first the tier lacks.
        let found = self.tier.lookup(|visit| {
            cache.visit_block_keys(r.seq, first, last, visit);
        });
        let out = match found {
            Found::Pending | Found::Loading => Lookup::Defer,
            Found::Hits(h) => Lookup::Load(((first + h) * chunk).saturating_sub(gpu_hit)),
        };
        match out {
            Lookup::Load(ext) if ext < chunk => Lookup::Load(0),
            Lookup::Defer => {
                self.stats.deferred_lookups += 1;
                Lookup::Defer
            }
            other => other,
        }
    }

    /// Request `id` (GPU hit `gpu_hit`) was allocated blocks for `host_hit` tokens more: its load
    /// is submitted with this step (`update_state_after_alloc`).
    pub fn start_load(&mut self, id: ReqId, r: &ReqRt, gpu_hit: usize, host_hit: usize, cache: &dyn PrefixCache) {
        let chunk = self.cfg.chunk_tokens as usize;
        let (from, to) = (gpu_hit / chunk, (gpu_hit + host_hit).div_ceil(chunk));
        let mut keys = Vec::with_capacity(to - from);
        Self::chunk_keys(cache, r, from, to, &mut keys);
        self.tier.pin(&keys);
        self.access(id, keys.iter().copied().zip(from as u32..));
        let st = self.req(id);
        st.next_stored = to as u32;
        st.load = Load::InFlight;
        (st.gpu_hit, st.host_hit) = (gpu_hit as u32, host_hit as u32);
        let formed_at = self.formed;
        self.stats.loads += 1;
        self.stats.loaded_chunks += keys.len() as u64;
        self.loads.push_back(Job { req: id, keys, done: f64::NAN, formed_at, own_forward: false, preemptions: 0 });
        self.unstarted += 1;
    }

    /// Waiting request `id`'s load landed and the scheduler reached it: its loaded blocks are
    /// registered and its chunks unpinned; it continues from its loaded tokens, one less when
    /// they are all its known tokens (`_update_waiting_for_remote_kv`). Returns the tokens it
    /// holds computed and the prompt tokens counted cached (GPU and host hits).
    pub fn land(&mut self, id: ReqId, r: &ReqRt, cache: &mut dyn PrefixCache) -> (u32, u32) {
        let chunk = self.cfg.chunk_tokens as usize;
        let st = self.req(id).clone();
        debug_assert_eq!(st.load, Load::Landed);
        let hit = (st.gpu_hit + st.host_hit) as usize;
        let mut keys = std::mem::take(&mut self.keys);
        Self::chunk_keys(cache, r, st.gpu_hit as usize / chunk, hit.div_ceil(chunk), &mut keys);
        self.tier.unpin(&keys);
        self.keys = keys;
        let computed = if hit as u32 >= r.num_tokens { r.num_tokens - 1 } else { hit as u32 };
        cache.loaded(id, computed as usize);
        self.req(id).load = Load::None;
        self.stats.host_hit_tokens += st.host_hit as u64;
        (computed, hit as u32)
    }

    /// `build_connector_meta` at the end of forming a step: each scheduled request's new full
    /// prompt chunks are offered for storing, then each request finished since the last step
    /// offers its remaining prompt chunks and is re-ranked.
    /// Returns until when the step's forward waits: the end of the stores still running of
    /// the requests preempted in it (`jobs_to_flush`: the worker submits and waits for them
    /// before the forward), `None` when none.
    pub fn plan_stores(&mut self, items: &[(ReqId, u32)], reqs: &[ReqRt], cache: &dyn PrefixCache) -> Option<f64> {
        let mut flush: Option<f64> = None;
        for j in self.stores.iter_mut().filter(|j| !j.done.is_nan()) {
            if reqs[j.req as usize].preemptions > j.preemptions {
                j.preemptions = reqs[j.req as usize].preemptions;
                flush = Some(flush.map_or(j.done, |f| f.max(j.done)));
                self.stats.flushes += 1;
            }
        }
        for &(id, n) in items {
            let r = &reqs[id as usize];
            self.offer(id, r, (r.num_computed + n).min(r.prompt_len), cache);
        }
        for id in std::mem::take(&mut self.finished) {
            let r = &reqs[id as usize];
            self.offer(id, r, r.num_computed.min(r.prompt_len), cache);
            // The chunks it accessed, head to tail (`on_request_finished`).
            let mut st = std::mem::take(self.req(id));
            self.refused -= st.refused as u32;
            st.seen.retain(|&k| k != UNSEEN);
            self.tier.finished(&st.seen, st.rank);
        }
        flush
    }

    /// Request `id` accessed the chunks `keys` (key, position): those it had not accessed
    /// before are noted, and the tier raises their ranks to the request's
    /// (`_record_request_cache_access`, `on_request_access`).
    fn access(&mut self, id: ReqId, keys: impl Iterator<Item = (u32, u32)>) {
        let mut st = std::mem::take(self.req(id));
        let mut first = std::mem::take(&mut self.first_access);
        first.clear();
        for (key, pos) in keys {
            let p = pos as usize;
            if st.seen.len() <= p {
                st.seen.resize(p + 1, UNSEEN);
            }
            if st.seen[p] != UNSEEN {
                continue;
            }
            st.seen[p] = key;
            first.push((key, pos));
        }
        if !first.is_empty() {
            if st.rank == 0 {
                st.rank = self.tier.fresh_rank();
            }
            self.tier.raise_all(&first, st.rank);
        }
        self.first_access = first;
        *self.req(id) = st;
    }

    /// Offers request `id`'s full chunks below `upto` tokens from where it last stored
    /// (`prepare_store`): all that the tier lacks, or none.
    fn offer(&mut self, id: ReqId, r: &ReqRt, upto: u32, cache: &dyn PrefixCache) {
        let chunk = self.cfg.chunk_tokens;
        let (from, to) = (self.req(id).next_stored, upto / chunk);
        if from >= to {
            return;
        }
        let mut offered = std::mem::take(&mut self.keys);
        Self::chunk_keys(cache, r, from as usize, to as usize, &mut offered);
        // One look at each offered chunk: those the tier lacks are to store; those and the ones
        // held and ready are accesses (those still being stored are not); the ready ones are
        // what the store must not evict.
        let (mut new, mut accessed) = (std::mem::take(&mut self.new), std::mem::take(&mut self.accessed));
        new.clear();
        accessed.clear();
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        for (&k, pos) in offered.iter().zip(from..) {
            match self.tier.state(k) {
                None => {
                    new.push((k, pos));
                    accessed.push((k, pos));
                }
                Some(tier::State::Ready) => {
                    ready.push(k);
                    accessed.push((k, pos));
                }
                Some(_) => {}
            }
        }
        self.access(id, accessed.iter().copied());
        self.accessed = accessed;
        let stored = new.is_empty() || {
            let rank = match self.req(id).rank {
                0 => self.tier.fresh_rank(),
                r => r,
            };
            self.req(id).rank = rank;
            self.tier.store_protecting(&new, rank, &mut ready)
        };
        self.ready = ready;
        self.keys = offered;
        if stored {
            self.req(id).next_stored = to;
        }
        // Counted while refused: it offers again at its next step.
        let st = self.req(id);
        match (st.refused, stored) {
            (false, false) => self.refused += 1,
            (true, true) => self.refused -= 1,
            _ => {}
        }
        self.req(id).refused = !stored;
        // Not stored: offered again when the request is next scheduled.
        if stored && !new.is_empty() {
            let keys = new.iter().map(|&(k, _)| k).collect();
            let job = Job {
                req: id,
                keys,
                done: f64::NAN,
                formed_at: self.formed,
                own_forward: false,
                preemptions: r.preemptions,
            };
            self.stores.push_back(job);
            self.unstarted += 1;
        }
        self.new = new;
    }

    /// Request `id` finished (its blocks freed): its last stores and re-ranking come with the next
    /// step formed.
    pub fn finished(&mut self, id: ReqId) {
        self.finished.push(id);
    }

    /// The step formed at `now` runs until `end` (`None`: no forward): the copies it submitted
    /// start when its forward ends, each after the one before it in its direction.
    pub fn priced(&mut self, now: f64, end: Option<f64>) {
        let own_forward = end.is_some();
        let mut left = std::mem::take(&mut self.unstarted);
        if left > 0 {
            let (start, cfg) = (end.unwrap_or(now), self.cfg);
            for (queue, free, spent) in [
                (&mut self.loads, &mut self.load_free, &mut self.stats.load_s),
                (&mut self.stores, &mut self.store_free, &mut self.stats.store_s),
            ] {
                // The copies submitted now are the newest of their queue.
                let fresh = queue.iter().rev().take_while(|j| j.done.is_nan()).count();
                let from = queue.len() - fresh;
                for j in queue.range_mut(from..) {
                    let dt = cfg.copy_s(j.keys.len());
                    j.done = start.max(*free) + dt;
                    j.own_forward = own_forward;
                    *free = j.done;
                    *spent += dt;
                }
                left -= fresh;
            }
            debug_assert_eq!(left, 0, "every submitted copy starts once");
        }
        if own_forward {
            self.formed += 1;
        }
        self.last_empty = !own_forward;
    }

    /// Whether steps that schedule the running requests' decodes alone, and no waiting request,
    /// would offer nothing: no request offers its chunks again after a refused store.
    pub fn offers_nothing(&self) -> bool {
        self.refused == 0
    }

    /// Whether no copy is in flight (or done and not yet seen): no chunk is being stored or
    /// loaded, so a lookup cannot defer and the tier does not change until a step stores again.
    pub fn no_copies_in_flight(&self) -> bool {
        self.loads.is_empty() && self.stores.is_empty()
    }

    /// `steps` steps with a forward, each scheduling decodes alone, were formed and priced
    /// without calling the connector (a coalesced stretch): they submitted no copy, and the
    /// copies they would have seen complete at their polls are seen at the next step formed,
    /// in the same order, since nothing reads the tier in between.
    pub fn skip_steps(&mut self, steps: u32) {
        debug_assert!(self.finished.is_empty() && self.unstarted == 0, "a stretch's steps carry no news");
        self.formed += steps as u64;
        self.last_empty = false;
    }

    /// When the next copy in flight ends (for an engine with nothing else to run: it steps empty
    /// until then).
    pub fn next_copy_end(&self) -> Option<f64> {
        [self.loads.front(), self.stores.front()].into_iter().flatten().map(|j| j.done).reduce(f64::min)
    }

    /// The tier it runs.
    pub fn config(&self) -> OffloadConfig {
        self.cfg
    }

    /// The figures so far.
    pub fn stats(&self) -> OffloadStats {
        OffloadStats { tier: self.tier.stats, ..self.stats }
    }

    /// Checks the connector's and the tier's bookkeeping (tests).
    pub fn check_invariants(&self) {
        self.tier.check_invariants();
        assert!(self.loads.iter().chain(&self.stores).all(|j| !j.done.is_nan()), "a copy never started");
    }
}

#[cfg(test)]
mod tests;
