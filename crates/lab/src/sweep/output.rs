//! What a sweep prints and writes: the sglang JSON metric keys of a [`Summary`] in their report
//! order, the ranking (`--rank-by`, stable ties), the ranked text table, the CSV rows (one per
//! point in grid order: `point`, the knobs, the metric keys, `error`), written atomically, and
//! the merge of sharded CSVs into exactly the bytes of the unsharded file.

use super::Row;
use cachesim_core::error::{Error, Result};
use cachesim_core::metrics::Summary;
use serde::de::{MapAccess, Visitor};
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// `(key, value)` of a summary's JSON keys, in the order `cachesim run --json` writes them.
pub fn metrics(s: &Summary) -> Vec<(String, serde_json::Value)> {
    struct Ordered;
    impl<'de> Visitor<'de> for Ordered {
        type Value = Vec<(String, serde_json::Value)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(kv) = m.next_entry()? {
                out.push(kv);
            }
            Ok(out)
        }
    }
    let text = serde_json::to_string(s).expect("a summary serialises");
    let mut de = serde_json::Deserializer::from_str(&text);
    serde::Deserializer::deserialize_map(&mut de, Ordered).expect("a summary is a JSON object")
}

/// The metric keys, in report order.
pub fn metric_keys() -> Vec<String> {
    let empty = Summary::new(&[], 0, &mut cachesim_core::metrics::TokenLog::default());
    metrics(&empty).into_iter().map(|(k, _)| k).collect()
}

/// One metric of a summary as a number; `None` for an unknown key.
pub fn metric(s: &Summary, key: &str) -> Option<f64> {
    metric_in(&metrics(s), key)
}

/// One metric of [`metrics`]' list as a number; `None` for an unknown key.
fn metric_in(all: &[(String, serde_json::Value)], key: &str) -> Option<f64> {
    all.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_f64())
}

/// Checks `key` is a metric key, naming the valid ones otherwise.
pub fn check_metric(key: &str) -> Result<()> {
    let keys = metric_keys();
    if keys.iter().any(|k| k == key) {
        Ok(())
    } else {
        Err(Error::invalid("--rank-by", format!("unknown metric `{key}`; expected one of {}", keys.join(", "))))
    }
}

/// Whether smaller is better for `key`: latencies, durations, failures and preemptions.
pub fn smaller_is_better(key: &str) -> bool {
    key.ends_with("_ms") || matches!(key, "duration" | "failed" | "preemptions")
}

/// The table's metric columns, which also break ties in this order.
pub const TABLE_METRICS: [&str; 3] = ["output_throughput", "median_ttft_ms", "request_throughput"];

/// Row indices best first: by `key` (`ascending` or not), ties by the table metrics in their
/// own better direction, then grid order. Failed points come last, in grid order.
pub fn rank(rows: &[Row], key: &str, ascending: bool) -> Vec<usize> {
    let mut keys: Vec<(&str, bool)> = vec![(key, ascending)];
    keys.extend(TABLE_METRICS.iter().filter(|m| **m != key).map(|m| (*m, smaller_is_better(m))));
    let values: Vec<Option<Vec<f64>>> = rows
        .iter()
        .map(|r| {
            r.outcome.as_ref().ok().map(|s| {
                let all = metrics(s);
                keys.iter().map(|(k, _)| metric_in(&all, k).unwrap_or(f64::NAN)).collect()
            })
        })
        .collect();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| match (&values[a], &values[b]) {
        (Some(x), Some(y)) => keys
            .iter()
            .zip(x.iter().zip(y))
            .map(|((_, asc), (p, q))| if *asc { p.total_cmp(q) } else { q.total_cmp(p) })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
            .then(rows[a].point.cmp(&rows[b].point)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => rows[a].point.cmp(&rows[b].point),
    });
    order
}

/// Per row (in `rows`' order), whether its error bar on `rank_by` ([`crate::trust::bar`])
/// overlaps the best point's (`order[0]`): the two cannot be told apart at the accuracy cachesim
/// had on the measured runs nearest to them. `None` where either has no bar: a failed point, a
/// point read back from a CSV, a metric the residual table does not hold.
pub fn within_error_of_best(rows: &[Row], order: &[usize], rank_by: &str) -> Vec<Option<bool>> {
    let bars: Vec<Option<crate::trust::Bar>> = rows
        .iter()
        .map(|r| {
            let (Ok(s), Some(near)) = (&r.outcome, &r.near) else { return None };
            crate::trust::bar(crate::trust::table(), near, rank_by, metric(s, rank_by)?)
        })
        .collect();
    let best = order.first().and_then(|&i| bars[i].as_ref());
    bars.iter().map(|b| Some(b.as_ref()?.overlaps(best?))).collect()
}

