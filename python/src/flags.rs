//! Keyword arguments → the words of a command line, parsed by the command line's own clap
//! definitions (`cachesim::cli`), so the Python functions take exactly the flags of `cachesim
//! run` and `cache` with their names, defaults and checks: `max_num_seqs=64` is
//! `--max-num-seqs=64`, `enable_chunked_prefill=True` is `--enable-chunked-prefill`, `None`
//! leaves a flag at its default and a list is a comma-separated value.

use crate::errors::Error as PyCachesimError;
use cachesim::cli::{CacheArgs, RunArgs, TraceArgs};
use clap::{Args, CommandFactory, FromArgMatches, Parser};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};
use std::sync::{Arc, Mutex, OnceLock};

/// `cachesim run`'s flags alone.
#[derive(Debug, Parser)]
#[command(name = "cachesim run", no_binary_name = true)]
pub struct RunCli {
    #[command(flatten)]
    pub run: RunArgs,
}

/// `cachesim cache`'s flags alone.
#[derive(Debug, Parser)]
#[command(name = "cachesim cache", no_binary_name = true)]
pub struct CacheCli {
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// One flag given: its clap id and its words (`--long=value`, `--long`, or none for `False`).
pub type Word = (String, Vec<String>);

/// The ids of the flags that say how the trace is read and tokenised.
pub fn trace_ids() -> &'static [String] {
    static IDS: OnceLock<Vec<String>> = OnceLock::new();
    IDS.get_or_init(|| {
        TraceArgs::augment_args(clap::Command::new("trace")).get_arguments().map(|a| a.get_id().to_string()).collect()
    })
}

/// Whether the flag `id` among `words` says how the workload is built: a trace flag,
/// `report_style` (its client's sample), `priority_mix`, or `lora_modules` and
/// `lora_assignment`, with the `seed` of their draws.
pub fn builds_workload(id: &str, words: &[Word]) -> bool {
    const DRAWS: [&str; 3] = ["priority_mix", "lora_modules", "lora_assignment"];
    let draws = || words.iter().any(|(w, _)| DRAWS.contains(&w.as_str()));
    trace_ids().iter().any(|t| t == id) || id == "report_style" || DRAWS.contains(&id) || (id == "seed" && draws())
}

/// The argument `name` (a long name or alias, `_` or `-`) of `cmd`.
pub fn find<'c>(cmd: &'c clap::Command, name: &str) -> Option<&'c clap::Arg> {
    let name = name.trim_start_matches('-').replace('_', "-");
    cmd.get_arguments().find(|a| {
        a.get_long().is_some_and(|l| l == name) || a.get_all_aliases().is_some_and(|al| al.contains(&name.as_str()))
    })
}

/// The text of one value: `os.fspath` of a path, items joined by commas for a list, `str()`
/// otherwise (Python's `str` of a float round-trips exactly).
pub fn value_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: PyResult<Vec<String>> = v.try_iter()?.map(|x| value_text(&x?)).collect();
        return Ok(items?.join(","));
    }
    if v.hasattr("__fspath__")? {
        let os = v.py().import("os")?;
        return os.call_method1("fspath", (v,))?.str()?.extract();
    }
    v.str()?.extract()
}

/// The words of one flag `key=v` of `cmd`; `what` names the Python function in errors.
pub fn word(cmd: &clap::Command, key: &str, v: &Bound<'_, PyAny>, what: &str) -> PyResult<Word> {
    let arg = find(cmd, key).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{what}() got an unexpected keyword argument '{key}': `--{}` is not a flag of `{}` (see {} --help)",
            key.replace('_', "-"),
            cmd.get_name(),
            cmd.get_name()
        ))
    })?;
    let long = arg.get_long().unwrap_or(arg.get_id().as_str());
    let words = if arg.get_action().takes_values() {
        vec![format!("--{long}={}", value_text(v)?)]
    } else {
        let on: bool = v
            .cast::<PyBool>()
            .map_err(|_| {
                PyTypeError::new_err(format!("{what}(): '{key}' is a switch (`--{long}`): pass True or False"))
            })?
            .is_true();
        if on {
            vec![format!("--{long}")]
        } else {
            Vec::new()
        }
    };
    Ok((arg.get_id().to_string(), words))
}

