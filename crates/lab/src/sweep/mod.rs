//! Configuration sweeps (`cachesim sweep`): a grid of run-flag values (`--grid FLAG=v1,v2`,
//! integer ranges `a..b:step`, zipped lists), expanded in a fixed order into points; each point
//! is a full simulation of one shared [`Workload`] under its own resolved [`RunConfig`], run in
//! parallel with rayon and returned in grid order, so results do not depend on the thread count.
//! A point the engine refuses, or where every request fails, becomes a row carrying the reason.
//! Ranking, the CSV file (written atomically) and the merge of sharded CSVs live in
//! [`output`]; what identifies the sweep a shard belongs to, in [`identity`]. Flag names are resolved against the CLI by the binary; the library only sees
//! `(knob, value)` pairs.

pub mod compare;
pub mod file;
pub mod heatmap;
pub mod identity;
pub mod output;

use cachesim_core::config::RunConfig;
use cachesim_core::error::{Error, Result};
use cachesim_core::metrics::Summary;
use cachesim_core::workload::Workload;
use rayon::prelude::*;

/// One grid axis: a run flag (long name, no dashes) and its values, as the user wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    pub knob: String,
    pub values: Vec<String>,
}

/// One grid point: `(knob, value)` for every axis, in axis order.
pub type Point = Vec<(String, String)>;

/// Parses `FLAG=v1,v2,…`; each item may be an integer range `a..b` or `a..b:step` (b included).
pub fn parse_axis(s: &str) -> Result<Axis> {
    let (knob, list) = s
        .split_once('=')
        .ok_or_else(|| Error::invalid("--grid", format!("`{s}` is not FLAG=v1,v2,… (e.g. max-num-seqs=16,32)")))?;
    let knob = knob.trim().trim_start_matches('-').to_string();
    if knob.is_empty() {
        return Err(Error::invalid("--grid", format!("`{s}` names no flag")));
    }
    let mut values = Vec::new();
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(Error::invalid("--grid", format!("`{s}` has an empty value")));
        }
        match item.split_once("..") {
            Some((a, rest)) => values.extend(expand_range(s, a, rest)?),
            None => values.push(item.to_string()),
        }
    }
    Ok(Axis { knob, values })
}

/// At most this many values per axis: a typo like `1..1000000000` must not exhaust memory.
pub const MAX_AXIS_VALUES: u64 = 1_000_000;

fn expand_range(s: &str, a: &str, rest: &str) -> Result<Vec<String>> {
    let bad = |why: &str| Error::invalid("--grid", format!("`{s}`: {why} (ranges are integer a..b or a..b:step)"));
    let (b, step) = match rest.split_once(':') {
        Some((b, step)) => (b, step),
        None => (rest, "1"),
    };
    let parse = |t: &str| t.trim().parse::<i64>().map_err(|_| bad(&format!("`{t}` is not an integer")));
    let (a, b, step) = (parse(a)?, parse(b)?, parse(step)?);
    if step <= 0 {
        return Err(bad("the step must be positive"));
    }
    if b < a {
        return Err(bad("the range is empty"));
    }
    let n = (b as i128 - a as i128) / step as i128 + 1;
    if n > MAX_AXIS_VALUES as i128 {
        return Err(bad(&format!("more than {MAX_AXIS_VALUES} values")));
    }
    Ok((0..n as i64).map(|k| (a + k * step).to_string()).collect())
}

/// The points of a sweep: the cartesian product of `grid` axes (the first varies slowest), then,
/// as one more axis, the `zip` axes taken together (all of equal length, value k of each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grid {
    pub axes: Vec<Axis>,
    pub zip: Vec<Axis>,
}

impl Grid {
    /// Knob names in column order; refuses a knob named twice.
    pub fn knobs(&self) -> Result<Vec<String>> {
        let knobs: Vec<String> = self.axes.iter().chain(&self.zip).map(|a| a.knob.clone()).collect();
        for (i, k) in knobs.iter().enumerate() {
            if knobs[..i].contains(k) {
                return Err(Error::invalid("--grid", format!("`{k}` is named twice")));
            }
        }
        Ok(knobs)
    }

    /// Every point in grid order (one empty point for an empty grid: the base run).
    pub fn points(&self) -> Result<Vec<Point>> {
        self.knobs()?;
        if let Some(first) = self.zip.first() {
            if let Some(a) = self.zip.iter().find(|a| a.values.len() != first.values.len()) {
                return Err(Error::invalid(
                    "--zip",
                    format!(
                        "zipped lists differ in length: {} has {}, {} has {}",
                        first.knob,
                        first.values.len(),
                        a.knob,
                        a.values.len()
                    ),
                ));
            }
        }
        let mut groups: Vec<Vec<Point>> =
            self.axes.iter().map(|a| a.values.iter().map(|v| vec![(a.knob.clone(), v.clone())]).collect()).collect();
        if let Some(first) = self.zip.first() {
            let zipped = (0..first.values.len())
                .map(|k| self.zip.iter().map(|a| (a.knob.clone(), a.values[k].clone())).collect());
            groups.push(zipped.collect());
        }
        let total = groups.iter().try_fold(1u64, |n, g| n.checked_mul(g.len() as u64));
        if total.is_none_or(|n| n > MAX_AXIS_VALUES) {
            return Err(Error::invalid("--grid", format!("more than {MAX_AXIS_VALUES} points")));
        }
        let mut points: Vec<Point> = vec![Vec::new()];
        for g in groups {
            points = points.iter().flat_map(|p| g.iter().map(move |q| [p.clone(), q.clone()].concat())).collect();
        }
        Ok(points)
    }
}