/// The ranked table: rank, grid point, knobs, output tok/s, median TTFT, req/s, failed requests,
/// the metric it is ranked by (`rank_by`) when that is none of these, and when the points have
/// error bars on it, `near #1` ([`within_error_of_best`]); a failed point shows its reason.
pub fn table(rows: &[Row], order: &[usize], rank_by: &str) -> String {
    let near_best = within_error_of_best(rows, order, rank_by);
    let bars = near_best.iter().any(Option::is_some);
    let knobs: Vec<&str> = rows.first().map(|r| r.knobs.iter().map(|(k, _)| k.as_str()).collect()).unwrap_or_default();
    let extra = (!TABLE_METRICS.contains(&rank_by) && rank_by != "failed").then_some(rank_by);
    let mut head: Vec<String> = vec!["rank".into(), "point".into()];
    head.extend(knobs.iter().map(|k| k.to_string()));
    head.extend(["output tok/s", "median TTFT ms", "req/s", "failed"].map(String::from));
    head.extend(extra.map(String::from));
    if bars {
        head.push("near #1".into());
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut reasons: Vec<Option<String>> = Vec::new();
    for (rank, &i) in order.iter().enumerate() {
        let r = &rows[i];
        let mut cells = vec![(rank + 1).to_string(), r.point.to_string()];
        cells.extend(r.knobs.iter().map(|(_, v)| v.clone()));
        match &r.outcome {
            Ok(s) => {
                cells.extend([
                    format!("{:.1}", s.output_throughput),
                    format!("{:.1}", s.median_ttft_ms),
                    format!("{:.2}", s.request_throughput),
                    s.failed.to_string(),
                ]);
                cells.extend(extra.map(|k| metric(s, k).map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))));
                reasons.push(None);
            }
            Err(e) => {
                cells.extend(["-", "-", "-", "-"].map(String::from));
                cells.extend(extra.map(|_| "-".to_string()));
                reasons.push(Some(e.clone()));
            }
        }
        if bars {
            cells.push(
                match near_best[i] {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                }
                .to_string(),
            );
        }
        lines.push(cells);
    }
    let widths: Vec<usize> =
        (0..head.len()).map(|c| lines.iter().map(|l| l[c].len()).chain([head[c].len()]).max().unwrap_or(0)).collect();
    let fmt = |cells: &[String]| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        parts.join("  ")
    };
    let mut out = fmt(&head) + "\n";
    for (cells, why) in lines.iter().zip(reasons) {
        out += &fmt(cells);
        if let Some(why) = why {
            out += &format!("  failed: {why}");
        }
        out += "\n";
    }
    if bars {
        let n = near_best.iter().filter(|b| **b == Some(true)).count();
        out += &format!(
            "\nnear #1: {n} of {} points cannot be told apart from rank 1 on {rank_by}: their error bars (the middle 80 % of \
             cachesim's errors on the nearest measured runs, calibration/residuals.csv) overlap rank 1's. Points on one \
             deployment share much of their error, so this is the cautious reading.\n",
            rows.len()
        );
    }
    out
}

/// The CSV header and one record per row, in the order given: `point`, the knobs, the metric
/// keys (empty for a failed point), then `error` (empty for a simulated one).
pub fn csv_records(knobs: &[String], rows: &[Row]) -> (Vec<String>, Vec<Vec<String>>) {
    let keys = metric_keys();
    let mut header = vec!["point".to_string()];
    header.extend(knobs.iter().cloned());
    header.extend(keys.iter().cloned());
    header.push("error".into());
    let records = rows
        .iter()
        .map(|r| {
            let mut rec = vec![r.point.to_string()];
            rec.extend(r.knobs.iter().map(|(_, v)| v.clone()));
            match &r.outcome {
                Ok(s) => {
                    rec.extend(metrics(s).into_iter().map(|(_, v)| v.to_string()));
                    rec.push(String::new());
                }
                Err(e) => {
                    rec.extend(keys.iter().map(|_| String::new()));
                    rec.push(e.clone());
                }
            }
            rec
        })
        .collect();
    (header, records)
}

fn io_error(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Io { path: path.to_path_buf(), error: std::io::Error::other(e) }
}

/// Writes a CSV all or nothing ([`crate::output::Outputs`]: a temporary file beside `path`,
/// renamed over it once complete).
pub fn write_csv(path: &Path, header: &[String], records: &[Vec<String>]) -> Result<()> {
    let mut files = crate::output::Outputs::new();
    stage_csv(&mut files, path, header, records)?;
    files.commit()
}

