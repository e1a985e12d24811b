//! LMCache's remote backend against its own server (`remote_url: lm://HOST:PORT`; LMCache 0.5.6,
//! `v1/storage_backend/remote_backend.py` `RemoteBackend` over
//! `v1/storage_backend/connector/lm_connector.py` `LMCServerConnector`, the server
//! `v1/server/__main__.py` `LMCacheServer`). Each GPU rank talks to the server over one socket,
//! and nothing is batched: a lookup asks `exists` one chunk at a time (a round trip each), a load
//! `get`s one chunk at a time (a round trip and the chunk's bytes), and a save `put`s each chunk
//! without a reply, in the background. Everything on a socket happens one after another, so a
//! lookup or a load waits behind the puts before it. The server keeps every chunk put to it in a
//! dict (`v1/server/storage_backend/local_backend.py` `LMSLocalBackend`: no eviction, no size
//! limit). Its keys are the model, the world size, the rank and the chunk's prefix hash
//! (`utils.py` `CacheEngineKey`), so instances of one model and layout find each other's chunks
//! ([`LmServer`] is shared by such instances of a run).

use crate::error::{Error, Result};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use std::collections::VecDeque;

/// The remote backend, resolved (`--lmcache-remote-url`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RemoteConfig {
    /// One round trip to the server (an `exists`, or a `get`'s request and header).
    pub rtt_s: f64,
    /// One rank's socket to the server, bytes per second (each direction).
    pub bytes_per_s: f64,
}

/// A remote round trip when none is given: a request and its reply over TCP between hosts of one
/// cluster, through LMCache's Python client and server (an assumption).
pub const DEFAULT_RTT_US: f64 = 100.0;

/// A rank's socket rate when none is given: a 100 Gb/s Ethernet link (an assumption).
pub const DEFAULT_GBPS: f64 = 12.5;

/// The remote backend's figures over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RemoteStats {
    /// Prompt tokens loaded that only the server held (of the tier's loaded tokens).
    pub hit_tokens: u64,
    /// `exists` round trips of lookups (and of loads mapping their chunks again), and the
    /// seconds steps waited for them.
    pub exists_calls: u64,
    pub lookup_s: f64,
    /// Chunks read for loads, and the seconds the loads waited for them.
    pub read_chunks: u64,
    pub read_s: f64,
    /// Chunks put, and the seconds the socket spent sending them.
    pub written_chunks: u64,
    pub write_s: f64,
    /// Puts not sent: the same chunk's put was still in flight (`exists_in_put_tasks`).
    pub skipped_puts: u64,
    /// Chunks the server held at the end (the run's server: every instance sharing it), and
    /// one chunk's bytes for one GPU rank (the server keeps one such object per rank).
    pub held_chunks: u64,
    pub chunk_bytes_per_rank: u64,
}

impl RemoteStats {
    /// Adds another instance's figures (the server's chunks are the larger count: instances of
    /// a run share it).
    pub fn merge(&mut self, o: &RemoteStats) {
        self.hit_tokens += o.hit_tokens;
        self.exists_calls += o.exists_calls;
        self.lookup_s += o.lookup_s;
        self.read_chunks += o.read_chunks;
        self.read_s += o.read_s;
        self.written_chunks += o.written_chunks;
        self.write_s += o.write_s;
        self.skipped_puts += o.skipped_puts;
        self.held_chunks = self.held_chunks.max(o.held_chunks);
        self.chunk_bytes_per_rank = self.chunk_bytes_per_rank.max(o.chunk_bytes_per_rank);
    }

    /// GiB the server holds for each GPU rank.
    pub fn held_gib_per_rank(&self) -> f64 {
        self.held_chunks as f64 * self.chunk_bytes_per_rank as f64 / (1u64 << 30) as f64
    }
}

/// What the server holds: each chunk's key and when its first put arrived (a put overwrites the
/// same bytes, so the chunk stays readable from then on).
#[derive(Debug, Clone, Default)]
pub struct LmServer {
    landed: FxHashMap<u32, f64>,
}

impl LmServer {
    /// Whether chunk `key` can be read at `now`.
    pub fn holds(&self, key: u32, now: f64) -> bool {
        self.landed.get(&key).is_some_and(|&at| at <= now)
    }

    /// A put of `key` arrives at `at`.
    fn land(&mut self, key: u32, at: f64) {
        let e = self.landed.entry(key).or_insert(at);
        *e = e.min(at);
    }

    /// Chunks held (by now or later).
    pub fn len(&self) -> usize {
        self.landed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.landed.is_empty()
    }
}

/// One instance's remote backend: its socket (the same on every rank) and the server, its own or
/// lent by the run for each scheduler pass.
#[derive(Debug)]
pub struct Remote {
    pub cfg: RemoteConfig,
    pub server: LmServer,
    /// When the socket is next free.
    free_at: f64,
    /// Puts submitted by the step being formed: they are sent when it ends.
    unstarted: Vec<u32>,
    /// Puts being sent: (done, key), in the order they end.
    sending: VecDeque<(f64, u32)>,
    in_flight: FxHashSet<u32>,
    pub stats: RemoteStats,
}

impl Remote {
    pub fn new(cfg: RemoteConfig) -> Self {
        Self {
            cfg,
            server: LmServer::default(),
            free_at: 0.0,
            unstarted: Vec::new(),
            sending: VecDeque::new(),
            in_flight: FxHashSet::default(),
            stats: RemoteStats::default(),
        }
    }

    /// Whether chunk `key` can be read at `now`.
    pub fn holds(&self, key: u32, now: f64) -> bool {
        self.server.holds(key, now)
    }

