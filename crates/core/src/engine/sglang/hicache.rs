//! SGLang's hierarchical cache flags (`--enable-hierarchical-cache`, `--hicache-ratio`,
//! `--hicache-size`, `--hicache-write-policy`) resolved into the radix cache's host tier
//! ([`crate::cache::hicache`]), with SGLang 0.5.23's sizing and what it and cachesim refuse
//! (docs/engines/hicache.md).
//!
//! Sizing (`mem_cache/pool_host/base.py` `HostKVCache.__init__`, 0.5.23): `--hicache-size` GB
//! (decimal) over one rank's bytes per token, else the device pool × `--hicache-ratio` (2.0),
//! floored to whole pages and given one page more. A host pool no larger than the device's is
//! kept with a warning (0.5.6 refused it).

use crate::cache::hicache::{HostTierConfig, WritePolicy};
use crate::engine::{EngineKind, EngineVersion};
use crate::error::{Error, Result};

/// `--hicache-ratio`'s default in cache mode.
pub const DEFAULT_RATIO: f64 = 2.0;

/// More host memory than any server holds, GB: larger sizes are refused as not physical.
const MAX_SIZE_GB: i64 = 70_000;

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
    /// The model has sliding-window or linear layers (SGLang's SWA and Mamba caches).
    pub hybrid: bool,
    /// `--host-link-gbps`, and the GPU's PCIe rate (bidirectional GB/s) it defaults from.
    pub host_link_gbps: Option<f64>,
    pub pcie_gbps: f64,
}

/// The host tier the flags ask for on `m`, or `None`; refuses what SGLang 0.5.23 refuses and
/// what cachesim does not model, saying which.
pub fn resolve(o: &HiCacheOptions, m: &HiCacheMachine) -> Result<Option<HostTierConfig>> {
    if !o.enable {
        let given = [
            (o.ratio.is_some(), "--hicache-ratio"),
            (o.size_gb.is_some(), "--hicache-size"),
            (o.write_policy.is_some(), "--hicache-write-policy"),
        ];
        if let Some((_, flag)) = given.iter().find(|g| g.0) {
            return Err(Error::invalid(flag, "turns nothing on without --enable-hierarchical-cache"));
        }
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
    if m.hybrid {
        return Err(Error::invalid(
            flag,
            "not modelled for models with sliding-window or linear layers (SGLang's SWA and Mamba host pools)",
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
            hybrid: false,
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
}
