//! The tier's sizing and refusals (`resolve`), as vLLM 0.33's `CPUOffloadingSpec` sizes it.

use super::*;
use crate::engine::{EngineKind, EngineVersion};

/// Llama-3.1-8B on an H100 (131,072 KV bytes a token, PCIe 128 GB/s both ways), TP 1.
fn machine() -> TierMachine {
    TierMachine {
        engine: EngineKind::Vllm,
        version: EngineVersion::Vllm033,
        paged: true,
        block_size: 16,
        kv_bytes_per_token_per_rank: 131_072,
        ranks: 1,
        world: 1,
        pp: 1,
        disaggregated: false,
        pcie_gbps: 128.0,
    }
}

fn sized(gib: f64) -> OffloadOptions {
    OffloadOptions { size_gib: Some(gib), ..Default::default() }
}

#[test]
fn chunks_are_the_size_over_a_block_on_every_rank() {
    let c = resolve(&sized(16.0), &machine()).unwrap().unwrap();
    // 16 GiB / (16 tokens × 128 KiB) = 8,192 chunks of 2 MiB; 64 GB/s × 0.87 each way.
    assert_eq!((c.chunks, c.chunk_tokens, c.chunk_bytes_per_rank), (8192, 16, 2 << 20));
    assert!((c.link_bytes_per_s - 55.68e9).abs() < 1.0);
    assert!((c.copy_s(1) - (2 << 20) as f64 / 55.68e9).abs() < 1e-15);
    // TP 4: each rank holds a quarter of a token's KV, the size is over all four.
    let tp4 = TierMachine { kv_bytes_per_token_per_rank: 32_768, ranks: 4, world: 4, ..machine() };
    assert_eq!(resolve(&sized(16.0), &tp4).unwrap().unwrap().chunks, 8192);
    // A chunk's bytes are rounded up to a 4 KiB page: 16 × 100 bytes take 4,096.
    let odd = TierMachine { kv_bytes_per_token_per_rank: 100, ..machine() };
    assert_eq!(resolve(&sized(1.0), &odd).unwrap().unwrap().chunks, (1 << 30) / 4096);
    let own = OffloadOptions { host_link_gbps: Some(25.0), ..sized(1.0) };
    assert_eq!(resolve(&own, &machine()).unwrap().unwrap().link_bytes_per_s, 25e9);
    assert_eq!(resolve(&OffloadOptions::default(), &machine()).unwrap(), None);
}

#[test]
fn what_vllm_or_cachesim_refuses_is_refused() {
    let err = |o: OffloadOptions, m: TierMachine| resolve(&o, &m).unwrap_err().to_string();
    assert!(err(sized(0.0), machine()).contains("cpu_bytes_to_use must be specified"));
    assert!(err(sized(-1.0), machine()).contains("not a size"));
    assert!(err(sized(f64::NAN), machine()).contains("not a size"));
    assert!(err(sized(1e9), machine()).contains("more host memory than any server"));
    assert!(err(sized(0.001), machine()).contains("hold no chunk"));
    let lmcache = OffloadOptions { backend: Some(OffloadBackend::Lmcache), ..sized(8.0) };
    assert!(err(lmcache.clone(), machine()).contains("starts LMCacheMPConnector"));
    let old = TierMachine { version: EngineVersion::Vllm018, ..machine() };
    assert!(err(lmcache, TierMachine { block_size: 48, ..old }).contains("whole number of 48-token blocks"));
    let alone = OffloadOptions { backend: Some(OffloadBackend::Native), ..Default::default() };
    assert!(err(alone, machine()).contains("turns nothing on"));
    let link = OffloadOptions { host_link_gbps: Some(10.0), ..Default::default() };
    assert!(err(link, machine()).contains("give --kv-offloading-size"));
    let bad_link = OffloadOptions { host_link_gbps: Some(0.0), ..sized(1.0) };
    assert!(
        err(bad_link.clone(), machine()).contains("--host-link-gbps") || err(bad_link, machine()).contains("above 0")
    );
    assert!(err(sized(8.0), old).contains("not modelled for vllm@0.18"));
    assert!(err(sized(8.0), TierMachine { paged: false, ..machine() }).contains("prefix caching"));
    assert!(err(sized(8.0), TierMachine { pp: 2, ..machine() }).contains("pipeline parallelism"));
    assert!(err(sized(8.0), TierMachine { disaggregated: true, ..machine() }).contains("prefill/decode"));
    let sglang = TierMachine { engine: EngineKind::Sglang, version: EngineVersion::Sglang05, ..machine() };
    assert!(err(sized(8.0), sglang).contains("not a flag of --engine sglang"));
}

