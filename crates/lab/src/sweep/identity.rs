//! What identifies a sharded sweep, so that `cachesim merge` joins only slices of one sweep. A
//! `sweep --shard I/N --csv S.csv` writes, with its CSV and all or nothing, a sidecar
//! `S.csv.sweep.json` ([`sidecar_path`]) holding the slice (I, N) and the sweep's identity: the
//! cachesim version, the base run flags, the grid and zip axes and the number of points. The
//! CSV itself is the unsharded sweep's rows, unchanged, so the merged file stays byte for byte
//! the unsharded CSV. [`check_shards`] refuses shards whose identities differ, a slice given
//! twice or missing, and a CSV without its sidecar, naming the files.

use super::{Axis, Grid, Shard};
use crate::output::Outputs;
use cachesim_core::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The sweep a shard is a slice of: equal for every slice of one sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The cachesim version that ran it (another release may price steps differently).
    pub cachesim: String,
    /// The base run flags (command line, deployment file and the sweep file's `[run]`) as
    /// `--long=value` words, by flag.
    pub base: Vec<String>,
    /// The `--grid` axes (knob and values, as expanded), in order.
    pub grid: Vec<(String, Vec<String>)>,
    /// The `--zip` axes.
    pub zip: Vec<(String, Vec<String>)>,
    /// Grid points in all slices together.
    pub points: usize,
}

impl Identity {
    /// The identity of a sweep over `grid` with `points` points and the base flags `base`.
    pub fn new(version: &str, base: Vec<String>, grid: &Grid, points: usize) -> Identity {
        let axes = |a: &[Axis]| a.iter().map(|a| (a.knob.clone(), a.values.clone())).collect();
        Identity { cachesim: version.to_string(), base, grid: axes(&grid.axes), zip: axes(&grid.zip), points }
    }

    /// The first field in which `self` and `other` differ, and how.
    fn difference(&self, other: &Identity) -> Option<String> {
        let words = |v: &[String]| v.join(" ");
        let axes = |v: &[(String, Vec<String>)]| {
            v.iter().map(|(k, vals)| format!("{k}={}", vals.join(","))).collect::<Vec<_>>().join(" ")
        };
        let pairs = [
            ("cachesim version", self.cachesim.clone(), other.cachesim.clone()),
            ("base flags", words(&self.base), words(&other.base)),
            ("grid", axes(&self.grid), axes(&other.grid)),
            ("zip", axes(&self.zip), axes(&other.zip)),
            ("point count", self.points.to_string(), other.points.to_string()),
        ];
        pairs.into_iter().find(|(_, a, b)| a != b).map(|(what, a, b)| format!("{what} `{a}` against `{b}`"))
    }
}

/// A sidecar's content: the slice and the sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Sidecar {
    /// The slice, `I/N`.
    shard: String,
    sweep: Identity,
}

/// The sidecar of a shard's CSV: the CSV's file name with `.sweep.json` added.
pub fn sidecar_path(csv: &Path) -> PathBuf {
    let mut name = csv.file_name().unwrap_or_default().to_os_string();
    name.push(".sweep.json");
    csv.with_file_name(name)
}

/// Stages the sidecar of slice `shard` of the sweep `id`, for the CSV at `csv`.
pub fn stage(files: &mut Outputs, csv: &Path, shard: Shard, id: &Identity) -> Result<()> {
    let path = sidecar_path(csv);
    let doc = Sidecar { shard: format!("{}/{}", shard.index, shard.count), sweep: id.clone() };
    let text = serde_json::to_string_pretty(&doc).map_err(|e| io_error(&path, e))? + "\n";
    let tmp = files.stage(&path)?;
    std::fs::write(&tmp, text).map_err(|e| Error::Io { path, error: e })
}

fn io_error(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Io { path: path.to_path_buf(), error: std::io::Error::other(e) }
}

/// Reads the sidecar of the shard CSV `csv`: its slice and its sweep.
fn read(csv: &Path) -> Result<(Shard, Identity)> {
    let path = sidecar_path(csv);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        io_error(
            csv,
            format!(
                "its sidecar {} cannot be read ({e}): `cachesim sweep --shard I/N --csv` writes it beside the CSV, \
                 keep the two together",
                path.display()
            ),
        )
    })?;
    let doc: Sidecar = serde_json::from_str(&text).map_err(|e| io_error(&path, format!("not a shard sidecar: {e}")))?;
    let shard: Shard = doc.shard.parse().map_err(|e: String| io_error(&path, format!("field `shard`: {e}")))?;
    Ok((shard, doc.sweep))
}

