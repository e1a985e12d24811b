//! Deployments at a target rate (`cachesim plan --target-rate R`): GPU prices the user gives
//! (`--gpu-price h100-sxm=3.50,…`, USD per GPU-hour; none are built in; `--dram-price` and
//! `--ssd-price` per GiB-hour of host and disk KV tier, [`Tiers`]), the cost of a deployment
//! (instances × GPUs per instance × price, plus instances × each tier × its price) per hour and
//! per million output tokens,
//! and the smallest instance count meeting the SLO, found by bisection over the candidate
//! counts: more instances of the same configuration never serve a given rate worse, so the
//! counts that meet the SLO form a suffix of the sorted list, and about log2(n) + 1 simulations
//! find its first element instead of n.

use cachesim_core::error::{Error, Result};
use serde::Serialize;

/// USD per GPU-hour by GPU name, as the user gave them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Prices(pub Vec<(String, f64)>);

impl std::str::FromStr for Prices {
    type Err = Error;
    /// `h100-sxm=3.50,a100-80gb=1.80` (USD per GPU-hour).
    fn from_str(s: &str) -> Result<Prices> {
        let bad = |why: String| Error::invalid("--gpu-price", why);
        let mut out: Vec<(String, f64)> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (gpu, usd) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` is not GPU=USD_PER_HOUR (e.g. h100-sxm=3.50)")))?;
            let usd: f64 = usd.trim().parse().map_err(|_| bad(format!("`{usd}` is not a number of USD per hour")))?;
            if !(usd.is_finite() && usd >= 0.0) {
                return Err(bad(format!("`{part}`: the price must be a finite number >= 0")));
            }
            let gpu = gpu.trim().to_string();
            if out.iter().any(|(g, _)| *g == gpu) {
                return Err(bad(format!("`{gpu}` is priced twice")));
            }
            out.push((gpu, usd));
        }
        if out.is_empty() {
            return Err(bad("no price given (e.g. h100-sxm=3.50,a100-80gb=1.80)".into()));
        }
        Ok(Prices(out))
    }
}

impl Prices {
    /// Adds the prices of `other`, refusing a GPU priced twice.
    pub fn extend(&mut self, other: Prices) -> Result<()> {
        for (gpu, usd) in other.0 {
            if self.0.iter().any(|(g, _)| *g == gpu) {
                return Err(Error::invalid("--gpu-price", format!("`{gpu}` is priced twice")));
            }
            self.0.push((gpu, usd));
        }
        Ok(())
    }

    /// The price of one `gpu` for an hour.
    pub fn of(&self, gpu: &str) -> Result<f64> {
        self.0.iter().find(|(g, _)| g == gpu).map(|(_, p)| *p).ok_or_else(|| {
            Error::invalid(
                "--gpu-price",
                format!("no price for `{gpu}`; add {gpu}=USD_PER_HOUR (no prices are built in)"),
            )
        })
    }
}

/// What a deployment costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    /// GPUs in all: instances × GPUs per instance.
    pub gpus: u64,
    /// Host memory of the KV tiers in all (instances × `--kv-offloading-size`, HiCache's host
    /// pool, the segment each instance adds to a Mooncake store), GiB; absent without one.
    #[serde(skip_serializing_if = "is_zero")]
    pub host_gib: f64,
    /// Disk of the KV tiers in all (instances × LMCache's local disk over the instance's ranks,
    /// HiCache's file store at its `max_size`), GiB; absent without one.
    #[serde(skip_serializing_if = "is_zero")]
    pub disk_gib: f64,
    /// GPUs, host memory and disk together.
    pub usd_per_hour: f64,
    /// USD per million output tokens at the throughput served; `None` without output.
    pub usd_per_million_output_tokens: Option<f64>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The memory of one kind a deployment's KV tiers take and its price, USD per GiB-hour: host
/// memory (`--dram-price`) or disk (`--ssd-price`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TierMemory {
    pub gib: f64,
    pub usd_per_gib_hour: f64,
}

impl TierMemory {
    fn usd_per_hour(self) -> f64 {
        self.gib * self.usd_per_gib_hour
    }
}

/// The cost of `gpus` GPUs at `usd_per_gpu_hour` each, of `host` memory and of `disk`,
/// serving `output_tok_s` output tokens/s.
pub fn cost(gpus: u64, usd_per_gpu_hour: f64, host: TierMemory, disk: TierMemory, output_tok_s: f64) -> Cost {
    let usd_per_hour = gpus as f64 * usd_per_gpu_hour + host.usd_per_hour() + disk.usd_per_hour();
    let per_m = (output_tok_s > 0.0).then(|| usd_per_hour / (output_tok_s * 3600.0) * 1e6);
    Cost { gpus, host_gib: host.gib, disk_gib: disk.gib, usd_per_hour, usd_per_million_output_tokens: per_m }
}

/// The memory one instance's KV tiers take beyond its GPUs, and the flags that ask for them: host
/// memory (vLLM's offloading or LMCache's CPU backend, HiCache's host pool, the segment an
/// instance adds to a Mooncake store) and disk (LMCache's local disk on each rank, HiCache's
/// file store at its `max_size`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tiers {
    pub host_gib: f64,
    pub disk_gib: f64,
    /// The flag that asks for the first host tier, and for the first disk tier.
    pub host_flag: Option<&'static str>,
    pub disk_flag: Option<&'static str>,
}

impl Tiers {
    /// The tiers of `c`; refused (why) with an unbounded store, which no size prices: a file
    /// store without a `max_size`, or LMCache's remote server (its `lm://` server never evicts).
    pub fn of(c: &cachesim_core::config::RunConfig) -> std::result::Result<Self, &'static str> {
        use cachesim_core::cache::storage::Eviction;
        let ranks = c.deployment.parallel.world();
        let mut t = Tiers::default();
        if let Some(o) = &c.engine.offload {
            if o.remote.is_some() {
                return Err("--lmcache-remote-url cannot be priced: LMCache's lm:// server never evicts, so it \
                            takes as much host memory as the chunks put to it (the run's LMCache remote line \
                            says how much)");
            }
            t.host_gib += o.size_gib;
            t.host_flag = Some("--kv-offloading-size");
            if let Some(d) = &o.disk {
                // `max_local_disk_size` is read whole by every worker.
                t.disk_gib += d.size_gib * ranks as f64;
                t.disk_flag = Some("--lmcache-max-local-disk-size");
            }
        }
        if let Some(h) = &c.engine.hicache {
            t.host_gib += h.host_gib(ranks);
            t.host_flag = t.host_flag.or(Some("--enable-hierarchical-cache"));
        }
        if let Some(st) = &c.engine.hicache_storage {
            let gib = st.store_gib().ok_or(
                "--hicache-storage-backend file without a max_size cannot be priced: an unbounded store takes as \
                 much disk as it is given (set max_size in --hicache-storage-backend-extra-config)",
            )?;
            match st.eviction {
                Eviction::Mooncake => {
                    t.host_gib += gib;
                    t.host_flag = t.host_flag.or(Some("--hicache-storage-backend mooncake"));
                }
                Eviction::File => {
                    t.disk_gib += gib;
                    t.disk_flag = t.disk_flag.or(Some("--hicache-storage-backend file"));
                }
            }
        }
        Ok(t)
    }
}

