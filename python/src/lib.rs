//! `cachesim._native`, the compiled half of the `cachesim` Python package: the cachesim
//! library behind the command line, called with the command line's own flag definitions so that
//! names, defaults and checks cannot drift. The Python half (`cachesim/__init__.py`) gives it
//! its public face: `run`, `cache`, `analyze`, `sweep`, `plan`, `calibrate`, `validate`,
//! `Workload`, `Result`. A member of the repository's workspace outside its default members, so
//! the core crate keeps no Python types and `cargo test` there never builds this one.

mod convert;
mod errors;
mod flags;
mod run;
mod sweep;
mod workload;

use pyo3::prelude::*;

/// The compiled module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<errors::Error>())?;
    m.add("TraceError", py.get_type::<errors::TraceError>())?;
    m.add("StartupRefused", py.get_type::<errors::StartupRefused>())?;
    m.add("SAMPLE_TRACE_NAME", cachesim::SAMPLE_TRACE_NAME)?;
    m.add("CORE_VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<workload::NativeWorkload>()?;
    m.add_class::<run::NativeResult>()?;
    m.add_function(wrap_pyfunction!(run::run, m)?)?;
    m.add_function(wrap_pyfunction!(run::all_failed, m)?)?;
    m.add_function(wrap_pyfunction!(run::command, m)?)?;
    m.add_function(wrap_pyfunction!(run::cache, m)?)?;
    m.add_function(wrap_pyfunction!(run::time_rust_runs, m)?)?;
    m.add_function(wrap_pyfunction!(flags::run_flags, m)?)?;
    m.add_function(wrap_pyfunction!(flags::trace_flags, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_points, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_run, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_rank, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::check_metric, m)?)?;
    Ok(())
}
