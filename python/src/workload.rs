//! A trace read and tokenised once ([`NativeWorkload`], `cachesim.Workload` in Python), shared
//! by every run, cache replay and sweep point that is handed it: the runs borrow the one
//! [`cachesim::workload::Workload`] behind an `Arc`, so its token store is never copied.
//!
//! Pickling (for Ray's object store) sends the trace's bytes (decompressed, as read) with the
//! trace flags, and the receiving process parses and tokenises them again — once per process:
//! the last workloads restored are kept, keyed by a hash of the bytes and flags, so the tasks of
//! one sweep that land on the same worker share one tokenisation. A workload read from a file
//! re-reads the file when pickled and refuses if its bytes changed since it was loaded.

use crate::errors::{to_py, Error};
use crate::flags::{self, Word};
use cachesim::workload::Workload;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where the trace's bytes come from.
#[derive(Debug)]
pub enum Source {
    /// The bundled sample.
    Sample,
    /// A file, re-read when pickled; `digest` of its bytes when loaded.
    File { path: PathBuf, digest: u64 },
    /// Bytes received by unpickling (kept to pickle again).
    Bytes { name: PathBuf, bytes: Arc<Vec<u8>>, digest: u64 },
}

/// A tokenised workload and what it was read with.
#[derive(Debug)]
pub struct Loaded {
    pub w: Workload,
    pub source: Source,
    /// The trace flags' words (without `--trace`), and `--report-style` if given.
    pub words: Vec<Word>,
    /// How the trace became requests (`BuildOptions` in Debug form), to compare with a run's.
    pub build_key: String,
}

fn digest(bytes: &[u8], words: &[String]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    words.hash(&mut h);
    h.finish()
}

impl Loaded {
    /// The words to put before a run's own so that it reads the trace as this workload did.
    pub fn argv(&self) -> Vec<String> {
        flags::flat(&self.words)
    }

    /// Reads and tokenises the trace `path` (the sample without one) with the run arguments
    /// `words` (only trace flags and `--report-style` matter), without the GIL.
    pub fn load(py: Python<'_>, path: Option<PathBuf>, words: Vec<Word>) -> PyResult<Self> {
        let mut argv = flags::flat(&words);
        if let Some(p) = &path {
            argv.push(format!("--trace={}", p.display()));
        }
        let args: flags::RunCli = flags::parse_py(flags::run_command(), &argv)?;
        let read = args.run.trace.read_options();
        let build = args.run.build_options();
        let build_key = format!("{build:?}");
        let loaded = py.detach(move || -> cachesim::Result<(Workload, Source)> {
            match path {
                None => Ok((cachesim::load_workload(None, &read, &build)?, Source::Sample)),
                Some(p) => {
                    let content = cachesim::trace::read_content(&p, read.max_bytes)?;
                    let d = digest(&content.bytes, &[]);
                    let file = cachesim::trace::parse_content(&p, &content, &read)?;
                    drop(content);
                    Ok((cachesim::workload::build(file, &build)?, Source::File { path: p, digest: d }))
                }
            }
        });
        let (w, source) = loaded.map_err(|e| to_py(e, Some("cannot load the trace")))?;
        Ok(Loaded { w, source, words, build_key })
    }

    /// The pickled state: (name, bytes or None for the sample, words).
    fn state(&self) -> cachesim::Result<State> {
        let words = self.argv();
        Ok(match &self.source {
            Source::Sample => (cachesim::SAMPLE_TRACE_NAME.to_string(), None, words),
            Source::File { path, digest: d } => {
                // The file was read once under its cap; its content is read again whole.
                let bytes = cachesim::trace::read_content(path, u64::MAX)?.bytes;
                if digest(&bytes, &[]) != *d {
                    return Err(cachesim::Error::Io {
                        path: path.clone(),
                        error: std::io::Error::other("the file changed since the Workload was loaded; load it again"),
                    });
                }
                (path.display().to_string(), Some(Arc::new(bytes)), words)
            }
            Source::Bytes { name, bytes, .. } => (name.display().to_string(), Some(bytes.clone()), words),
        })
    }
}

/// A workload's pickled form: (name, trace bytes or None for the sample, argv).
type State = (String, Option<Arc<Vec<u8>>>, Vec<String>);

/// The last workloads unpickled in this process (most recent last).
static RESTORED: Mutex<Vec<(u64, Arc<Loaded>)>> = Mutex::new(Vec::new());
/// How many unpickled workloads a process keeps.
const KEEP_RESTORED: usize = 2;

