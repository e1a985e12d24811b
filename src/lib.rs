//! The `cachesim` package: the command line over the core ([`cachesim_core`], the simulation)
//! and the lab ([`cachesim_lab`], many runs and their documents). This library holds what the
//! binary and the Python binding share — the clap definitions of every command ([`cli`]) and
//! the expansion of deployment files into flags ([`deployment`]) — and names the two crates'
//! modules under one roof, so `cachesim::config` is the core's and `cachesim::report` the
//! lab's.

pub mod cli;
pub mod commands;
pub mod deployment;

pub use cachesim_core::{
    analyze, cache, calibration, catalog, cluster, config, cost, engine, error, layout, load_workload, messages,
    metrics, read_trace, replay, sim, table, text, tokenize, trace, vllm_memory, workload, Error, Result, SAMPLE_TRACE,
    SAMPLE_TRACE_NAME,
};
pub use cachesim_lab::{calibrate, output, plan, plot, report, saturation, seeds, sweep, trust};

// `cli` names this crate `cachesim`, as the binary and the Python binding that share it do.
extern crate self as cachesim;