/// LMCache (vLLM 0.22's `--kv-offloading-backend lmcache`): `max_local_cpu_size` is the size over
/// TP × PP ranks — an MLA model's too, whose latent KV one rank stores — in chunks of 256 tokens,
/// each rank's rounded up to 4 KiB.
#[test]
fn lmcache_chunks_are_the_size_over_every_rank() {
    let lm = |gib: f64| OffloadOptions { backend: Some(OffloadBackend::Lmcache), ..sized(gib) };
    let old = TierMachine { version: EngineVersion::Vllm018, ..machine() };
    let c = resolve(&lm(16.0), &old).unwrap().unwrap();
    // 16 GiB / (256 tokens × 128 KiB) = 512 chunks of 32 MiB.
    assert_eq!(
        (c.backend, c.chunks, c.chunk_tokens, c.chunk_bytes_per_rank),
        (OffloadBackend::Lmcache, 512, 256, 32 << 20)
    );
    assert!(c.describe().starts_with("LMCache CPU backend 16 GiB (512 chunks of 256 tokens"), "{}", c.describe());
    let tp4 = TierMachine { kv_bytes_per_token_per_rank: 32_768, ranks: 4, world: 4, ..old };
    assert_eq!(resolve(&lm(16.0), &tp4).unwrap().unwrap().chunks, 512);
    // MLA over TP 4: the native tier counts one latent copy (ranks 1), LMCache splits the size.
    let mla = TierMachine { kv_bytes_per_token_per_rank: 70_272, ranks: 1, world: 4, ..old };
    let per_rank = (70_272u64 * 256).div_ceil(4096) * 4096;
    assert_eq!(resolve(&lm(64.0), &mla).unwrap().unwrap().chunks, (16u64 << 30) / per_rank);
    // 256 × 100 bytes take 28,672 (seven 4 KiB pages).
    let odd = TierMachine { kv_bytes_per_token_per_rank: 100, ..old };
    assert_eq!(resolve(&lm(1.0), &odd).unwrap().unwrap().chunks, (1 << 30) / 28_672);
}