/// The words of every keyword argument that is not `None`, in the order given.
pub fn words(cmd: &clap::Command, kwargs: Option<&Bound<'_, PyDict>>, what: &str) -> PyResult<Vec<Word>> {
    let mut out = Vec::new();
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            if v.is_none() {
                continue;
            }
            let key: String = k.extract()?;
            out.push(word(cmd, &key, &v, what)?);
        }
    }
    Ok(out)
}

/// Parses `argv` with `cmd` as `T`; clap's message (its first line) becomes the exception's.
pub fn parse<T: FromArgMatches>(cmd: &clap::Command, argv: &[String]) -> Result<T, String> {
    let first = |e: clap::Error| {
        let text = e.to_string();
        text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
    };
    let m = cmd.clone().try_get_matches_from(argv).map_err(first)?;
    T::from_arg_matches(&m).map_err(first)
}

/// The last `cachesim run` command lines parsed, most recent last: a notebook or a benchmark
/// loop repeats the same flags, and clap's parse costs more than a small simulation's setup.
static RUN_PARSES: Mutex<Vec<(Vec<String>, Arc<RunCli>)>> = Mutex::new(Vec::new());
/// How many parses [`RUN_PARSES`] keeps.
const KEEP_PARSES: usize = 16;

/// [`parse`] of `cachesim run`'s flags, remembering the last few command lines.
pub fn parse_run(argv: &[String]) -> Result<Arc<RunCli>, String> {
    if let Ok(cache) = RUN_PARSES.lock() {
        if let Some((_, hit)) = cache.iter().find(|(a, _)| a.as_slice() == argv) {
            return Ok(hit.clone());
        }
    }
    let parsed = Arc::new(parse::<RunCli>(run_command(), argv)?);
    if let Ok(mut cache) = RUN_PARSES.lock() {
        cache.push((argv.to_vec(), parsed.clone()));
        if cache.len() > KEEP_PARSES {
            cache.remove(0);
        }
    }
    Ok(parsed)
}

/// [`parse_run`] raising `cachesim.Error`.
pub fn parse_run_py(argv: &[String]) -> PyResult<Arc<RunCli>> {
    parse_run(argv).map_err(PyCachesimError::new_err)
}

/// [`parse`] raising `cachesim.Error`.
pub fn parse_py<T: FromArgMatches>(cmd: &clap::Command, argv: &[String]) -> PyResult<T> {
    parse(cmd, argv).map_err(PyCachesimError::new_err)
}

/// The flattened words.
pub fn flat(words: &[Word]) -> Vec<String> {
    words.iter().flat_map(|(_, w)| w.iter().cloned()).collect()
}

/// `cachesim run`'s command, built once per process (parsing clones it).
pub fn run_command() -> &'static clap::Command {
    static CMD: OnceLock<clap::Command> = OnceLock::new();
    CMD.get_or_init(RunCli::command)
}

/// `cachesim cache`'s command.
pub fn cache_command() -> &'static clap::Command {
    static CMD: OnceLock<clap::Command> = OnceLock::new();
    CMD.get_or_init(CacheCli::command)
}

/// Every long flag of `cachesim run`, as `cachesim run --help` lists them (for the parity test).
#[pyfunction]
pub fn run_flags() -> Vec<String> {
    run_command().get_arguments().filter_map(|a| a.get_long().map(String::from)).collect()
}

/// The keyword names of the flags that say how the trace is read (they belong to a Workload).
#[pyfunction]
pub fn trace_flags() -> Vec<String> {
    let cmd = run_command();
    trace_ids()
        .iter()
        .filter_map(|id| cmd.get_arguments().find(|a| a.get_id() == id.as_str()))
        .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
        .collect()
}
