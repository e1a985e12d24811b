//! SGLang's hierarchical cache flags (`--enable-hierarchical-cache`, `--hicache-ratio`,
//! `--hicache-size`, `--hicache-write-policy`) resolved into the radix cache's host tier
//! ([`crate::cache::hicache`]), and its storage tier's (`--hicache-storage-backend`,
//! `--hicache-storage-prefetch-policy`, cachesim's `--storage-gbps` / `--storage-latency-ms`)
//! into [`crate::cache::storage`], with SGLang 0.5.23's sizing and what it and cachesim refuse
//! (docs/engines/hicache.md, docs/engines/hicache-storage.md).
//!
//! Sizing (`mem_cache/pool_host/base.py` `HostKVCache.__init__`, 0.5.23): `--hicache-size` GB
//! (decimal) over one rank's bytes per token, else the device pool × `--hicache-ratio` (2.0),
//! floored to whole pages and given one page more. A host pool no larger than the device's is
//! kept with a warning (0.5.6 refused it).

use crate::cache::hicache::{HostTierConfig, WritePolicy};
use crate::cache::storage::{Eviction, PrefetchPolicy, StorageConfig};
use crate::engine::sglang::storage_extra::StorageExtra;
use crate::engine::{EngineKind, EngineVersion};
use crate::error::{Error, Result};

/// `--hicache-ratio`'s default in cache mode.
pub const DEFAULT_RATIO: f64 = 2.0;

/// More host memory than any server holds, GB: larger sizes are refused as not physical.
const MAX_SIZE_GB: i64 = 70_000;

/// `--storage-gbps`'s default: what one local NVMe drive (PCIe 4.0 × 4, about 7 GB/s sequential
/// at best) sustains for SGLang's file backend, one file per page — an assumption, not a
/// measurement (docs/engines/hicache-storage.md).
pub const DEFAULT_STORAGE_GBPS: f64 = 5.0;
/// `--storage-latency-ms`'s default: one file operation on a local NVMe drive (an assumption).
pub const DEFAULT_STORAGE_LATENCY_MS: f64 = 0.1;
/// Faster than any storage link, GB/s: refused as not physical.
const MAX_STORAGE_GBPS: f64 = 10_000.0;
/// `--storage-gbps`'s default for the Mooncake Store: one GPU's RDMA NIC as Mooncake's Transfer
/// Engine measures it (87 GB/s over four 200 Gb/s RoCE NICs, the Mooncake README; one NIC per
/// GPU assumed).
pub const DEFAULT_MOONCAKE_GBPS: f64 = 21.75;
/// `MOONCAKE_GLOBAL_SEGMENT_SIZE`'s default in SGLang 0.5.23 (`srt/environ.py`: "4gb"): the
/// memory one instance adds to the Mooncake Store, bytes.
pub const DEFAULT_MOONCAKE_SEGMENT_BYTES: u64 = 4 << 30;
/// More memory than a Mooncake Store of any cluster holds, bytes: refused as not physical.
const MAX_MOONCAKE_SEGMENT_BYTES: u64 = 1 << 50;

/// `--hicache-storage-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum StorageBackend {
    /// SGLang's `HiCacheFile`: one file per page in a directory of this instance's.
    #[cfg_attr(feature = "clap", value(name = "file"))]
    File,
    /// The Mooncake Store (`MooncakeStore`): one store for every instance of the run, each adding
    /// its global segment, read and written over RDMA.
    #[cfg_attr(feature = "clap", value(name = "mooncake"))]
    Mooncake,
}

/// SGLang's reading of `MOONCAKE_GLOBAL_SEGMENT_SIZE` (`MooncakeStoreConfig._parse_segment_size`,
/// `mem_cache/storage/mooncake_store/mooncake_store.py`, 0.5.23): bytes, or `<N>gb` (GiB).
pub fn parse_segment_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let bytes = match t.strip_suffix("gb") {
        Some(n) => n.trim().parse::<f64>().ok().filter(|g| g.is_finite() && *g > 0.0).map(|g| g * (1u64 << 30) as f64),
        None => t.parse::<u64>().ok().map(|b| b as f64),
    };
    match bytes {
        Some(b) if b >= 1.0 && b <= MAX_MOONCAKE_SEGMENT_BYTES as f64 => Ok(b as u64),
        Some(_) => Err(format!("{s}: a segment of 1 byte to {} GiB", MAX_MOONCAKE_SEGMENT_BYTES >> 30)),
        None => Err(format!("{s}: bytes, or a number of GiB with `gb` (SGLang's form: 4gb)")),
    }
}

