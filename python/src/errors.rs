//! The package's exceptions: `cachesim.Error` (a `ValueError`) for anything the command line
//! would refuse, `TraceError` for a trace that cannot be read (with `path`, `line` and `field`
//! attributes where the library knows them) and `StartupRefused` for a configuration the engine
//! itself would refuse at start-up. Each carries the command line's message.

use pyo3::prelude::*;

pyo3::create_exception!(
    _native,
    Error,
    pyo3::exceptions::PyValueError,
    "What the cachesim command line would refuse, with its message."
);
pyo3::create_exception!(
    _native,
    TraceError,
    Error,
    "A trace that cannot be read: attributes path, line (or None), field (or None)."
);
pyo3::create_exception!(cachesim, StartupRefused, Error, "A configuration the engine itself would refuse at start-up.");

/// The Python exception of a library error, its message prefixed by `context` as the command
/// line prints it (`cannot load the trace: …`).
pub fn to_py(e: cachesim::Error, context: Option<&str>) -> PyErr {
    let msg = match context {
        Some(c) => format!("{c}: {e}"),
        None => e.to_string(),
    };
    typed(&e, msg)
}

/// The Python exception for `e`, with the message `msg`.
fn typed(e: &cachesim::Error, msg: String) -> PyErr {
    Python::attach(|py| {
        let (err, path, line, field) = match e {
            cachesim::Error::Record { path, error } => {
                let line = match error.location {
                    cachesim::error::Location::Line(l) => Some(l),
                    cachesim::error::Location::Offset { .. } => None,
                };
                let field = (!error.field.is_empty() && error.field != ".").then(|| error.field.clone());
                (TraceError::new_err(msg), Some(path.clone()), line, field)
            }
            cachesim::Error::Io { path, .. }
            | cachesim::Error::UnknownFormat { path, .. }
            | cachesim::Error::NotText { path, .. }
            | cachesim::Error::EmptyTrace { path, .. } => (TraceError::new_err(msg), Some(path.clone()), None, None),
            cachesim::Error::StartupRefused { .. } => (StartupRefused::new_err(msg), None, None, None),
            _ => (Error::new_err(msg), None, None, None),
        };
        if let Some(p) = path {
            let v = err.value(py);
            let _ = v.setattr("path", p.display().to_string());
            let _ = v.setattr("line", line);
            let _ = v.setattr("field", field);
        }
        err
    })
}

/// The Python exception of a command's error, with the command line's message: typed by the
/// library error it carries, else a plain `cachesim.Error`.
pub fn from_anyhow(e: anyhow::Error) -> PyErr {
    let msg = cachesim::commands::error_text(&e);
    match e.downcast_ref::<cachesim::Error>() {
        Some(inner) => typed(inner, msg),
        None => Error::new_err(msg),
    }
}
