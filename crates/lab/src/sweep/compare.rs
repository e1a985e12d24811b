//! Measured against predicted (`cachesim sweep --compare real.csv`): a CSV of real benchmark
//! runs, one per row, whose columns name grid knobs (`max_num_seqs` or `max-num-seqs`) and
//! metrics (the `run --json` keys, or the seed's short names `output_tok_s`, `input_tok_s`,
//! `total_tok_s`); every other column is a label. Each real row is matched to the sweep point
//! with the same knob values (numbers compared as numbers); the answer pairs the real and the
//! predicted value of every metric and gives Spearman's rank correlation ρ per metric over the
//! rows, so a sweep can be checked to rank configurations as the real runs did.

use super::output::{metric, metric_keys, spearman};
use super::Row;
use cachesim_core::error::{Error, Location, RecordError, Result};
use std::path::Path;

/// One real run matched to its sweep point.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The label columns' values, joined by a space.
    pub label: String,
    /// The grid point's index.
    pub point: usize,
    /// Per metric (in [`Comparison::metrics`] order): (real, predicted; `None` if the point failed).
    pub values: Vec<(f64, Option<f64>)>,
}

/// Real runs against a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The metric keys compared.
    pub metrics: Vec<String>,
    pub pairs: Vec<Pair>,
    /// Spearman's ρ per metric over the pairs with a prediction; `None` when undefined.
    pub rho: Vec<Option<f64>>,
}

/// A seed-style column name as a metric key.
fn metric_key(column: &str, keys: &[String]) -> Option<String> {
    let c = column.trim();
    let alias = match c {
        "output_tok_s" => "output_throughput",
        "input_tok_s" => "input_throughput",
        "total_tok_s" => "total_throughput",
        other => other,
    };
    keys.iter().any(|k| k == alias).then(|| alias.to_string())
}

/// Whether two knob values are the same: equal text, or equal numbers.
fn same(a: &str, b: &str) -> bool {
    a.trim() == b.trim() || matches!((a.trim().parse::<f64>(), b.trim().parse::<f64>()), (Ok(x), Ok(y)) if x == y)
}

/// Reads `path` and matches its rows to `rows` (the sweep, every point present).
pub fn compare(path: &Path, rows: &[Row]) -> Result<Comparison> {
    let io = |e: csv::Error| Error::Io {
        path: path.to_path_buf(),
        error: std::io::Error::other(cachesim_core::messages::csv_error(&e, None)),
    };
    let mut r = csv::Reader::from_path(path).map_err(io)?;
    let header: Vec<String> = r.headers().map_err(io)?.iter().map(String::from).collect();
    let knobs: Vec<String> = rows.first().map(|r| r.knobs.iter().map(|(k, _)| k.clone()).collect()).unwrap_or_default();
    let keys = metric_keys();
    let (mut knob_cols, mut metric_cols, mut label_cols) = (Vec::new(), Vec::new(), Vec::new());
    for (i, h) in header.iter().enumerate() {
        let as_flag = h.trim().replace('_', "-");
        if let Some(k) = knobs.iter().position(|k| *k == as_flag) {
            knob_cols.push((i, k));
        } else if let Some(m) = metric_key(h, &keys) {
            metric_cols.push((i, m));
        } else {
            label_cols.push(i);
        }
    }
    let bad = |line: u64, msg: String| Error::Record {
        path: path.to_path_buf(),
        error: RecordError { location: Location::Line(line), field: String::new(), message: msg },
    };
    if knob_cols.len() != knobs.len() {
        let missing: Vec<&str> = knobs
            .iter()
            .enumerate()
            .filter(|(k, _)| !knob_cols.iter().any(|(_, j)| j == k))
            .map(|(_, n)| n.as_str())
            .collect();
        return Err(bad(
            1,
            format!("no column for the grid knob(s) {} (name them as the flags, - or _)", missing.join(", ")),
        ));
    }
    if metric_cols.is_empty() {
        return Err(bad(1, "no metric column (a `run --json` key such as output_throughput, or output_tok_s)".into()));
    }
    let mut pairs = Vec::new();
    for (n, rec) in r.records().enumerate() {
        let line = n as u64 + 2;
        let rec = rec.map_err(io)?;
        let cell = |i: usize| rec.get(i).unwrap_or("").to_string();
        let row = rows.iter().find(|row| knob_cols.iter().all(|(i, k)| same(&row.knobs[*k].1, &cell(*i)))).ok_or_else(
            || {
                let want: Vec<String> = knob_cols.iter().map(|(i, k)| format!("{}={}", knobs[*k], cell(*i))).collect();
                bad(line, format!("no sweep point has {}", want.join(" ")))
            },
        )?;
        let mut values = Vec::new();
        for (i, m) in &metric_cols {
            let real: f64 = cell(*i)
                .trim()
                .parse()
                .map_err(|_| bad(line, format!("`{}`: `{}` is not a number", header[*i], cell(*i))))?;
            values.push((real, row.outcome.as_ref().ok().and_then(|s| metric(s, m))));
        }
        let label = label_cols.iter().map(|&i| cell(i)).collect::<Vec<_>>().join(" ");
        pairs.push(Pair { label, point: row.point, values });
    }
    let rho = (0..metric_cols.len())
        .map(|m| {
            let (real, pred): (Vec<f64>, Vec<f64>) =
                pairs.iter().filter_map(|p| p.values[m].1.map(|v| (p.values[m].0, v))).unzip();
            spearman(&real, &pred)
        })
        .collect();
    Ok(Comparison { metrics: metric_cols.into_iter().map(|(_, m)| m).collect(), pairs, rho })
}

