//! `cachesim.run`, `cachesim.cache` and `cachesim.analyze`: the command line's flags parsed by
//! its clap definitions, the library called as the binary calls it (without the GIL), and the
//! `--json` documents returned as dicts; a run's per-request and per-step records come back as
//! columns. Output files (`requests_csv`, `timeline_csv`, `token_times_csv`, `plot`) are written
//! all or nothing, as by the command line.

use crate::convert::{columns, py_json};
use crate::errors::{to_py, Error};
use crate::flags::{self, Word};
use crate::workload::{Loaded, NativeWorkload};
use cachesim::config::RunConfig;
use cachesim::sim::Outcome;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;
use std::sync::Arc;

/// The workload given, or the one the flags' trace arguments name (read now). A workload given
/// refuses trace flags: they were set when it was loaded.
pub fn workload_for(
    py: Python<'_>,
    workload: Option<&NativeWorkload>,
    words: &[Word],
    what: &str,
) -> PyResult<Arc<Loaded>> {
    let trace_ids = flags::trace_ids();
    let is_trace = |id: &str| trace_ids.iter().any(|t| t == id);
    match workload {
        Some(w) => {
            if let Some((id, _)) = words.iter().find(|(id, _)| is_trace(id)) {
                return Err(PyTypeError::new_err(format!(
                    "{what}(): `{id}` says how the trace is read; with workload= it was set when the Workload was loaded"
                )));
            }
            Ok(w.inner.clone())
        }
        None => {
            let trace: Option<std::path::PathBuf> = words
                .iter()
                .find(|(id, _)| id == "trace")
                .and_then(|(_, w)| w.first())
                .map(|w| w.trim_start_matches("--trace=").into());
            let mine: Vec<Word> = words
                .iter()
                .filter(|(id, _)| id != "trace" && (is_trace(id) || id == "report_style"))
                .cloned()
                .collect();
            Ok(Arc::new(Loaded::load(py, trace, mine)?))
        }
    }
}

/// The argv of a run over `loaded`: its trace words, then `words` (a `--report-style` in
/// `words` replaces the workload's).
pub fn run_argv(loaded: &Loaded, words: &[Word]) -> Vec<String> {
    let style_given = words.iter().any(|(id, _)| id == "report_style");
    let mut argv: Vec<String> = loaded
        .words
        .iter()
        .filter(|(id, _)| !(style_given && id == "report_style"))
        .flat_map(|(_, w)| w.iter().cloned())
        .collect();
    argv.extend(words.iter().filter(|(id, _)| id != "trace").flat_map(|(_, w)| w.iter().cloned()));
    argv
}

/// Refuses a run whose flags would read the trace differently from how `loaded` was read.
pub fn check_build(loaded: &Loaded, build: &cachesim::workload::BuildOptions) -> Result<(), String> {
    if format!("{build:?}") != loaded.build_key {
        return Err(format!(
            "this run would turn {} into requests differently from how the Workload was built (--report-style picks the ShareGPT sample); load the Workload with the same flags",
            loaded.w.info.path.display()
        ));
    }
    Ok(())
}

/// One simulation and everything needed to report it.
#[pyclass(frozen, module = "cachesim._native", name = "NativeResult")]
pub struct NativeResult {
    loaded: Arc<Loaded>,
    cfg: RunConfig,
    out: Outcome,
    kept_steps: bool,
    kept_tokens: bool,
    #[pyo3(get)]
    notes: Vec<String>,
}

#[pymethods]
impl NativeResult {
    /// The `cachesim run --json` document.
    fn report(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        py_json(py, &cachesim::report::RunReport::new(&self.out, &self.loaded.w.info, &self.cfg))
    }
    /// One row per completed request (the columns of `--requests-csv`).
    fn requests(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        columns(py, &self.out.sim.records)
    }
    /// One row per engine step (the columns of `--timeline-csv`); None when not kept.
    fn steps(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.kept_steps {
            return Ok(None);
        }
        columns(py, &self.out.sim.timeline).map(Some)
    }
    /// One row per output token (the columns of `--token-times-csv`); None when not kept.
    fn token_times(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.kept_tokens {
            return Ok(None);
        }
        columns(py, &self.out.sim.tokens).map(Some)
    }
    /// Failed requests by reason: {reason: (count, the engine's message)}.
    fn failures(&self) -> Vec<(String, u64, String)> {
        self.out.sim.failures.iter().map(|(r, (n, m))| (r.label().to_string(), *n, m.clone())).collect()
    }
}

