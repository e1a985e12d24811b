//! Rust values → Python objects through their serde form: JSON documents become dicts (keys in
//! the order the command line's `--json` writes them), record lists become columns (a dict of
//! equal-length lists, which `pandas.DataFrame` takes as is).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;
use serde::Serialize;
use serde_json::Value;

/// A JSON value as the Python object `json.loads` would give.
pub fn py_value(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py_any(py)?,
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_py_any(py)?
            } else if let Some(i) = n.as_i64() {
                i.into_py_any(py)?
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_py_any(py)?
            }
        }
        Value::String(s) => s.into_py_any(py)?,
        Value::Array(a) => {
            let items: PyResult<Vec<Py<PyAny>>> = a.iter().map(|x| py_value(py, x)).collect();
            PyList::new(py, items?)?.into_any().unbind()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, py_value(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// `value` serialised, as a Python object.
pub fn py_json<T: Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    let v = serde_json::to_value(value).map_err(|e| crate::errors::Error::new_err(e.to_string()))?;
    py_value(py, &v)
}

/// Records as columns: field name → list of values, in field order (no rows: an empty dict).
pub fn columns<T: Serialize>(py: Python<'_>, rows: &[T]) -> PyResult<Py<PyAny>> {
    let mut names: Vec<String> = Vec::new();
    let mut cols: Vec<Vec<Py<PyAny>>> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let v = serde_json::to_value(r).map_err(|e| crate::errors::Error::new_err(e.to_string()))?;
        let Value::Object(o) = v else { continue };
        if i == 0 {
            names = o.keys().cloned().collect();
            cols = names.iter().map(|_| Vec::with_capacity(rows.len())).collect();
        }
        for (c, k) in names.iter().enumerate() {
            cols[c].push(py_value(py, o.get(k).unwrap_or(&Value::Null))?);
        }
    }
    let d = PyDict::new(py);
    for (k, c) in names.into_iter().zip(cols) {
        d.set_item(k, PyList::new(py, c)?)?;
    }
    Ok(d.into_any().unbind())
}

/// A Python object (dict, list, str, int, float, bool, None) as JSON.
pub fn json_value(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(u) = v.extract::<u64>() {
            return Ok(u.into());
        }
        return Ok(v.extract::<i64>()?.into());
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Ok(serde_json::Number::from_f64(f.value()).map(Value::Number).unwrap_or(Value::Null));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Value::String(s.extract::<String>()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut o = serde_json::Map::new();
        for (k, x) in d.iter() {
            o.insert(k.extract::<String>()?, json_value(&x)?);
        }
        return Ok(Value::Object(o));
    }
    let items: PyResult<Vec<Value>> = v.try_iter()?.map(|x| json_value(&x?)).collect();
    Ok(Value::Array(items?))
}
