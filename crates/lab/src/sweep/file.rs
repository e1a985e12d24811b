//! Sweep files (`cachesim sweep --file sweep.toml`, also read by `cachesim plan`): the fixed run
//! flags (`[run]`), the grid axes (`[grid]`, the first key varying slowest, as repeated `--grid`
//! flags) and the zipped lists (`[zip]`), in the order the file writes them, plus the ranking
//! (`rank-by`, `ascending`) and, for `plan`, the SLO (`slo`). Every value keeps the line it was
//! written on, so a bad key or value is reported as `FILE: line N: field `grid.KEY`: …`.
//!
//! ```toml
//! rank-by = "output_throughput"
//! [run]
//! request-rate = 20
//! [grid]
//! max-num-seqs = [16, 24, 32]
//! max-num-batched-tokens = "2048..8192:2048"
//! ```
//!
//! A `[grid]` value is an array of values or one string in `--grid` syntax (`"16,24,32"`,
//! integer ranges `"a..b:step"`); array items that are strings may be ranges too. A `[run]`
//! value is one number, string or boolean (`true` sets a flag that takes no value).

use super::{parse_axis, Axis};
use cachesim_core::error::{Error, Location, RecordError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// One `[run]` setting: a run flag's long name, its value as the command line would spell it,
/// and its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub knob: String,
    pub value: String,
    pub line: u64,
}

/// A sweep file, read and checked for its own syntax (flag names are checked by the binary,
/// which knows the run flags; see [`SweepFile::error`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepFile {
    pub path: PathBuf,
    /// `[run]`, in file order.
    pub run: Vec<Setting>,
    /// `[grid]` axes, in file order, each with its line.
    pub grid: Vec<(Axis, u64)>,
    /// `[zip]` lists, in file order, each with its line.
    pub zip: Vec<(Axis, u64)>,
    /// `rank-by`, checked against the metric keys.
    pub rank_by: Option<String>,
    /// `ascending = true` (smallest first) or `false`.
    pub ascending: Option<bool>,
    /// `slo` (for `plan`), parsed.
    pub slo: Option<crate::plan::Slo>,
}

type Table = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Raw {
    #[serde(default)]
    run: Table,
    #[serde(default)]
    grid: Table,
    #[serde(default)]
    zip: Table,
    rank_by: Option<Spanned<String>>,
    ascending: Option<bool>,
    slo: Option<Spanned<String>>,
}

impl SweepFile {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<SweepFile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.to_path_buf(), error: e })?;
        SweepFile::parse(path, &text)
    }

    /// Parses the text of a sweep file named `path` (for messages).
    pub fn parse(path: &Path, text: &str) -> Result<SweepFile> {
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(text, s.start));
            let msg = cachesim_core::messages::plain(e.message(), cachesim_core::messages::Syntax::Toml);
            record(path, line, "", format!("{msg} (keys: rank-by, ascending, slo, [run], [grid], [zip])"))
        })?;
        let mut file = SweepFile {
            path: path.to_path_buf(),
            run: Vec::new(),
            grid: Vec::new(),
            zip: Vec::new(),
            rank_by: None,
            ascending: raw.ascending,
            slo: None,
        };
        for (key, value) in in_file_order(&raw.run) {
            let line = line_of(text, key.span().start);
            if key.get_ref().trim_start_matches('-') == "deployment" {
                return Err(file.error(
                    line,
                    "run.deployment",
                    "a deployment file is given on the command line (`cachesim sweep --deployment F --file S`), not inside a sweep file",
                ));
            }
            let value = scalar(value.get_ref()).ok_or_else(|| {
                file.error(
                    line,
                    &format!("run.{}", key.get_ref()),
                    "one number, string or boolean (lists go in [grid])",
                )
            })?;
            file.run.push(Setting { knob: key.get_ref().trim_start_matches('-').to_string(), value, line });
        }
        for (section, table) in [("grid", &raw.grid), ("zip", &raw.zip)] {
            for (key, value) in in_file_order(table) {
                let line = line_of(text, key.span().start);
                let axis = file.axis(section, key.get_ref(), value.get_ref(), line)?;
                if section == "grid" {
                    file.grid.push((axis, line));
                } else {
                    file.zip.push((axis, line));
                }
            }
        }
        if let Some(((first, _), (odd, line))) = file
            .zip
            .first()
            .and_then(|f| file.zip.iter().find(|(a, _)| a.values.len() != f.0.values.len()).map(|o| (f, o)))
        {
            let msg = format!(
                "zipped lists differ in length: {} has {}, {} has {}",
                first.knob,
                first.values.len(),
                odd.knob,
                odd.values.len()
            );
            return Err(file.error(*line, &format!("zip.{}", odd.knob), &msg));
        }
        if let Some(r) = raw.rank_by {
            let line = line_of(text, r.span().start);
            super::output::check_metric(r.get_ref()).map_err(|e| file.error(line, "rank-by", &strip(e)))?;
            file.rank_by = Some(r.into_inner());
        }
        if let Some(s) = raw.slo {
            let line = line_of(text, s.span().start);
            file.slo = Some(s.get_ref().parse().map_err(|e: Error| file.error(line, "slo", &strip(e)))?);
        }
        Ok(file)
    }

    /// An error at `line` of this file about `field`.
    pub fn error(&self, line: u64, field: &str, message: &str) -> Error {
        record(&self.path, line, field, message.to_string())
    }

    fn axis(&self, section: &str, knob: &str, value: &toml::Value, line: u64) -> Result<Axis> {
        let field = format!("{section}.{knob}");
        let items: Vec<String> = match value {
            toml::Value::Array(a) => a
                .iter()
                .map(scalar)
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| self.error(line, &field, "an array of numbers, strings or booleans"))?,
            v => vec![scalar(v)
                .ok_or_else(|| self.error(line, &field, "an array of values or a string like \"16,24,32\""))?],
        };
        if items.is_empty() {
            return Err(self.error(line, &field, "no values"));
        }
        let mut values = Vec::new();
        for item in items {
            let a = parse_axis(&format!("{knob}={item}")).map_err(|e| self.error(line, &field, &strip(e)))?;
            values.extend(a.values);
        }
        Ok(Axis { knob: knob.trim_start_matches('-').to_string(), values })
    }
}