/// Stages a CSV in `files`, to be written at their commit.
pub fn stage_csv(
    files: &mut crate::output::Outputs,
    path: &Path,
    header: &[String],
    records: &[Vec<String>],
) -> Result<()> {
    let tmp = files.stage(path)?;
    let mut w = csv::Writer::from_path(&tmp).map_err(|e| io_error(path, e))?;
    w.write_record(header).map_err(|e| io_error(path, e))?;
    for r in records {
        w.write_record(r).map_err(|e| io_error(path, e))?;
    }
    w.flush().map_err(|e| Error::Io { path: path.to_path_buf(), error: e })
}

/// Reads sharded sweep CSVs and returns the header and every record in grid order; refuses
/// shards of different sweeps, a slice given twice or missing (by their sidecars:
/// [`super::identity::check_shards`]), then columns that differ, a point present twice and a
/// gap in the points.
pub fn merge(paths: &[PathBuf]) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    super::identity::check_shards(paths)?;
    let mut header: Option<(Vec<String>, &Path)> = None;
    let mut records: Vec<(usize, Vec<String>)> = Vec::new();
    for path in paths {
        let mut r = csv::Reader::from_path(path).map_err(|e| io_error(path, e))?;
        let h: Vec<String> = r
            .headers()
            .map_err(|e| io_error(path, cachesim_core::messages::csv_error(&e, None)))?
            .iter()
            .map(String::from)
            .collect();
        if h.first().map(String::as_str) != Some("point") || h.last().map(String::as_str) != Some("error") {
            return Err(io_error(path, "not a sweep CSV (the first column is `point`, the last `error`)"));
        }
        match &header {
            Some((first, p)) if *first != h => {
                return Err(io_error(path, format!("its columns differ from {}'s: not the same sweep", p.display())))
            }
            Some(_) => {}
            None => header = Some((h.clone(), path)),
        }
        for (line, rec) in r.records().enumerate() {
            let rec = rec.map_err(|e| io_error(path, cachesim_core::messages::csv_error(&e, None)))?;
            let point = rec[0]
                .parse::<usize>()
                .map_err(|_| io_error(path, format!("record {}: `{}` is not a point index", line + 1, &rec[0])))?;
            records.push((point, rec.iter().map(String::from).collect()));
        }
    }
    let (header, _) = header.ok_or_else(|| Error::invalid("merge", "no CSV files given"))?;
    records.sort_by_key(|(p, _)| *p);
    for (k, (p, _)) in records.iter().enumerate() {
        match p.cmp(&k) {
            Ordering::Equal => {}
            Ordering::Less => {
                return Err(Error::invalid("merge", format!("point {p} appears twice (a shard given twice?)")))
            }
            Ordering::Greater => {
                return Err(Error::invalid("merge", format!("point {k} is missing (a shard missing or unfinished?)")))
            }
        }
    }
    Ok((header, records.into_iter().map(|(_, r)| r).collect()))
}

/// Spearman's rank correlation ρ of two equally long samples: Pearson's correlation of their
/// ranks, tied values sharing the mean of their ranks; `None` for fewer than two pairs, unequal
/// lengths or a sample whose values are all equal.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let ranks = |v: &[f64]| -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
        let mut r = vec![0.0; v.len()];
        let mut k = 0;
        while k < idx.len() {
            let mut e = k;
            while e + 1 < idx.len() && v[idx[e + 1]] == v[idx[k]] {
                e += 1;
            }
            for &i in &idx[k..=e] {
                r[i] = (k + e) as f64 / 2.0 + 1.0;
            }
            k = e + 1;
        }
        r
    };
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let (va, vb): (f64, f64) = (ra.iter().map(|x| (x - ma).powi(2)).sum(), rb.iter().map(|y| (y - mb).powi(2)).sum());
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

#[cfg(test)]
mod tests {
    use super::spearman;

    #[test]
    fn spearman_by_hand() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // Ranks (1, 2, 3, 4) against (2, 1, 4, 3): d² = 1 + 1 + 1 + 1 = 4, ρ = 1 − 6·4 / (4·15) = 0.6.
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[5.0, 1.0, 9.0, 7.0]).unwrap() - 0.6).abs() < 1e-12);
        // Ties share ranks: (1.5, 1.5, 3) against (1, 2, 3): ρ = 1.5 / √(1.5 · 2) = √3 / 2.
        assert!((spearman(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap() - 3f64.sqrt() / 2.0).abs() < 1e-12);
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
    }
}
