//! cachesim's core: the simulation of one serving deployment, with no command-line, plotting or
//! fitting dependency. Trace readers ([`trace`]), tokenization ([`tokenize`]), workloads over
//! shared token storage ([`workload`]), the hardware catalog ([`catalog`]), engine-faithful
//! prefix caches ([`cache`]) and their replay without timing ([`replay`]), data-set analysis
//! ([`analyze`]), calibration profiles as data ([`calibration`]), the parallel layout
//! ([`layout`]), vLLM's memory budget ([`vllm_memory`]), resolved configuration ([`config`]),
//! step time ([`cost`]), schedulers ([`engine`]), routers and prefill/decode pools
//! ([`cluster`]), the event loop ([`sim`]) and the benchmark clients' metrics ([`metrics`]).
//! ARCHITECTURE.md at the repository's root is the map.

pub mod analyze;
pub mod cache;
pub mod calibration;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod cost;
pub mod engine;
pub mod error;
pub mod layout;
pub mod messages;
pub mod metrics;
pub mod replay;
pub mod sim;
pub mod table;
pub mod text;
pub mod tokenize;
pub mod trace;
pub mod vllm_memory;
pub mod workload;

pub use error::{Error, Result};

/// The bundled sample trace (`traces/sessions.jsonl`), used when no `--trace` is given.
pub const SAMPLE_TRACE: &[u8] = include_bytes!("../../../traces/sessions.jsonl");
/// The name the bundled sample goes by in reports.
pub const SAMPLE_TRACE_NAME: &str = "traces/sessions.jsonl (built-in sample)";

/// Reads a trace file: `path`, or the bundled sample when `None`.
pub fn read_trace(path: Option<&std::path::Path>, read: &trace::ReadOptions) -> Result<trace::TraceFile> {
    match path {
        Some(p) => trace::read(p, read),
        None => trace::parse(std::path::Path::new(SAMPLE_TRACE_NAME), SAMPLE_TRACE, read),
    }
}

/// Reads and builds a workload: from `path`, or from the bundled sample when `None`.
pub fn load_workload(
    path: Option<&std::path::Path>,
    read: &trace::ReadOptions,
    build: &workload::BuildOptions,
) -> Result<workload::Workload> {
    workload::build(read_trace(path, read)?, build)
}