/// The entries of a table in the order the file writes them.
fn in_file_order(t: &Table) -> Vec<(&Spanned<String>, &Spanned<toml::Value>)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// A scalar as the command line would spell it; `None` for arrays and tables.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> u64 {
    text.as_bytes()[..at.min(text.len())].iter().filter(|b| **b == b'\n').count() as u64 + 1
}

/// The message of an argument error without its `invalid value for FIELD:` prefix.
fn strip(e: Error) -> String {
    match e {
        Error::InvalidArgument { message, .. } => message,
        e => e.to_string(),
    }
}

fn record(path: &Path, line: u64, field: &str, message: String) -> Error {
    Error::Record {
        path: path.to_path_buf(),
        error: RecordError { location: Location::Line(line), field: field.to_string(), message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SweepFile> {
        SweepFile::parse(Path::new("s.toml"), text)
    }

    #[test]
    fn sections_in_file_order_with_lines() {
        let f = parse(
            "rank-by = \"median_ttft_ms\"\nascending = true\nslo = \"ttft_p99=2000\"\n[run]\nrequest-rate = 20\n\
             disable-prefix-caching = true\ngpu-memory-utilization = 0.85\n[grid]\nzz = [1, 2]\naa = \"2048..6144:2048\"\n\
             [zip]\nm = [\"x\", \"y\"]\n",
        )
        .unwrap();
        assert_eq!(f.rank_by.as_deref(), Some("median_ttft_ms"));
        assert_eq!(f.ascending, Some(true));
        assert_eq!(f.slo.unwrap().0[0].key(), "p99_ttft_ms");
        let run: Vec<(&str, &str, u64)> = f.run.iter().map(|s| (s.knob.as_str(), s.value.as_str(), s.line)).collect();
        assert_eq!(
            run,
            [("request-rate", "20", 5), ("disable-prefix-caching", "true", 6), ("gpu-memory-utilization", "0.85", 7)]
        );
        // File order, not alphabetical: zz first.
        assert_eq!(f.grid[0], (Axis { knob: "zz".into(), values: vec!["1".into(), "2".into()] }, 9));
        assert_eq!(f.grid[1].0.values, ["2048", "4096", "6144"]);
        assert_eq!(f.zip[0], (Axis { knob: "m".into(), values: vec!["x".into(), "y".into()] }, 12));
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            ("[grid]\nmax-num-seqs = []\n", "s.toml: line 2: field `grid.max-num-seqs`: no values"),
            ("[grid]\n\ntp = \"3..1\"\n", "s.toml: line 3: field `grid.tp`: `tp=3..1`: the range is empty"),
            (
                "[run]\ntp = [1, 2]\n",
                "s.toml: line 2: field `run.tp`: one number, string or boolean (lists go in [grid])",
            ),
            ("\nrank-by = \"speed\"\n", "s.toml: line 2: field `rank-by`: unknown metric `speed`"),
            ("slo = \"ttft=3\"\n", "s.toml: line 1: field `slo`: `ttft` is not METRIC_STAT"),
            ("[gird]\nx = 1\n", "s.toml: line 1: unknown field `gird`"),
            (
                "[run]\ndeployment = \"d.toml\"\n",
                "s.toml: line 2: field `run.deployment`: a deployment file is given on the command line",
            ),
            ("[run]\nx = \n", "s.toml: line 2: "),
            (
                "[zip]\na = [1, 2]\nb = 3\n",
                "s.toml: line 3: field `zip.b`: zipped lists differ in length: a has 2, b has 1",
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err().to_string();
            assert!(got.starts_with(want), "{text:?}: {got}");
        }
    }
}