/// At most this many missing slices named in a refusal.
const MAX_NAMED: usize = 8;

/// Refuses shard CSVs that are not every slice of one sweep, once each: a CSV without its
/// sidecar, a sidecar given as a CSV, identities that differ, a slice count that differs, a
/// slice given twice or missing. Each refusal names the files.
pub fn check_shards(paths: &[PathBuf]) -> Result<()> {
    let mut seen: Vec<(&Path, Shard, Identity)> = Vec::new();
    for path in paths {
        if path.to_string_lossy().ends_with(".sweep.json") {
            return Err(io_error(path, "a shard's sidecar, not its CSV: give the CSV files (it is read beside them)"));
        }
        let (shard, id) = read(path)?;
        if let Some((first, s, first_id)) = seen.first() {
            if let Some(d) = first_id.difference(&id) {
                return Err(io_error(
                    path,
                    format!("a shard of another sweep than {}: {d} (from their .sweep.json sidecars)", first.display()),
                ));
            }
            if s.count != shard.count {
                return Err(io_error(
                    path,
                    format!(
                        "slice {}/{} but {} is {}/{}: not the same sharding",
                        shard.index,
                        shard.count,
                        first.display(),
                        s.index,
                        s.count
                    ),
                ));
            }
        }
        if let Some((other, _, _)) = seen.iter().find(|(_, s, _)| s.index == shard.index) {
            return Err(io_error(
                path,
                format!(
                    "slice {}/{} again: {} is that slice too (a shard given twice?)",
                    shard.index,
                    shard.count,
                    other.display()
                ),
            ));
        }
        seen.push((path, shard, id));
    }
    if let Some((_, s, _)) = seen.first() {
        let missing: Vec<String> = (0..s.count)
            .filter(|i| !seen.iter().any(|(_, t, _)| t.index == *i))
            .map(|i| format!("{i}/{}", s.count))
            .collect();
        if !missing.is_empty() {
            let given: Vec<String> = seen.iter().map(|(p, _, _)| p.display().to_string()).collect();
            let (what, more) = match missing.len() {
                1 => ("slice", String::new()),
                n if n > MAX_NAMED => ("slices", format!(" and {} more", n - MAX_NAMED)),
                _ => ("slices", String::new()),
            };
            let named = missing[..missing.len().min(MAX_NAMED)].join(", ");
            return Err(Error::invalid(
                "merge",
                format!("{what} {named}{more} missing: the files given ({}) are not the whole sweep", given.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_of_one_sweep_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let grid = Grid { axes: vec![super::super::parse_axis("max-num-seqs=8,16,32").unwrap()], zip: vec![] };
        let id = Identity::new("0.1.0", vec!["--request-rate=4".into()], &grid, 3);
        let write = |name: &str, shard: &str, id: &Identity| {
            let csv = dir.path().join(name);
            std::fs::write(&csv, "point,error\n").unwrap();
            let mut files = Outputs::new();
            stage(&mut files, &csv, shard.parse().unwrap(), id).unwrap();
            files.commit().unwrap();
            csv
        };
        let (a, b) = (write("a.csv", "0/2", &id), write("b.csv", "1/2", &id));
        assert_eq!(sidecar_path(&a), dir.path().join("a.csv.sweep.json"));
        assert!(check_shards(&[b.clone(), a.clone()]).is_ok());
        let e = check_shards(std::slice::from_ref(&a)).unwrap_err().to_string();
        assert!(e.contains("slice 1/2 missing") && e.contains("a.csv"), "{e}");
        let e = check_shards(&[a.clone(), a.clone(), b.clone()]).unwrap_err().to_string();
        assert!(e.contains("slice 0/2 again"), "{e}");
        let other = Identity { base: vec!["--request-rate=8".into()], ..id.clone() };
        let c = write("c.csv", "1/2", &other);
        let e = check_shards(&[a.clone(), c]).unwrap_err().to_string();
        assert!(e.contains("c.csv") && e.contains("another sweep than") && e.contains("--request-rate=8"), "{e}");
        let d = write("d.csv", "1/3", &id);
        assert!(check_shards(&[a.clone(), d]).unwrap_err().to_string().contains("not the same sharding"));
        let bare = dir.path().join("bare.csv");
        std::fs::write(&bare, "point,error\n").unwrap();
        assert!(check_shards(&[a, bare]).unwrap_err().to_string().contains("sidecar"));
    }
}