/// Writes `rows` as CSV to a staged file.
fn write_csv<T: serde::Serialize>(
    files: &mut cachesim::output::Outputs,
    path: &Path,
    rows: &[T],
) -> cachesim::Result<()> {
    let io = |e: csv::Error| cachesim::Error::Io { path: path.to_path_buf(), error: std::io::Error::other(e) };
    let tmp = files.stage(path)?;
    let mut w = csv::Writer::from_path(&tmp).map_err(io)?;
    for r in rows {
        w.serialize(r).map_err(io)?;
    }
    w.flush().map_err(|e| cachesim::Error::Io { path: path.to_path_buf(), error: e })
}

/// `cachesim.run`: see the Python docstring.
#[pyfunction]
#[pyo3(signature = (workload, kwargs, keep_steps))]
pub fn run(
    py: Python<'_>,
    workload: Option<PyRef<'_, NativeWorkload>>,
    kwargs: Option<&Bound<'_, PyDict>>,
    keep_steps: bool,
) -> PyResult<NativeResult> {
    let cmd = flags::run_command();
    let words = flags::words(cmd, kwargs, "run")?;
    if workload.is_some() {
        // Refuse trace flags before anything is read.
        let ids = flags::trace_ids();
        if let Some((id, _)) = words.iter().find(|(id, _)| ids.contains(id)) {
            return Err(PyTypeError::new_err(format!(
                "run(): `{id}` says how the trace is read; with workload= it was set when the Workload was loaded"
            )));
        }
    }
    // Parse and resolve before reading the trace, as the command line does.
    let mut pre = flags::flat(&words);
    if let Some(w) = &workload {
        pre = run_argv(&w.inner, &words);
    }
    let parsed = flags::parse_run_py(&pre)?;
    let args = &parsed.run;
    let opts = args.options();
    let cfg = cachesim::config::resolve(&opts).map_err(|e| to_py(e, None))?;
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p).map_err(|e| to_py(e, None))?;
    }
    let outputs: Vec<(&str, &Path)> = [
        ("--requests-csv", args.requests_csv.as_deref()),
        ("--timeline-csv", args.timeline_csv.as_deref()),
        ("--token-times-csv", args.token_times_csv.as_deref()),
        ("--plot", args.plot.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    inputs.extend(args.trace.trace.as_deref().map(|p| ("--trace", p)));
    inputs.extend(args.model_file.as_deref().map(|p| ("--model-file", p)));
    inputs.extend(args.gpu_file.as_deref().map(|p| ("--gpu-file", p)));
    cachesim::output::check_paths(&inputs, &outputs).map_err(|e| to_py(e, None))?;
    let notes = cachesim::config::notes(&opts, &cfg);
    let loaded = workload_for(py, workload.as_deref(), &words, "run")?;
    check_build(&loaded, &args.build_options()).map_err(Error::new_err)?;
    let keep = cachesim::sim::Keep {
        steps: keep_steps || args.timeline_csv.is_some() || args.plot.is_some(),
        tokens: args.token_times_csv.is_some(),
        schedule: false,
    };
    let l2 = loaded.clone();
    let out = py
        .detach(|| -> cachesim::Result<Outcome> {
            let out = cachesim::sim::simulate(&l2.w, &cfg, keep)?;
            let mut files = cachesim::output::Outputs::new();
            if let Some(p) = &args.requests_csv {
                write_csv(&mut files, p, &out.sim.records)?;
            }
            if let Some(p) = &args.timeline_csv {
                write_csv(&mut files, p, &out.sim.timeline)?;
            }
            if let Some(p) = &args.token_times_csv {
                write_csv(&mut files, p, &out.sim.tokens)?;
            }
            if let Some(p) = &args.plot {
                let title = format!("{} · {} on {}", l2.w.info.path.display(), cfg.model.name, cfg.gpu.name);
                let tmp = files.stage(p)?;
                cachesim::plot::run_plot(&tmp, &title, &out.sim.records, &out.sim.timeline, cfg.kv_capacity_tokens)?;
            }
            files.commit()?;
            Ok(out)
        })
        .map_err(|e| to_py(e, None))?;
    Ok(NativeResult { loaded, cfg, out, kept_steps: keep.steps, kept_tokens: keep.tokens, notes })
}

/// Whether every request of the run failed (the command line then exits with an error).
#[pyfunction]
pub fn all_failed(r: &NativeResult) -> bool {
    r.out.sent > 0 && r.out.summary.completed == 0
}

/// `cachesim.cache`: the `cachesim cache --json` document.
#[pyfunction]
#[pyo3(signature = (workload, kwargs))]
pub fn cache(
    py: Python<'_>,
    workload: Option<PyRef<'_, NativeWorkload>>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let cmd = flags::cache_command();
    let words = flags::words(cmd, kwargs, "cache")?;
    let loaded = match &workload {
        Some(w) => {
            let ids = flags::trace_ids();
            if let Some((id, _)) = words.iter().find(|(id, _)| ids.contains(id)) {
                return Err(PyTypeError::new_err(format!(
                    "cache(): `{id}` says how the trace is read; with workload= it was set when the Workload was loaded"
                )));
            }
            w.inner.clone()
        }
        None => {
            let args: flags::CacheCli = flags::parse_py(cmd, &flags::flat(&words))?;
            let t = &args.cache.trace;
            let read = t.read_options();
            let build = t.build_options();
            let path = t.trace.clone();
            let w = py
                .detach(move || cachesim::load_workload(path.as_deref(), &read, &build))
                .map_err(|e| to_py(e, Some("cannot load the trace")))?;
            return replay(py, &w, &words, None);
        }
    };
    replay(py, &loaded.w, &words, Some(&loaded))
}

fn replay(
    py: Python<'_>,
    w: &cachesim::workload::Workload,
    words: &[Word],
    loaded: Option<&Loaded>,
) -> PyResult<Py<PyAny>> {
    let cmd = flags::cache_command();
    let mut argv: Vec<String> = Vec::new();
    if let Some(l) = loaded {
        argv.extend(l.words.iter().filter(|(id, _)| id != "report_style").flat_map(|(_, w)| w.iter().cloned()));
    }
    argv.extend(flags::flat(words));
    let args: flags::CacheCli = flags::parse_py(cmd, &argv)?;
    if let Some(l) = loaded {
        check_build(l, &args.cache.trace.build_options()).map_err(Error::new_err)?;
    }
    let specs = args.cache.specs();
    let opts = cachesim::replay::ReplayOptions { inflight: args.cache.inflight as usize };
    let results = py.detach(|| cachesim::replay::replay_all(w, &specs, opts, &|| ()));
    py_json(py, &cachesim::report::CacheReport { trace: &w.info, results: &results })
}

/// `cachesim.analyze`: the `cachesim analyze --json` document.
#[pyfunction]
#[pyo3(signature = (kwargs))]
pub fn analyze(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyAny>> {
    let cmd = flags::analyze_command();
    let words = flags::words(cmd, kwargs, "analyze")?;
    let args: flags::AnalyzeCli = flags::parse_py(cmd, &flags::flat(&words))?;
    let args = args.analyze;
    if let Some(p) = &args.plot {
        cachesim::plot::check_plot_path(p).map_err(|e| to_py(e, None))?;
        let inputs: Vec<(&str, &Path)> = args.trace.trace.as_deref().map(|t| ("--trace", t)).into_iter().collect();
        cachesim::output::check_paths(&inputs, &[("--plot", p)]).map_err(|e| to_py(e, None))?;
    }
    let opts = args.options();
    let file = py
        .detach(|| cachesim::read_trace(args.trace.trace.as_deref(), &args.trace.read_options()))
        .map_err(|e| to_py(e, Some("cannot read the trace")))?;
    let title = file.path.display().to_string();
    let build = args.trace.build_options();
    let a = py
        .detach(|| cachesim::analyze::run(file, &build, &opts, &|| ()))
        .map_err(|e| to_py(e, Some("analysis failed")))?;
    if let Some(p) = &args.plot {
        py.detach(|| -> cachesim::Result<()> {
            let mut files = cachesim::output::Outputs::new();
            let tmp = files.stage(p)?;
            cachesim::plot::analysis_plot(&tmp, &title, &a.repetition, a.bounds.as_ref())?;
            files.commit()
        })
        .map_err(|e| to_py(e, None))?;
    }
    py_json(py, &a)
}

/// Times `n` runs of `kwargs` over `workload` in Rust alone — resolve the configuration, then
/// simulate, as `run` does after parsing — and returns the seconds (for the overhead check).
#[pyfunction]
#[pyo3(signature = (workload, kwargs, n, keep_steps))]
pub fn time_rust_runs(
    py: Python<'_>,
    workload: PyRef<'_, NativeWorkload>,
    kwargs: Option<&Bound<'_, PyDict>>,
    n: usize,
    keep_steps: bool,
) -> PyResult<f64> {
    let cmd = flags::run_command();
    let words = flags::words(cmd, kwargs, "run")?;
    let args: flags::RunCli = flags::parse_py(cmd, &run_argv(&workload.inner, &words))?;
    let opts = args.run.options();
    let loaded = workload.inner.clone();
    let keep = cachesim::sim::Keep { steps: keep_steps, tokens: false, schedule: false };
    py.detach(|| -> cachesim::Result<f64> {
        let t = std::time::Instant::now();
        for _ in 0..n {
            let cfg = cachesim::config::resolve(&opts)?;
            std::hint::black_box(cachesim::sim::simulate(&loaded.w, &cfg, keep)?);
        }
        Ok(t.elapsed().as_secs_f64())
    })
    .map_err(|e| to_py(e, None))
}