/// The flags as given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HiCacheOptions {
    /// `--enable-hierarchical-cache` (`--enable-hicache`).
    pub enable: bool,
    /// `--hicache-ratio`.
    pub ratio: Option<f64>,
    /// `--hicache-size` GB (0: by the ratio).
    pub size_gb: Option<i64>,
    /// `--hicache-write-policy`.
    pub write_policy: Option<WritePolicy>,
    /// `--hicache-storage-backend`; `None`: no storage tier.
    pub storage_backend: Option<StorageBackend>,
    /// `--hicache-storage-prefetch-policy`.
    pub prefetch_policy: Option<PrefetchPolicy>,
    /// `--storage-gbps`: GB/s one rank reads or writes its pages at.
    pub storage_gbps: Option<f64>,
    /// `--storage-latency-ms`: before a query, read or write starts to move data.
    pub storage_latency_ms: Option<f64>,
    /// `--mooncake-global-segment-size` (SGLang's `MOONCAKE_GLOBAL_SEGMENT_SIZE`), bytes.
    pub mooncake_segment_bytes: Option<u64>,
    /// `--hicache-storage-backend-extra-config`, as read.
    pub extra: Option<StorageExtra>,
    /// `--hicache-storage-prefetch-retry-poll-interval` and `-max-attempts`.
    pub retry_interval: Option<u64>,
    pub retry_max: Option<u32>,
}

/// What the tier's sizing reads from the resolved deployment.
#[derive(Debug, Clone, Copy)]
pub struct HiCacheMachine {
    pub engine: EngineKind,
    pub version: EngineVersion,
    /// The radix cache is on (`--disable-radix-cache` / `--policy none` is not).
    pub radix: bool,
    /// The device pool, tokens.
    pub device_tokens: u64,
    pub page_size: u32,
    pub token_bytes_per_rank: u64,
    /// Ranks of the instance (TP × PP), each holding its share of the host pool.
    pub ranks: u64,
    pub pp: u64,
    pub disaggregated: bool,
    /// SGLang keeps the model's sliding-window layers in a window pool of their own
    /// ([`super::swa`]), whose host pool is not modelled.
    pub window_pool: bool,
    /// `--host-link-gbps`, and the GPU's PCIe rate (bidirectional GB/s) it defaults from.
    pub host_link_gbps: Option<f64>,
    pub pcie_gbps: f64,
}

