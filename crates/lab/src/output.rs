//! Output files written all or nothing. Each output goes first to a temporary file beside its
//! target (same folder, so the final rename stays on one file system and is atomic) and is
//! renamed onto the target only by [`Outputs::commit`], once the whole run has succeeded: a run
//! that fails leaves existing files untouched, and its temporaries are removed when dropped.
//! [`check_paths`] refuses, before a run starts, an output that is one of the inputs or two
//! outputs with the same path (compared after canonicalising).

use cachesim_core::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Outputs staged in temporary files, waiting for [`Outputs::commit`].
#[derive(Debug, Default)]
pub struct Outputs {
    pending: Vec<(PathBuf, tempfile::TempPath)>,
}

fn io_err(path: &Path, error: std::io::Error) -> Error {
    Error::Io { path: path.to_path_buf(), error }
}

impl Outputs {
    /// No outputs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new empty temporary file beside `target`, with the same extension (the plot picks its
    /// format by it), to write `target`'s content into.
    pub fn stage(&mut self, target: &Path) -> Result<PathBuf> {
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let suffix = target.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(".cachesim-")
            .suffix(&suffix)
            .tempfile_in(dir)
            .map_err(|e| io_err(target, e))?
            .into_temp_path();
        let path = tmp.to_path_buf();
        self.pending.push((target.to_path_buf(), tmp));
        Ok(path)
    }

    /// Takes over `other`'s staged files, after this one's (committed in that order).
    pub fn append(&mut self, other: Outputs) {
        self.pending.extend(other.pending);
    }

    /// Renames every staged file onto its target, in the order staged. A target that exists
    /// keeps its permissions; a new one gets the usual 0644 (temporary files are created 0600).
    pub fn commit(self) -> Result<()> {
        for (target, tmp) in self.pending {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let perms = std::fs::metadata(&target)
                    .map(|m| m.permissions())
                    .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
                std::fs::set_permissions(&tmp, perms).map_err(|e| io_err(&target, e))?;
            }
            tmp.persist(&target).map_err(|e| io_err(&target, e.error))?;
        }
        Ok(())
    }
}

/// `path` made absolute with symbolic links resolved; for a file that does not exist yet, its
/// folder's canonical path joined with its name (the folder must exist).
fn canonical(flag: &str, path: &Path) -> Result<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Ok(p);
    }
    let name = path.file_name().ok_or_else(|| Error::invalid(flag, format!("{} names no file", path.display())))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::invalid(flag, format!("{}: folder {}: {e}", path.display(), dir.display())))?;
    Ok(dir.join(name))
}

/// Refuses, before anything runs, an output path (flag, path) that is also an input, or two
/// outputs naming the same file. Output folders must exist.
pub fn check_paths(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    let ins: Vec<(&str, Option<PathBuf>)> = inputs.iter().map(|&(f, p)| (f, p.canonicalize().ok())).collect();
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for &(flag, path) in outputs {
        let c = canonical(flag, path)?;
        if let Some((input, _)) = ins.iter().find(|(_, i)| i.as_ref() == Some(&c)) {
            return Err(Error::invalid(
                flag,
                format!("{} is the input given to {input}: writing it would destroy the input", path.display()),
            ));
        }
        if let Some((other, _)) = seen.iter().find(|(_, s)| *s == c) {
            return Err(Error::invalid(
                flag,
                format!("{} is also the {other} output: give each its own file", path.display()),
            ));
        }
        seen.push((flag, c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_output_replaces_the_target_and_a_dropped_one_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        std::fs::write(&target, "old").unwrap();
        let mut o = Outputs::new();
        let tmp = o.stage(&target).unwrap();
        assert!(tmp.extension().is_some_and(|e| e == "csv"));
        std::fs::write(&tmp, "new").unwrap();
        drop(o);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        assert!(!tmp.exists(), "the temporary file is removed");
        let mut o = Outputs::new();
        std::fs::write(o.stage(&target).unwrap(), "new").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporaries left");
    }

    #[test]
    fn outputs_may_not_be_inputs_or_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("trace.jsonl");
        std::fs::write(&input, "{}").unwrap();
        let same = dir.path().join(".").join("trace.jsonl");
        let e = check_paths(&[("--trace", &input)], &[("--requests-csv", &same)]).unwrap_err().to_string();
        assert!(e.contains("--requests-csv") && e.contains("--trace"), "{e}");
        let a = dir.path().join("a.csv");
        let e = check_paths(&[], &[("--requests-csv", &a), ("--timeline-csv", &a)]).unwrap_err().to_string();
        assert!(e.contains("--timeline-csv") && e.contains("also the --requests-csv"), "{e}");
        let missing = dir.path().join("no/such/dir/a.csv");
        assert!(check_paths(&[], &[("--plot", &missing)]).unwrap_err().to_string().contains("--plot"));
        assert!(check_paths(&[("--trace", &input)], &[("--plot", &a)]).is_ok());
    }
}
