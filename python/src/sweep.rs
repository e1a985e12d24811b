//! `cachesim.sweep`'s native half: the grid (dict of flag → values) checked and expanded as
//! `cachesim sweep` does it (`cachesim::commands::sweep::RunFlags`: its axis checks, the base
//! flags with the point's replacing them, parsed as `cachesim run` parses them), the
//! points simulated by [`cachesim::sweep::run_all`] over one shared workload, and the rows ranked
//! by [`cachesim::sweep::output::rank`] with the command line's table. Rows cross into Python as
//! plain dicts — `{"point", "knobs", "metrics", "error"}` — so that a remote worker's rows (Ray)
//! rank exactly as local ones: the metrics go back into a `Summary` value for value.

use crate::convert::{json_value, py_value};
use crate::errors::{to_py, Error};
use crate::flags::{self, Word};
use crate::workload::{Loaded, NativeWorkload};
use cachesim::commands::sweep::{RunFlags, NOT_IN_GRID};
use cachesim::sweep::{output, Axis, Grid, Point, Row};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A grid point with its index in the grid.
type IndexedPoint = (usize, Point);

/// The run flags of a sweep's base (kwargs), refusing trace flags (they belong to the workload).
fn base_words(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<Word>> {
    let words = flags::words(flags::run_command(), kwargs, "sweep")?;
    let ids = flags::trace_ids();
    if let Some((id, _)) = words.iter().find(|(id, _)| ids.contains(id)) {
        return Err(Error::new_err(format!("sweep(): `{id}` says how the trace is read: it belongs to the Workload")));
    }
    for (id, _) in &words {
        if NOT_IN_GRID.contains(&id.as_str()) && id != "json" {
            return Err(Error::new_err(format!(
                "sweep(): `{id}` writes one run's details; run the chosen point with run() for it"
            )));
        }
    }
    Ok(words)
}

/// The command line's sweep flags over `loaded` ([`crate::run::run_words`]), as `cachesim
/// sweep`'s base.
fn run_flags(loaded: &Loaded, base: &[Word]) -> RunFlags {
    RunFlags::from_words(crate::run::run_words(loaded, base))
}

/// Expands the grid: `axes` and `zip` as (flag, values as text; `a..b:step` ranges allowed).
/// Returns the knobs (long flag names) and every point (index, knobs and values) in grid order;
/// refuses what `cachesim sweep` refuses, with its messages.
#[pyfunction]
#[pyo3(signature = (workload, axes, zip, kwargs))]
pub fn sweep_points(
    workload: PyRef<'_, NativeWorkload>,
    axes: Vec<(String, Vec<String>)>,
    zip: Vec<(String, Vec<String>)>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<(Vec<String>, Vec<IndexedPoint>)> {
    let base = base_words(kwargs)?;
    let flags = run_flags(&workload.inner, &base);
    let to_axes = |list: &[(String, Vec<String>)]| -> PyResult<Vec<Axis>> {
        let mut out = Vec::new();
        for (knob, values) in list {
            if let Some(v) = values.iter().find(|v| v.contains(',')) {
                return Err(Error::new_err(format!(
                    "grid {knob}: the value `{v}` holds a comma; give one value per item"
                )));
            }
            let axis =
                cachesim::sweep::parse_axis(&format!("{knob}={}", values.join(","))).map_err(|e| to_py(e, None))?;
            out.push(flags.check_axis(axis, &[]).map_err(|e| Error::new_err(format!("--grid: {e}")))?);
        }
        Ok(out)
    };
    let grid = Grid { axes: to_axes(&axes)?, zip: to_axes(&zip)? };
    let knobs = grid.knobs().map_err(|e| to_py(e, None))?;
    let loaded = &workload.inner;
    let mut points = Vec::new();
    for (k, p) in grid.points().map_err(|e| to_py(e, None))?.into_iter().enumerate() {
        let args = flags.parse_point(&p).map_err(Error::new_err)?;
        if crate::run::check_build(loaded, &args.build_options()).is_err() {
            return Err(Error::new_err(format!(
                "--grid: {} changes how the trace becomes requests (the sweep tokenises it once); set it outside the grid",
                p.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        points.push((k, p));
    }
    Ok((knobs, points))
}

/// A row as the dict that crosses into Python (and back for ranking).
fn row_dict(py: Python<'_>, r: &Row) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item("point", r.point)?;
    d.set_item("knobs", r.knobs.clone())?;
    match &r.outcome {
        Ok(s) => {
            let m = PyDict::new(py);
            for (k, v) in output::metrics(s) {
                m.set_item(k, py_value(py, &v)?)?;
            }
            d.set_item("metrics", m)?;
            d.set_item("error", py.None())?;
        }
        Err(e) => {
            d.set_item("metrics", py.None())?;
            d.set_item("error", e)?;
        }
    }
    // What its error bars are drawn for: the ranked table's `near #1`, as the command line's.
    let near = serde_json::to_value(&r.near).map_err(|e| Error::new_err(format!("a sweep row: {e}")))?;
    d.set_item("near", py_value(py, &near)?)?;
    Ok(d.into_any().unbind())
}

/// Simulates `points` (from [`sweep_points`]) over `workload` with the base flags `kwargs`, in
/// parallel and without the GIL; rows in the order given.
#[pyfunction]
#[pyo3(signature = (workload, points, kwargs))]
pub fn sweep_run(
    py: Python<'_>,
    workload: PyRef<'_, NativeWorkload>,
    points: Vec<(usize, Point)>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let base = base_words(kwargs)?;
    let loaded = workload.inner.clone();
    let flags = run_flags(&loaded, &base);
    let mut jobs = Vec::new();
    for (k, p) in points {
        let args = flags.parse_point(&p).map_err(Error::new_err)?;
        jobs.push((k, p, cachesim::config::resolve(&args.options())));
    }
    let rows = py.detach(|| cachesim::sweep::run_all(&loaded.w, jobs, &|| ()));
    let items: PyResult<Vec<Py<PyAny>>> = rows.iter().map(|r| row_dict(py, r)).collect();
    Ok(PyList::new(py, items?)?.into_any().unbind())
}

/// What [`sweep_rank`] returns.
type Ranked = (bool, Vec<usize>, String, Vec<String>, Vec<Option<bool>>);

/// Ranks rows (dicts from [`sweep_run`], in grid order) as `cachesim sweep --rank-by` does.
/// Returns (ascending, row indices best first, the command line's ranked table, metric keys,
/// per row whether its error bar overlaps the best row's — `None` without bars).
#[pyfunction]
#[pyo3(signature = (rows, rank_by, ascending))]
pub fn sweep_rank(rows: &Bound<'_, PyList>, rank_by: &str, ascending: Option<bool>) -> PyResult<Ranked> {
    output::check_metric(rank_by).map_err(|e| to_py(e, None))?;
    let ascending = ascending.unwrap_or_else(|| output::smaller_is_better(rank_by));
    let mut parsed = Vec::new();
    for r in rows.iter() {
        let point: usize = r.get_item("point")?.extract()?;
        let knobs: Point = r.get_item("knobs")?.extract()?;
        let metrics = r.get_item("metrics")?;
        let outcome = if metrics.is_none() {
            Err(r.get_item("error")?.extract::<String>()?)
        } else {
            Ok(serde_json::from_value(json_value(&metrics)?)
                .map_err(|e| Error::new_err(format!("a sweep row: {e}")))?)
        };
        let near = match r.get_item("near") {
            Ok(v) => {
                serde_json::from_value(json_value(&v)?).map_err(|e| Error::new_err(format!("a sweep row: {e}")))?
            }
            Err(_) => None,
        };
        parsed.push(Row { point, knobs, outcome, near });
    }
    let order = output::rank(&parsed, rank_by, ascending);
    let table = output::table(&parsed, &order, rank_by);
    let near_best = output::within_error_of_best(&parsed, &order, rank_by);
    Ok((ascending, order, table, output::metric_keys(), near_best))
}

/// Checks `rank_by` names a metric (before any point is run).
#[pyfunction]
pub fn check_metric(rank_by: &str) -> PyResult<()> {
    output::check_metric(rank_by).map_err(|e| to_py(e, None))
}