/// LMCache's chunk size and local disk: sized, and refused where they mean nothing.
#[test]
fn lmcache_settings_are_sized_or_refused() {
    let old = TierMachine { version: EngineVersion::Vllm018, ..machine() };
    let lm = OffloadOptions { backend: Some(OffloadBackend::Lmcache), ..sized(16.0) };
    let c = resolve(&OffloadOptions { lmcache_chunk_size: Some(64), ..lm.clone() }, &old).unwrap().unwrap();
    assert_eq!((c.chunk_tokens, c.chunks), (64, 2048));
    // 100 GiB of disk a GPU, in chunks of 256 × 128 KiB; 5 GB/s unless given.
    let d =
        resolve(&OffloadOptions { lmcache_disk_gib: Some(100.0), ..lm.clone() }, &old).unwrap().unwrap().disk.unwrap();
    assert_eq!((d.chunks, d.bytes_per_s), (3200, 5e9));
    let fast = OffloadOptions { lmcache_disk_gib: Some(100.0), lmcache_disk_gbps: Some(12.5), ..lm.clone() };
    assert_eq!(resolve(&fast, &old).unwrap().unwrap().disk.unwrap().bytes_per_s, 12.5e9);
    let err = |o: OffloadOptions| resolve(&o, &old).unwrap_err().to_string();
    assert!(
        err(OffloadOptions { lmcache_chunk_size: Some(100), ..lm.clone() }).contains("whole number of 16-token blocks")
    );
    assert!(err(OffloadOptions { lmcache_chunk_size: Some(0), ..lm.clone() }).contains("--lmcache-chunk-size"));
    assert!(err(OffloadOptions { lmcache_disk_gib: Some(0.0), ..lm.clone() }).contains("starts no disk backend"));
    assert!(err(OffloadOptions { lmcache_disk_gib: Some(0.001), ..lm.clone() }).contains("hold no chunk"));
    assert!(err(OffloadOptions { lmcache_disk_gbps: Some(5.0), ..lm.clone() })
        .contains("give --lmcache-max-local-disk-size"));
    let bad_rate = OffloadOptions { lmcache_disk_gib: Some(1.0), lmcache_disk_gbps: Some(-1.0), ..lm.clone() };
    assert!(err(bad_rate).contains("--lmcache-disk-gbps"));
    let native = OffloadOptions { lmcache_disk_gib: Some(1.0), ..sized(16.0) };
    assert!(resolve(&native, &machine()).unwrap_err().to_string().contains("give --kv-offloading-backend lmcache"));
}

/// LMCache's remote server: its own lm:// server only, with physical prices; 100 µs and
/// 12.5 GB/s unless given; refused without LMCache or without the URL its prices are for.
#[test]
fn lmcache_remote_server_is_resolved_or_refused() {
    let old = TierMachine { version: EngineVersion::Vllm018, ..machine() };
    let lm = |url: &str| OffloadOptions {
        backend: Some(OffloadBackend::Lmcache),
        lmcache_remote_url: Some(url.to_string()),
        ..sized(16.0)
    };
    let r = resolve(&lm("lm://localhost:65432"), &old).unwrap().unwrap().remote.unwrap();
    assert_eq!((r.rtt_s, r.bytes_per_s), (1e-4, 12.5e9));
    let priced =
        OffloadOptions { lmcache_remote_rtt_us: Some(20.0), lmcache_remote_gbps: Some(50.0), ..lm("lm://10.0.0.2:7") };
    let r = resolve(&priced, &old).unwrap().unwrap().remote.unwrap();
    assert_eq!((r.rtt_s, r.bytes_per_s), (2e-5, 50e9));
    let err = |o: OffloadOptions| resolve(&o, &old).unwrap_err().to_string();
    assert!(err(lm("redis://cache:6379")).contains("does not model"));
    assert!(err(lm("http://cache:80")).contains("not an LMCache remote URL scheme"));
    assert!(err(lm("localhost:65432")).contains("not a URL"));
    for bad in ["lm://localhost", "lm://:80", "lm://host:0", "lm://host:70000"] {
        assert!(err(lm(bad)).contains("lm://HOST:PORT"), "{bad}");
    }
    assert!(
        err(OffloadOptions { lmcache_remote_rtt_us: Some(0.0), ..lm("lm://h:1") }).contains("--lmcache-remote-rtt-us")
    );
    assert!(
        err(OffloadOptions { lmcache_remote_gbps: Some(f64::NAN), ..lm("lm://h:1") }).contains("--lmcache-remote-gbps")
    );
    let unpriced =
        OffloadOptions { lmcache_remote_gbps: Some(10.0), backend: Some(OffloadBackend::Lmcache), ..sized(16.0) };
    assert!(err(unpriced).contains("give --lmcache-remote-url"));
    let native = OffloadOptions { lmcache_remote_url: Some("lm://h:1".into()), ..sized(16.0) };
    assert!(resolve(&native, &machine()).unwrap_err().to_string().contains("give --kv-offloading-backend lmcache"));
}
