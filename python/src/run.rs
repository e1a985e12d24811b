//! `cachesim.run` and `cachesim.cache` (`analyze` and the other commands run `command`): the command line's flags parsed by
//! its clap definitions, the library called as the binary calls it (without the GIL), and the
//! `--json` documents returned as dicts; a run's per-request and per-step records come back as
//! columns. Output files (`requests_csv`, `timeline_csv`, `token_times_csv`, `plot`) are written
//! all or nothing, as by the command line.

use crate::convert::{columns, py_json};
use crate::errors::{from_anyhow, to_py, Error};
use crate::flags::{self, Word};
use crate::workload::{Loaded, NativeWorkload};
use cachesim::config::RunConfig;
use cachesim::sim::Outcome;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
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
            let mine: Vec<Word> =
                words.iter().filter(|(id, _)| id != "trace" && flags::builds_workload(id, words)).cloned().collect();
            Ok(Arc::new(Loaded::load(py, trace, mine)?))
        }
    }
}

/// The flag words of a run over `loaded`: its trace words, then `words` (a word in `words`
/// replaces the workload's of the same flag, e.g. `--report-style`; a `trace` among `words` is
/// the workload's already).
pub fn run_words(loaded: &Loaded, words: &[Word]) -> Vec<Word> {
    let mut out: Vec<Word> =
        loaded.words.iter().filter(|(id, _)| !words.iter().any(|(given, _)| given == id)).cloned().collect();
    out.extend(words.iter().filter(|(id, _)| id != "trace").cloned());
    out
}

/// The argv of a run over `loaded` ([`run_words`], flattened).
pub fn run_argv(loaded: &Loaded, words: &[Word]) -> Vec<String> {
    flags::flat(&run_words(loaded, words))
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
        py_json(py, &cachesim::report::RunReport::new(&self.out, &self.loaded.w, &self.cfg))
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

/// `cachesim.run`: see the Python docstring.
#[pyfunction]
#[pyo3(signature = (workload, kwargs, keep_steps, every_step))]
pub fn run(
    py: Python<'_>,
    workload: Option<PyRef<'_, NativeWorkload>>,
    kwargs: Option<&Bound<'_, PyDict>>,
    keep_steps: bool,
    every_step: bool,
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
    // Parse and resolve before reading the trace, as the command line does: the deployment file
    // expanded, the same checks, the same output files.
    let mut pre = flags::flat(&words);
    if let Some(w) = &workload {
        pre = run_argv(&w.inner, &words);
    }
    let (pre, deployment) = cachesim::commands::run::expand_run_words(pre).map_err(|e| to_py(e, None))?;
    let parsed = flags::parse_run_py(&pre)?;
    let args = &parsed.run;
    let (_, cfg, notes) = cachesim::commands::run::prepare(args, deployment.as_ref()).map_err(from_anyhow)?;
    let loaded = workload_for(py, workload.as_deref(), &words, "run")?;
    check_build(&loaded, &args.build_options()).map_err(Error::new_err)?;
    let keep = cachesim::sim::Keep { every_step, ..cachesim::commands::run::keep(args, keep_steps) };
    let l2 = loaded.clone();
    let out = py
        .detach(|| -> anyhow::Result<Outcome> {
            let out = cachesim::sim::simulate(&l2.w, &cfg, keep)?;
            cachesim::commands::run::stage_files(args, &cfg, &l2.w, &out)?.commit()?;
            Ok(out)
        })
        .map_err(from_anyhow)?;
    Ok(NativeResult { loaded, cfg, out, kept_steps: keep.steps, kept_tokens: keep.tokens, notes })
}

/// Runs the command `name` (`plan`, `calibrate`, `validate`, …) with `kwargs` as its flags,
/// through the command line's own code (`cachesim::commands::execute`), and returns what it
/// printed: the same document the binary writes to stdout.
#[pyfunction]
#[pyo3(signature = (name, kwargs))]
pub fn command(py: Python<'_>, name: &str, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    let top = <cachesim::cli::Cli as clap::CommandFactory>::command();
    let Some(sub) = top.find_subcommand(name) else {
        return Err(PyTypeError::new_err(format!("no command `{name}`")));
    };
    let words = flags::words(sub, kwargs, name)?;
    let mut argv: Vec<std::ffi::OsString> = vec!["cachesim".into(), name.into()];
    argv.extend(flags::flat(&words).into_iter().map(std::ffi::OsString::from));
    let mut buf = Vec::new();
    let answer = py.detach(|| cachesim::commands::execute(argv)).map_err(|f| match f {
        cachesim::commands::Failure::Run(e) => from_anyhow(e),
        f => Error::new_err(f.text()),
    })?;
    // As the binary: the document, then the notes on stderr, then the failure.
    let (notes, failed) = py.detach(|| answer.write(&mut buf)).map_err(from_anyhow)?;
    for line in notes {
        eprintln!("{line}");
    }
    if let Some(e) = failed {
        return Err(from_anyhow(e));
    }
    String::from_utf8(buf).map_err(|e| Error::new_err(e.to_string()))
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
    let specs = args.cache.specs().map_err(|e| to_py(e, None))?;
    let opts = cachesim::replay::ReplayOptions { inflight: args.cache.inflight as usize };
    let results = py.detach(|| cachesim::replay::replay_all(w, &specs, opts, &|| ()));
    py_json(py, &cachesim::report::CacheReport { trace: &w.info, results: &results })
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
    let keep = cachesim::sim::Keep { steps: keep_steps, ..cachesim::sim::Keep::default() };
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
