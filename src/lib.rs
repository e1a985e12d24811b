//! cachesim predicts how an LLM serving deployment behaves before anyone spends GPU time.
//! This crate holds the library behind the `cachesim` binary: trace readers ([`trace`]),
//! tokenization ([`tokenize`]), workloads over shared token storage ([`workload`]),
//! engine-faithful prefix caches ([`cache`]) and their replay without timing ([`replay`]),
//! data-set analysis ([`analyze`]), the serving simulation — profiles ([`profile`]), vLLM's
//! memory budget ([`vllm_memory`]), resolved
//! configuration ([`config`]), step time ([`cost`]), schedulers ([`engine`]), the event loop
//! ([`sim`]) and the benchmark clients' metrics ([`metrics`]) — and reports ([`report`],
//! [`plot`]), written all or nothing ([`output`]). The command line's clap definitions ([`cli`])
//! live here too, so that other front ends (the Python binding) parse flags exactly as it does.

pub mod analyze;
pub mod cache;
pub mod calibrate;
pub mod calibration;
pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod cost;
pub mod engine;
pub mod error;
pub mod layout;
pub mod metrics;
pub mod output;
pub mod plan;
pub mod plot;
pub mod replay;
pub mod report;
pub mod saturation;
pub mod sim;
pub mod sweep;
pub mod text;
pub mod tokenize;
pub mod trace;
pub mod vllm_memory;
pub mod workload;

pub use error::{Error, Result};

// `cli` names this crate `cachesim`, as the binary and the Python binding that share it do.
extern crate self as cachesim;

/// The bundled sample trace (`traces/sessions.jsonl`), used when no `--trace` is given.
pub const SAMPLE_TRACE: &[u8] = include_bytes!("../traces/sessions.jsonl");
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