/// Refuses the first flag `given` (set, flag) that is set while `switch`, which it needs, is off.
fn refuse_stray(given: &[(bool, &'static str)], switch: &str) -> Result<()> {
    match given.iter().find(|g| g.0) {
        Some((_, flag)) => Err(Error::invalid(flag, format!("turns nothing on without {switch}"))),
        None => Ok(()),
    }
}

/// The host tier the flags ask for on `m`, or `None`; refuses what SGLang 0.5.23 refuses and
/// what cachesim does not model, saying which.
pub fn resolve(o: &HiCacheOptions, m: &HiCacheMachine) -> Result<Option<HostTierConfig>> {
    if !o.enable {
        refuse_stray(
            &[
                (o.ratio.is_some(), "--hicache-ratio"),
                (o.size_gb.is_some(), "--hicache-size"),
                (o.write_policy.is_some(), "--hicache-write-policy"),
            ],
            "--enable-hierarchical-cache",
        )?;
        return Ok(None);
    }
    let flag = "--enable-hierarchical-cache";
    if m.engine != EngineKind::Sglang {
        return Err(Error::invalid(flag, format!("an SGLang flag: not a flag of --engine {}", m.engine.name())));
    }
    if m.version != EngineVersion::Sglang05 {
        return Err(Error::invalid(
            flag,
            format!(
                "modelled as SGLang 0.5.23 runs it (--engine-version sglang@0.5); {} predates its unified radix \
                 cache (write thresholds, eviction and load-back differ)",
                m.version
            ),
        ));
    }
    if !m.radix {
        // `ServerArgs._handle_cache_compatibility`.
        return Err(Error::invalid(
            flag,
            "needs the radix cache: SGLang refuses --enable-hierarchical-cache with --disable-radix-cache",
        ));
    }
    if m.pp > 1 {
        return Err(Error::invalid(flag, "not modelled with pipeline parallelism (--pp)"));
    }
    if m.disaggregated {
        return Err(Error::invalid(flag, "not modelled in a prefill/decode deployment"));
    }
    if m.window_pool {
        return Err(Error::invalid(
            flag,
            "not modelled for models with sliding-window or linear layers (SGLang's SWA and Mamba host pools); \
             --disable-hybrid-swa-memory runs every layer as full attention",
        ));
    }
    let ratio = o.ratio.unwrap_or(DEFAULT_RATIO);
    if !(ratio.is_finite() && ratio > 0.0) {
        return Err(Error::invalid("--hicache-ratio", format!("{ratio} must be a ratio above 0")));
    }
    let size_gb = o.size_gb.unwrap_or(0);
    if size_gb < 0 {
        return Err(Error::invalid("--hicache-size", format!("{size_gb} is not a size in GB")));
    }
    if size_gb > MAX_SIZE_GB {
        return Err(Error::invalid(
            "--hicache-size",
            format!("{size_gb} GB is more host memory than any server holds"),
        ));
    }
    let page = m.page_size.max(1) as u64;
    let tokens = if size_gb > 0 {
        (size_gb as f64 * 1e9 / m.token_bytes_per_rank as f64).floor() as u64
    } else {
        (m.device_tokens as f64 * ratio).floor() as u64
    };
    // `page_num = size // page_size + 1` (the padding page).
    let host_tokens = (tokens / page + 1) * page;
    // SGLang refuses a pool the machine's free memory cannot hold (`_allocate_host_buffer`).
    let gb = host_tokens as f64 * m.token_bytes_per_rank as f64 * m.ranks.max(1) as f64 / 1e9;
    if gb > MAX_SIZE_GB as f64 {
        let flag = if size_gb > 0 { "--hicache-size" } else { "--hicache-ratio" };
        return Err(Error::invalid(
            flag,
            format!("a host pool of {host_tokens} tokens takes {gb:.0} GB over the instance's GPUs: more host memory than any server holds"),
        ));
    }
    Ok(Some(HostTierConfig {
        policy: o.write_policy.unwrap_or_default(),
        host_tokens,
        token_bytes_per_rank: m.token_bytes_per_rank,
        link_bytes_per_s: crate::engine::vllm_offload::host_link_bytes_per_s(m.host_link_gbps, m.pcie_gbps)?,
    }))
}

/// The storage tier the flags ask for under `host` (the host tier resolved from the same flags),
/// or `None`; refuses a storage flag without its tier and a tier without HiCache. A page of the
/// store holds `page_size` tokens of `copies` ranks' KV (every rank's share; one copy for MLA).
pub fn resolve_storage(
    o: &HiCacheOptions,
    host: Option<&HostTierConfig>,
    page_size: u32,
    copies: u64,
) -> Result<Option<StorageConfig>> {
    let Some(backend) = o.storage_backend else {
        refuse_stray(
            &[
                (o.prefetch_policy.is_some(), "--hicache-storage-prefetch-policy"),
                (o.storage_gbps.is_some(), "--storage-gbps"),
                (o.storage_latency_ms.is_some(), "--storage-latency-ms"),
                (o.mooncake_segment_bytes.is_some(), "--mooncake-global-segment-size"),
                (o.extra.is_some(), "--hicache-storage-backend-extra-config"),
                (o.retry_interval.is_some(), "--hicache-storage-prefetch-retry-poll-interval"),
                (o.retry_max.is_some(), "--hicache-storage-prefetch-retry-max-attempts"),
            ],
            "--hicache-storage-backend",
        )?;
        return Ok(None);
    };
    let extra = o.extra.unwrap_or_default();
    if backend != StorageBackend::File && extra.max_size_bytes.is_some() {
        return Err(Error::invalid(
            "--hicache-storage-backend-extra-config",
            "max_size is the file backend's cap (the Mooncake Store's is --mooncake-global-segment-size)",
        ));
    }
    if backend != StorageBackend::Mooncake {
        refuse_stray(
            &[(o.mooncake_segment_bytes.is_some(), "--mooncake-global-segment-size")],
            "--hicache-storage-backend mooncake",
        )?;
    }
    let Some(host) = host else {
        // `URC.init_hicache` attaches the storage backend; without HiCache there is none.
        return Err(Error::invalid(
            "--hicache-storage-backend",
            "needs --enable-hierarchical-cache: the storage tier sits under HiCache's host pool",
        ));
    };
    let default_gbps = match backend {
        StorageBackend::File => DEFAULT_STORAGE_GBPS,
        StorageBackend::Mooncake => DEFAULT_MOONCAKE_GBPS,
    };
    let gbps = o.storage_gbps.unwrap_or(default_gbps);
    if !(gbps.is_finite() && gbps > 0.0 && gbps <= MAX_STORAGE_GBPS) {
        return Err(Error::invalid(
            "--storage-gbps",
            format!("{gbps} must be a rate above 0 and at most {MAX_STORAGE_GBPS} GB/s"),
        ));
    }
    let latency_ms = o.storage_latency_ms.unwrap_or(DEFAULT_STORAGE_LATENCY_MS);
    if !(latency_ms.is_finite() && (0.0..=60_000.0).contains(&latency_ms)) {
        return Err(Error::invalid("--storage-latency-ms", format!("{latency_ms} must be 0 to 60000 ms")));
    }
    let page_bytes = host.token_bytes_per_rank as f64 * page_size.max(1) as f64;
    let pages_per_s = gbps * 1e9 / page_bytes;
    let page = page_size.max(1) as usize;
    let defaults = StorageConfig::new(o.prefetch_policy.unwrap_or_default());
    let base = StorageConfig {
        // The controller keeps `max(prefetch_threshold, page_size)`.
        threshold: extra.prefetch_threshold.map_or(defaults.threshold, |t| t as usize).max(page),
        timeout_base_s: extra.prefetch_timeout_base_s.unwrap_or(defaults.timeout_base_s),
        // `prefetch_timeout_per_page = page_size / 1024 × prefetch_timeout_per_ki_token`.
        timeout_per_page_s: page as f64 / 1024.0 * extra.prefetch_timeout_per_ki_token_s.unwrap_or(0.25),
        retry_interval: o.retry_interval.unwrap_or(defaults.retry_interval),
        retry_max: o.retry_max.unwrap_or(defaults.retry_max),
        latency_s: latency_ms / 1e3,
        pages_per_s,
        read_pages_per_s: pages_per_s,
        page_bytes: page_bytes * copies.max(1) as f64,
        ..defaults
    };
    Ok(Some(match backend {
        StorageBackend::File => match extra.max_size_bytes {
            None => base,
            // Each rank's evictor caps the files it owns: its share of each page.
            Some(bytes) => {
                let pages = (bytes as f64 / page_bytes) as u64;
                if pages == 0 {
                    return Err(Error::invalid(
                        "--hicache-storage-backend-extra-config",
                        format!("max_size {bytes} bytes holds no page of one rank ({page_bytes:.0} bytes)"),
                    ));
                }
                StorageConfig { max_pages: Some(pages), ..base }
            }
        },
        StorageBackend::Mooncake => {
            // Each rank adds its share of the segment and stores its share of each page.
            let segment = o.mooncake_segment_bytes.unwrap_or(DEFAULT_MOONCAKE_SEGMENT_BYTES);
            let pages = segment as f64 / (page_bytes * copies.max(1) as f64);
            if pages < 1.0 {
                return Err(Error::invalid(
                    "--mooncake-global-segment-size",
                    format!(
                        "{segment} bytes hold no page: a page of {} token{} takes {:.0} bytes over the instance's ranks",
                        page_size.max(1),
                        if page_size > 1 { "s" } else { "" },
                        page_bytes * copies.max(1) as f64
                    ),
                ));
            }
            StorageConfig { max_pages: Some(pages as u64), eviction: Eviction::Mooncake, shared: true, ..base }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> HiCacheMachine {
        HiCacheMachine {
            engine: EngineKind::Sglang,
            version: EngineVersion::Sglang05,
            radix: true,
            device_tokens: 1000,
            page_size: 16,
            token_bytes_per_rank: 131_072,
            ranks: 1,
            pp: 1,
            disaggregated: false,
            window_pool: false,
            host_link_gbps: None,
            pcie_gbps: 128.0,
        }
    }

    #[test]
    fn sizes_by_ratio_or_gigabytes_with_a_padding_page() {
        let on = HiCacheOptions { enable: true, ..Default::default() };
        // 1000 × 2 = 2000 tokens: 125 pages of 16, plus one.
        assert_eq!(resolve(&on, &machine()).unwrap().unwrap().host_tokens, 126 * 16);
        let sized = HiCacheOptions { size_gb: Some(1), ..on };
        // 1e9 / 131072 = 7629.39 → 7629 tokens: 476 pages, plus one.
        assert_eq!(resolve(&sized, &machine()).unwrap().unwrap().host_tokens, 477 * 16);
    }

    #[test]
    fn refuses_what_sglang_refuses_and_what_is_not_modelled() {
        let off = HiCacheOptions { ratio: Some(3.0), ..Default::default() };
        assert!(resolve(&off, &machine()).unwrap_err().to_string().contains("--hicache-ratio"));
        let on = HiCacheOptions { enable: true, ..Default::default() };
        let no_radix = HiCacheMachine { radix: false, ..machine() };
        assert!(resolve(&on, &no_radix).unwrap_err().to_string().contains("--disable-radix-cache"));
        let vllm = HiCacheMachine { engine: EngineKind::Vllm, ..machine() };
        assert!(resolve(&on, &vllm).is_err());
        let old = HiCacheMachine { version: EngineVersion::Sglang051, ..machine() };
        assert!(resolve(&on, &old).is_err());
        let bad = HiCacheOptions { ratio: Some(0.0), ..on };
        assert!(resolve(&bad, &machine()).is_err());
        // 1000 × 1e6 tokens of 128 KiB: 131,072 GB.
        let huge = HiCacheOptions { ratio: Some(1e6), ..on };
        assert!(resolve(&huge, &machine()).unwrap_err().to_string().contains("more host memory"));
    }

    #[test]
    fn the_storage_tier_needs_its_backend_and_hicache() {
        let host = resolve(&HiCacheOptions { enable: true, ..Default::default() }, &machine()).unwrap().unwrap();
        let stray = HiCacheOptions { prefetch_policy: Some(PrefetchPolicy::BestEffort), ..Default::default() };
        let e = resolve_storage(&stray, Some(&host), 16, 1).unwrap_err().to_string();
        assert!(
            e.contains("--hicache-storage-prefetch-policy") && e.contains("without --hicache-storage-backend"),
            "{e}"
        );
        let file = HiCacheOptions { storage_backend: Some(StorageBackend::File), ..Default::default() };
        assert!(resolve_storage(&file, None, 16, 1).unwrap_err().to_string().contains("--enable-hierarchical-cache"));
        // 5 GB/s over pages of 16 tokens × 128 KiB: 2,384 pages a second; the default policy.
        let s = resolve_storage(&file, Some(&host), 16, 1).unwrap().unwrap();
        assert_eq!(s.policy, PrefetchPolicy::Timeout);
        assert!((s.pages_per_s - 5e9 / (16.0 * 131_072.0)).abs() < 1e-9);
        assert!((s.latency_s - 1e-4).abs() < 1e-15);
        for bad in [0.0, -1.0, f64::NAN, 1e9] {
            let o = HiCacheOptions { storage_gbps: Some(bad), ..file };
            assert!(resolve_storage(&o, Some(&host), 16, 1).unwrap_err().to_string().contains("--storage-gbps"));
        }
        let o = HiCacheOptions { storage_latency_ms: Some(-1.0), ..file };
        assert!(resolve_storage(&o, Some(&host), 16, 1).is_err());
    }

    #[test]
    fn mooncake_shares_one_store_sized_by_each_instances_segment() {
        let host = resolve(&HiCacheOptions { enable: true, ..Default::default() }, &machine()).unwrap().unwrap();
        let mooncake = HiCacheOptions { storage_backend: Some(StorageBackend::Mooncake), ..Default::default() };
        // 4 GiB over pages of 16 tokens × 128 KiB on 2 ranks: 1,024 pages; 21.75 GB/s a rank.
        let s = resolve_storage(&mooncake, Some(&host), 16, 2).unwrap().unwrap();
        assert_eq!((s.max_pages, s.eviction, s.shared), (Some(1024), Eviction::Mooncake, true));
        assert!((s.pages_per_s - 21.75e9 / (16.0 * 131_072.0)).abs() < 1e-6);
        // What the instance adds to the store: its segment.
        assert_eq!(s.store_gib(), Some(4.0));
        let big = HiCacheOptions { mooncake_segment_bytes: Some(parse_segment_size("64gb").unwrap()), ..mooncake };
        assert_eq!(resolve_storage(&big, Some(&host), 16, 2).unwrap().unwrap().max_pages, Some(16_384));
        let tiny = HiCacheOptions { mooncake_segment_bytes: Some(1000), ..mooncake };
        assert!(resolve_storage(&tiny, Some(&host), 16, 2).unwrap_err().to_string().contains("hold no page"));
        let file = HiCacheOptions { storage_backend: Some(StorageBackend::File), ..big };
        assert!(resolve_storage(&file, Some(&host), 16, 2).unwrap_err().to_string().contains("without"));
        // SGLang's forms: bytes, or GiB with `gb`.
        assert_eq!(parse_segment_size("4gb"), Ok(4 << 30));
        assert_eq!(parse_segment_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_segment_size("0.5GB"), Ok(1 << 29));
        for bad in ["", "0", "-1gb", "4tb", "nan gb", "1e30"] {
            assert!(parse_segment_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_extra_config_and_the_retry_flags_reach_the_tier() {
        use crate::engine::sglang::storage_extra::parse;
        let host = resolve(&HiCacheOptions { enable: true, ..Default::default() }, &machine()).unwrap().unwrap();
        let file = HiCacheOptions { storage_backend: Some(StorageBackend::File), ..Default::default() };
        // Defaults at pages of 16 tokens: the per-page timeout is 16/1024 of 0.25 s.
        let s = resolve_storage(&file, Some(&host), 16, 1).unwrap().unwrap();
        assert_eq!((s.threshold, s.retry_interval, s.retry_max, s.max_pages), (256, 8, 8, None));
        assert!((s.timeout_per_page_s - 16.0 / 1024.0 * 0.25).abs() < 1e-15);
        assert_eq!(s.store_gib(), None, "an unbounded store");
        let extra =
            parse(r#"{"prefetch_threshold": 8, "prefetch_timeout_per_ki_token": 1, "max_size": "1Gi"}"#).unwrap();
        let o = HiCacheOptions { extra: Some(extra), retry_interval: Some(0), retry_max: Some(2), ..file };
        let s = resolve_storage(&o, Some(&host), 16, 1).unwrap().unwrap();
        // The threshold is at least a page; 1 GiB over 16 × 128 KiB pages: 512 of them.
        assert_eq!((s.threshold, s.retry_interval, s.retry_max, s.max_pages), (16, 0, 2, Some(512)));
        assert_eq!(s.store_gib(), Some(1.0), "one rank's max_size");
        let two = resolve_storage(&o, Some(&host), 16, 2).unwrap().unwrap();
        assert_eq!((two.max_pages, two.store_gib()), (Some(512), Some(2.0)), "each rank's files");
        assert!((s.timeout_per_page_s - 16.0 / 1024.0).abs() < 1e-15);
        let tiny = HiCacheOptions { extra: Some(parse(r#"{"max_size": 1000}"#).unwrap()), ..file };
        assert!(resolve_storage(&tiny, Some(&host), 16, 1).unwrap_err().to_string().contains("holds no page"));
        let mooncake = HiCacheOptions { storage_backend: Some(StorageBackend::Mooncake), ..o };
        assert!(resolve_storage(&mooncake, Some(&host), 16, 1).unwrap_err().to_string().contains("max_size"));
        let stray = HiCacheOptions { retry_max: Some(2), ..Default::default() };
        assert!(resolve_storage(&stray, Some(&host), 16, 1).unwrap_err().to_string().contains("retry-max-attempts"));
    }
}