/// The bisection's answer: the smallest count meeting the SLO with its evaluation, and every
/// count tried in order with whether it met it.
#[derive(Debug, Clone)]
pub struct Smallest<T> {
    pub found: Option<(u64, T)>,
    pub tried: Vec<(u64, bool)>,
}

/// The smallest of `counts` (ascending, distinct) for which `eval` says the SLO is met, assuming
/// that once met it stays met for larger counts: the largest count first (none meets if it
/// fails), then bisection between the largest count known to fail and the smallest known to
/// meet.
pub fn smallest<T>(counts: &[u64], mut eval: impl FnMut(u64) -> Result<(bool, T)>) -> Result<Smallest<T>> {
    if counts.is_empty() || counts.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::invalid("--instances", "the instance counts must be distinct and ascending"));
    }
    let mut out = Smallest { found: None, tried: Vec::new() };
    let last = counts.len() - 1;
    let (ok, t) = eval(counts[last])?;
    out.tried.push((counts[last], ok));
    if !ok {
        return Ok(out);
    }
    out.found = Some((counts[last], t));
    // counts[hi] meets; every count below index lo + 1 fails (lo = -1: none known).
    let (mut lo, mut hi) = (-1i64, last as i64);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let n = counts[mid as usize];
        let (ok, t) = eval(n)?;
        out.tried.push((n, ok));
        if ok {
            hi = mid;
            out.found = Some((n, t));
        } else {
            lo = mid;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_and_costs() {
        let p: Prices = "h100-sxm=3.5, a100-80gb=1.8".parse().unwrap();
        assert_eq!(p.of("a100-80gb").unwrap(), 1.8);
        assert!(p.of("l40s").unwrap_err().to_string().contains("no price for `l40s`"));
        for bad in ["", "h100", "h100=x", "h100=-1", "h100=inf", "a=1,a=2"] {
            assert!(bad.parse::<Prices>().is_err(), "{bad}");
        }
        // 4 instances × TP2 = 8 GPUs at 3.50 $/h = 28 $/h; 2000 tok/s = 7.2 M tok/h → 3.888… $/M.
        let none = TierMemory::default();
        let c = cost(8, 3.5, none, none, 2000.0);
        assert_eq!((c.gpus, c.usd_per_hour), (8, 28.0));
        assert!((c.usd_per_million_output_tokens.unwrap() - 28.0 / 7.2).abs() < 1e-12);
        assert_eq!(cost(1, 1.0, none, none, 0.0).usd_per_million_output_tokens, None);
        // With 4 × 256 GiB of host KV tier at 0.005 $/GiB-hour: 28 + 5.12 = 33.12 $/h.
        let c = cost(8, 3.5, TierMemory { gib: 1024.0, usd_per_gib_hour: 0.005 }, none, 2000.0);
        assert_eq!((c.host_gib, c.disk_gib, c.usd_per_hour), (1024.0, 0.0, 33.12));
        // And 4 × 2 TiB of disk at 0.0001 $/GiB-hour: + 0.8192 $/h.
        let disk = TierMemory { gib: 8192.0, usd_per_gib_hour: 0.0001 };
        let c = cost(8, 3.5, TierMemory { gib: 1024.0, usd_per_gib_hour: 0.005 }, disk, 2000.0);
        assert_eq!((c.host_gib, c.disk_gib), (1024.0, 8192.0));
        assert!((c.usd_per_hour - 33.9392).abs() < 1e-12);
    }

    #[test]
    fn bisection_finds_the_smallest_count() {
        let counts: Vec<u64> = (1..=16).collect();
        for need in 1..=16u64 {
            let s = smallest(&counts, |n| Ok((n >= need, n * 10))).unwrap();
            assert_eq!(s.found, Some((need, need * 10)), "need {need}");
            // The largest first, then ⌈log2 16⌉ = 4 halvings at most.
            assert!(s.tried.len() <= 5, "need {need}: {:?}", s.tried);
        }
        // need 5 (indices of 1..=16): 16 meets; mid 7 (8) meets; mid 3 (4) fails; mid 5 (6) meets; mid 4 (5) meets.
        let s = smallest(&counts, |n| Ok((n >= 5, ()))).unwrap();
        assert_eq!(s.tried, [(16, true), (8, true), (4, false), (6, true), (5, true)]);
        let none = smallest(&counts, |_| Ok((false, ()))).unwrap();
        assert!(none.found.is_none());
        assert_eq!(none.tried.len(), 1);
        assert!(smallest(&[2, 1], |_| Ok((true, ()))).is_err());
    }
}
