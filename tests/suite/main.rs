//! cachesim's integration tests, one binary (one link, one test harness): each module is one
//! subject, named as the test filter selects it (`cargo test --test suite bad_input`).
//! Tests that need the real data beside the repository say so and count as ignored without it.

mod common;

mod any_engine_fit;
mod architecture;
mod autoscale;
mod bad_input;
mod bigmodel;
mod calibration;
mod calibration_fit;
mod cli;
mod clients;
mod cluster;
mod coalescing;
mod deployment;
mod docs;
mod error_bars;
mod faults;
mod fuzz;
mod golden_hybrid;
mod golden_offload;
mod golden_sglang;
mod golden_vllm;
mod kernels;
mod offload;
mod plan;
mod real_data;
mod refusals;
mod seed_totals;
mod seeds;
mod silicon;
mod sweep;
mod sweep_file;
mod trtllm;
mod vllm_versions;