/// The comparison as a text table (label, point, real and predicted per metric) and a ρ line.
pub fn table(c: &Comparison) -> String {
    let mut head = vec!["real run".to_string(), "point".to_string()];
    for m in &c.metrics {
        head.extend([format!("{m} real"), "predicted".to_string()]);
    }
    let lines: Vec<Vec<String>> = c
        .pairs
        .iter()
        .map(|p| {
            let mut cells = vec![p.label.clone(), p.point.to_string()];
            for (real, pred) in &p.values {
                cells.extend([format!("{real:.2}"), pred.map_or("failed".into(), |v| format!("{v:.2}"))]);
            }
            cells
        })
        .collect();
    let widths: Vec<usize> =
        (0..head.len()).map(|i| lines.iter().map(|l| l[i].len()).chain([head[i].len()]).max().unwrap_or(0)).collect();
    let fmt =
        |cells: &[String]| cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ");
    let mut out = fmt(&head) + "\n";
    for l in &lines {
        out += &(fmt(l) + "\n");
    }
    let rho: Vec<String> = c
        .metrics
        .iter()
        .zip(&c.rho)
        .map(|(m, r)| format!("{m} {}", r.map_or("undefined".into(), |r| format!("{r:.2}"))))
        .collect();
    out += &format!("Spearman's rho (rank agreement, real vs predicted): {}\n", rho.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachesim_core::metrics::{RequestRecord, Summary, TokenLog};

    fn summary(output_tokens: u32) -> Summary {
        let r = RequestRecord {
            id: 0,
            send_s: 0.0,
            first_token_s: 0.1,
            last_token_s: 1.0,
            prompt_tokens: 10,
            output_tokens,
            cached_prompt_tokens: 0,
            preemptions: 0,
            first_scheduled_s: 0.0,
            priority: 0,
        };
        Summary::new(&[r], 0, &mut TokenLog::default())
    }

    #[test]
    fn rows_match_by_knob_values_and_rank() {
        // Output throughput over a 1 s run = output tokens: 100, 300, 200 for seqs 8, 16, 32.
        let rows: Vec<Row> = [(8, 100), (16, 300), (32, 200)]
            .iter()
            .enumerate()
            .map(|(point, &(s, out))| Row {
                point,
                knobs: vec![("max-num-seqs".into(), s.to_string())],
                outcome: Ok(summary(out)),
                near: None,
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("real.csv");
        // Real: 32 best, then 16, then 8 → ranks (1, 2, 3) vs predicted (1, 3, 2): ρ = 0.5.
        std::fs::write(&p, "run,max_num_seqs,output_tok_s\na,8,10\nb,16.0,20\nc,32,30\n").unwrap();
        let c = compare(&p, &rows).unwrap();
        assert_eq!(c.metrics, ["output_throughput"]);
        assert_eq!(
            c.pairs.iter().map(|p| (p.label.as_str(), p.point)).collect::<Vec<_>>(),
            [("a", 0), ("b", 1), ("c", 2)]
        );
        assert_eq!(c.pairs[1].values, [(20.0, Some(300.0))]);
        assert!((c.rho[0].unwrap() - 0.5).abs() < 1e-12);
        assert!(table(&c).ends_with("Spearman's rho (rank agreement, real vs predicted): output_throughput 0.50\n"));
        std::fs::write(&p, "max_num_seqs,output_tok_s\n8,1\n12,2\n").unwrap();
        assert!(compare(&p, &rows).unwrap_err().to_string().contains("line 3: no sweep point has max-num-seqs=12"));
        std::fs::write(&p, "seqs,output_tok_s\n8,1\n").unwrap();
        assert!(compare(&p, &rows).unwrap_err().to_string().contains("no column for the grid knob(s) max-num-seqs"));
        std::fs::write(&p, "max_num_seqs,speed\n8,1\n").unwrap();
        assert!(compare(&p, &rows).unwrap_err().to_string().contains("no metric column"));
    }
}