    /// A lookup's `exists` calls, asked at `at`: when the last answer comes.
    pub fn exists(&mut self, at: f64, calls: u64) -> f64 {
        if calls == 0 {
            return at;
        }
        self.stats.exists_calls += calls;
        let end = self.free_at.max(at) + calls as f64 * self.cfg.rtt_s;
        self.free_at = end;
        self.stats.lookup_s += end - at;
        end
    }

    /// A load's `get`s of `chunks` chunks of `bytes` each, one after another from `at`: when the
    /// last one is read.
    pub fn get(&mut self, at: f64, chunks: u64, bytes: u64) -> f64 {
        if chunks == 0 {
            return at;
        }
        let end =
            self.free_at.max(at) + chunks as f64 * self.cfg.rtt_s + chunks as f64 * bytes as f64 / self.cfg.bytes_per_s;
        self.free_at = end;
        self.stats.read_chunks += chunks;
        self.stats.read_s += end - at;
        end
    }

    /// Chunk `key`, just saved, is put when the step ends.
    pub fn submit(&mut self, key: u32) {
        self.unstarted.push(key);
    }

    /// Puts waiting to start or being sent.
    pub fn puts_pending(&self) -> usize {
        self.unstarted.len() + self.sending.len()
    }

    /// The puts sent by `now`, in the order they end: each one's key passed to `done` (its local
    /// copy's pin goes).
    pub fn settle(&mut self, now: f64, mut done: impl FnMut(u32)) {
        while let Some(&(end, key)) = self.sending.front() {
            if end > now {
                break;
            }
            self.sending.pop_front();
            self.in_flight.remove(&key);
            done(key);
        }
    }

    /// The step formed ends at `at`: its puts start, one after another on the socket; a put of a
    /// chunk whose put is still in flight is dropped, its key passed to `dropped`.
    pub fn start_puts(&mut self, at: f64, bytes: u64, mut dropped: impl FnMut(u32)) {
        let per = bytes as f64 / self.cfg.bytes_per_s;
        for key in std::mem::take(&mut self.unstarted) {
            if !self.in_flight.insert(key) {
                self.stats.skipped_puts += 1;
                dropped(key);
                continue;
            }
            let done = self.free_at.max(at) + per;
            self.free_at = done;
            self.sending.push_back((done, key));
            self.server.land(key, done);
            self.stats.written_chunks += 1;
            self.stats.write_s += per;
        }
    }

    /// The figures so far, for chunks of `chunk_bytes_per_rank` bytes a rank.
    pub fn stats(&self, chunk_bytes_per_rank: u64) -> RemoteStats {
        RemoteStats { held_chunks: self.server.len() as u64, chunk_bytes_per_rank, ..self.stats }
    }
}

/// LMCache's remote URL schemes other than its own server's (`v1/storage_backend/connector/
/// __init__.py` `CreateConnector`, 0.5.6): backends with their own batching, eviction and
/// latency, not modelled.
const OTHER_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "unix",
    "redis-sentinel",
    "redis-cluster",
    "resp",
    "valkey",
    "infinistore",
    "mooncakestore",
    "s3",
    "fs",
    "hf3fs",
    "azure",
    "eic",
    "sagemaker-hyperpod",
    "external",
    "audit",
    "blackhole",
    "mock",
    "plugin",
];

/// The remote backend the flags ask for, or `None`: `url` must name LMCache's own server
/// (`lm://HOST:PORT`); the round trip and the rate must be physical.
pub fn resolve(url: Option<&str>, rtt_us: Option<f64>, gbps: Option<f64>) -> Result<Option<RemoteConfig>> {
    let Some(url) = url else {
        for (given, flag) in [(rtt_us.is_some(), "--lmcache-remote-rtt-us"), (gbps.is_some(), "--lmcache-remote-gbps")]
        {
            if given {
                return Err(Error::invalid(flag, "prices LMCache's remote server: give --lmcache-remote-url too"));
            }
        }
        return Ok(None);
    };
    let flag = "--lmcache-remote-url";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Error::invalid(flag, format!("{url:?} is not a URL: LMCache's own server is lm://HOST:PORT")));
    };
    if scheme != "lm" {
        let why = if OTHER_SCHEMES.contains(&scheme) {
            format!(
                "{scheme}:// is an LMCache remote backend cachesim does not model (its batching, eviction and \
                 latency are its own); lm://HOST:PORT, LMCache's own server, is the one modelled"
            )
        } else {
            format!("{scheme}:// is not an LMCache remote URL scheme; lm://HOST:PORT names LMCache's own server")
        };
        return Err(Error::invalid(flag, why));
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
        _ => {
            return Err(Error::invalid(
                flag,
                format!("{url:?}: LMCache's server URL is lm://HOST:PORT (a port from 1 to 65535)"),
            ))
        }
    }
    let rtt = rtt_us.unwrap_or(DEFAULT_RTT_US);
    if !(rtt.is_finite() && rtt > 0.0 && rtt <= 1e6) {
        return Err(Error::invalid(
            "--lmcache-remote-rtt-us",
            format!("{rtt} must be a round trip in µs above 0 and at most 1000000 (1 s)"),
        ));
    }
    let rate = gbps.unwrap_or(DEFAULT_GBPS);
    if !(rate.is_finite() && rate > 0.0 && rate <= 10_000.0) {
        return Err(Error::invalid(
            "--lmcache-remote-gbps",
            format!("{rate} must be a rate above 0 and at most 10000 GB/s"),
        ));
    }
    Ok(Some(RemoteConfig { rtt_s: rtt / 1e6, bytes_per_s: rate * 1e9 }))
}
