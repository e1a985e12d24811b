//! `cachesim.sweep`'s native half: the grid (dict of flag → values) expanded by the library's
//! [`cachesim::sweep::Grid`] in its fixed order, every point's flags parsed as `cachesim run`
//! parses them (the base flags with the point's replacing them, as `cachesim sweep` does), the
//! points simulated by [`cachesim::sweep::run_all`] over one shared workload, and the rows ranked
//! by [`cachesim::sweep::output::rank`] with the command line's table. Rows cross into Python as
//! plain dicts — `{"point", "knobs", "metrics", "error"}` — so that a remote worker's rows (Ray)
//! rank exactly as local ones: the metrics go back into a `Summary` value for value.

use crate::convert::{json_value, py_value};
use crate::errors::{to_py, Error};
use crate::flags::{self, Word};
use crate::run::run_argv;
use crate::workload::{Loaded, NativeWorkload};
use cachesim::sweep::{output, Axis, Grid, Point, Row};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A grid point with its index in the grid.
type IndexedPoint = (usize, Point);

/// Run flags a grid may not name: they change the shared workload or name per-run outputs.
const NOT_IN_GRID: [&str; 5] = ["json", "requests_csv", "timeline_csv", "token_times_csv", "plot"];

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

/// The run arguments of one point over `loaded`: the base words less those the point sets,
/// then the point's (a switch's `false` leaves it off).
fn point_args(loaded: &Loaded, base: &[Word], point: &Point) -> Result<cachesim::cli::RunArgs, String> {
    let cmd = flags::run_command();
    let mut set: Vec<String> = Vec::new();
    let mut extra: Vec<String> = Vec::new();
    for (knob, value) in point {
        let arg = flags::find(cmd, knob).ok_or_else(|| format!("`{knob}` is not a flag of `cachesim run`"))?;
        set.push(arg.get_id().to_string());
        if arg.get_action().takes_values() {
            extra.push(format!("--{knob}={value}"));
        } else {
            match value.as_str() {
                "true" | "True" | "on" | "1" | "yes" => extra.push(format!("--{knob}")),
                "false" | "False" | "off" | "0" | "no" => {}
                _ => return Err(format!("--grid {knob}: `{value}` is not true or false (the flag takes no value)")),
            }
        }
    }
    let kept: Vec<Word> = base.iter().filter(|(id, _)| !set.contains(id)).cloned().collect();
    let mut argv = run_argv(loaded, &kept);
    argv.extend(extra);
    let described = point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    flags::parse::<flags::RunCli>(cmd, &argv).map(|c| c.run).map_err(|e| format!("grid point {described}: {e}"))
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
    let cmd = flags::run_command();
    let trace_ids = flags::trace_ids();
    let base = base_words(kwargs)?;
    let to_axes = |list: &[(String, Vec<String>)]| -> PyResult<Vec<Axis>> {
        let mut out = Vec::new();
        for (knob, values) in list {
            if let Some(v) = values.iter().find(|v| v.contains(',')) {
                return Err(Error::new_err(format!(
                    "grid {knob}: the value `{v}` holds a comma; give one value per item"
                )));
            }
            let mut axis =
                cachesim::sweep::parse_axis(&format!("{knob}={}", values.join(","))).map_err(|e| to_py(e, None))?;
            let arg = flags::find(cmd, &axis.knob).ok_or_else(|| {
                Error::new_err(format!("--grid: `{knob}` is not a flag of `cachesim run` (see cachesim run --help)"))
            })?;
            let id = arg.get_id().to_string();
            if trace_ids.contains(&id) {
                return Err(Error::new_err(format!(
                    "--grid: `{knob}` changes how the trace is read, and a sweep reads it once; run one sweep per value"
                )));
            }
            if NOT_IN_GRID.contains(&id.as_str()) {
                return Err(Error::new_err(format!("--grid: `{knob}` cannot vary across the points of this command")));
            }
            axis.knob = arg.get_long().unwrap_or(&id).to_string();
            out.push(axis);
        }
        Ok(out)
    };
    let grid = Grid { axes: to_axes(&axes)?, zip: to_axes(&zip)? };
    let knobs = grid.knobs().map_err(|e| to_py(e, None))?;
    let loaded = &workload.inner;
    let mut points = Vec::new();
    for (k, p) in grid.points().map_err(|e| to_py(e, None))?.into_iter().enumerate() {
        let args = point_args(loaded, &base, &p).map_err(Error::new_err)?;
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
    let mut jobs = Vec::new();
    for (k, p) in points {
        let args = point_args(&loaded, &base, &p).map_err(Error::new_err)?;
        jobs.push((k, p, cachesim::config::resolve(&args.options())));
    }
    let rows = py.detach(|| cachesim::sweep::run_all(&loaded.w, jobs, &|| ()));
    let items: PyResult<Vec<Py<PyAny>>> = rows.iter().map(|r| row_dict(py, r)).collect();
    Ok(PyList::new(py, items?)?.into_any().unbind())
}

/// Ranks rows (dicts from [`sweep_run`], in grid order) as `cachesim sweep --rank-by` does.
/// Returns (ascending, row indices best first, the command line's ranked table, metric keys).
#[pyfunction]
#[pyo3(signature = (rows, rank_by, ascending))]
pub fn sweep_rank(
    rows: &Bound<'_, PyList>,
    rank_by: &str,
    ascending: Option<bool>,
) -> PyResult<(bool, Vec<usize>, String, Vec<String>)> {
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
        parsed.push(Row { point, knobs, outcome });
    }
    let order = output::rank(&parsed, rank_by, ascending);
    let table = output::table(&parsed, &order);
    Ok((ascending, order, table, output::metric_keys()))
}

/// Checks `rank_by` names a metric (before any point is run).
#[pyfunction]
pub fn check_metric(rank_by: &str) -> PyResult<()> {
    output::check_metric(rank_by).map_err(|e| to_py(e, None))
}