/// `--shard I/N`: the I-th (0-based) of N disjoint slices; point k belongs to slice k mod N, so
/// every slice gets a mix of the grid and a missing slice leaves gaps a merge detects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Whether grid point `point` is in this slice.
    pub fn contains(&self, point: usize) -> bool {
        point % self.count == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("`{s}` is not a shard I/N with 0 <= I < N (e.g. 0/4 … 3/4)");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) =
            (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// One simulated point: its grid index, knobs, and the summary or why there is none.
#[derive(Debug, Clone)]
pub struct Row {
    pub point: usize,
    pub knobs: Point,
    pub outcome: std::result::Result<Summary, String>,
    /// What makes its error bars ([`crate::trust`]); `None` for a point read back from a CSV or
    /// one that was refused.
    pub near: Option<crate::trust::Near>,
}

/// Simulates one configuration; refusals and runs where every request failed become `Err`.
pub fn run_point(w: &Workload, cfg: &Result<RunConfig>) -> std::result::Result<Summary, String> {
    let cfg = cfg.as_ref().map_err(|e| e.to_string())?;
    let out = cachesim_core::sim::simulate(w, cfg, cachesim_core::sim::Keep::default()).map_err(|e| e.to_string())?;
    if out.sent > 0 && out.summary.completed == 0 {
        let why: Vec<String> =
            out.sim.failures.iter().map(|(r, (n, msg))| format!("{n} {}: {msg}", r.label())).collect();
        return Err(format!("all {} requests failed ({})", out.sent, why.join("; ")));
    }
    Ok(out.summary)
}

/// Runs every `(point, knobs, config)` in parallel over the shared workload; rows come back in
/// the order given, whatever the thread count. `tick` is called once per finished point.
pub fn run_all(w: &Workload, points: Vec<(usize, Point, Result<RunConfig>)>, tick: &(dyn Fn() + Sync)) -> Vec<Row> {
    points
        .into_par_iter()
        .map(|(point, knobs, cfg)| {
            let outcome = run_point(w, &cfg);
            tick();
            Row { point, knobs, outcome, near: cfg.as_ref().ok().map(|c| crate::trust::Near::of(c, w)) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_ranges() {
        let a = parse_axis("--max-num-batched-tokens=2048..8192:2048,512").unwrap();
        assert_eq!(a.knob, "max-num-batched-tokens");
        assert_eq!(a.values, ["2048", "4096", "6144", "8192", "512"]);
        assert_eq!(parse_axis("tp=1..3").unwrap().values, ["1", "2", "3"]);
        assert_eq!(parse_axis("gpu=h100-sxm,a100-80gb").unwrap().values, ["h100-sxm", "a100-80gb"]);
        for bad in ["tp", "=1", "tp=", "tp=1,,2", "tp=3..1", "tp=1..4:0", "tp=a..4", "tp=1..1000000000"] {
            assert!(parse_axis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn product_then_zip_in_fixed_order() {
        let g = Grid {
            axes: vec![parse_axis("a=1,2").unwrap(), parse_axis("b=x,y,z").unwrap()],
            zip: vec![parse_axis("c=5,6").unwrap(), parse_axis("d=7,8").unwrap()],
        };
        let p = g.points().unwrap();
        assert_eq!(p.len(), 12);
        let flat = |p: &Point| p.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join(" ");
        assert_eq!(flat(&p[0]), "1 x 5 7");
        assert_eq!(flat(&p[1]), "1 x 6 8");
        assert_eq!(flat(&p[2]), "1 y 5 7");
        assert_eq!(flat(&p[11]), "2 z 6 8");
        assert_eq!(Grid::default().points().unwrap(), vec![Vec::new()]);
        let uneven = Grid { axes: vec![], zip: vec![parse_axis("c=5,6").unwrap(), parse_axis("d=7").unwrap()] };
        assert!(uneven.points().is_err());
        let twice = Grid { axes: vec![parse_axis("a=1").unwrap(), parse_axis("a=2").unwrap()], zip: vec![] };
        assert!(twice.points().is_err());
    }

    #[test]
    fn shards_partition() {
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!((0..7).filter(|&k| s.contains(k)).collect::<Vec<_>>(), [1, 4]);
        for bad in ["3/3", "0/0", "1", "a/2", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