/// A trace read and tokenised once (the Python `cachesim.Workload` wraps it).
#[pyclass(frozen, module = "cachesim._native", name = "NativeWorkload")]
pub struct NativeWorkload {
    pub inner: Arc<Loaded>,
}

#[pymethods]
impl NativeWorkload {
    /// Reads `path` (None: the bundled sample) with the trace flags in `kwargs`.
    #[staticmethod]
    #[pyo3(signature = (path, kwargs))]
    fn load(py: Python<'_>, path: Option<PathBuf>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let cmd = flags::run_command();
        let words = flags::words(cmd, kwargs, "Workload.from_file")?;
        for (id, _) in &words {
            if id == "trace" {
                return Err(PyTypeError::new_err("Workload.from_file(): pass the trace as its first argument"));
            }
            if !flags::builds_workload(id, &words) {
                return Err(PyTypeError::new_err(format!(
                    "Workload.from_file() takes the flags that say how the trace is read ({}, report_style, priority_mix, lora_modules, lora_assignment and their seed); `{id}` is a flag of the run: pass it to run()",
                    flags::trace_flags().join(", ")
                )));
            }
        }
        Ok(NativeWorkload { inner: Arc::new(Loaded::load(py, path, words)?) })
    }

    /// Rebuilds a pickled workload (see the module's docs), reusing one already rebuilt here.
    #[staticmethod]
    fn restore(py: Python<'_>, name: PathBuf, data: Option<&Bound<'_, PyBytes>>, argv: Vec<String>) -> PyResult<Self> {
        let bytes: Option<Vec<u8>> = data.map(|b| b.as_bytes().to_vec());
        let key = digest(bytes.as_deref().unwrap_or(b""), &[vec![name.display().to_string()], argv.clone()].concat());
        if let Some((_, hit)) = RESTORED.lock().map_err(|_| Error::new_err("poisoned"))?.iter().find(|(k, _)| *k == key)
        {
            return Ok(NativeWorkload { inner: hit.clone() });
        }
        let cmd = flags::run_command();
        let words: Vec<Word> = argv
            .iter()
            .map(|w| {
                let name = w.trim_start_matches('-').split('=').next().unwrap_or("");
                let id = flags::find(cmd, name).map(|a| a.get_id().to_string()).unwrap_or_default();
                (id, vec![w.clone()])
            })
            .collect();
        let loaded = match bytes {
            None => Loaded::load(py, None, words)?,
            Some(bytes) => {
                let args: flags::RunCli = flags::parse_py(cmd, &argv)?;
                let read = args.run.trace.read_options();
                let build = args.run.build_options();
                let build_key = format!("{build:?}");
                let bytes = Arc::new(bytes);
                let b2 = bytes.clone();
                let n2 = name.clone();
                let w = py
                    .detach(move || cachesim::workload::build(cachesim::trace::parse(&n2, &b2, &read)?, &build))
                    .map_err(|e| to_py(e, Some("cannot load the trace")))?;
                let d = digest(&bytes, &[]);
                Loaded { w, source: Source::Bytes { name, bytes, digest: d }, words, build_key }
            }
        };
        let inner = Arc::new(loaded);
        let mut cache = RESTORED.lock().map_err(|_| Error::new_err("poisoned"))?;
        cache.push((key, inner.clone()));
        if cache.len() > KEEP_RESTORED {
            cache.remove(0);
        }
        Ok(NativeWorkload { inner })
    }

    /// (name, bytes or None, argv): what `restore` takes.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<(String, Option<Bound<'py, PyBytes>>, Vec<String>)> {
        let (name, bytes, argv) = self.inner.state().map_err(|e| to_py(e, Some("cannot pickle the Workload")))?;
        Ok((name, bytes.map(|b| PyBytes::new(py, &b)), argv))
    }

    /// What the workload was built from (the `trace` object of `cachesim run --json`).
    fn info(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::convert::py_json(py, &self.inner.w.info)
    }

    /// The trace flags it was read with, as keyword arguments' command-line words.
    fn argv(&self) -> Vec<String> {
        self.inner.argv()
    }

    /// The requests: prompt and output lengths, arrival (ms, if any), session.
    fn requests(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::convert::columns(py, &self.inner.w.requests)
    }

    fn __len__(&self) -> usize {
        self.inner.w.requests.len()
    }

    /// The trace's name in reports.
    #[getter]
    fn path(&self) -> String {
        self.inner.w.info.path.display().to_string()
    }
}
