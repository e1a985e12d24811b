//! Output files written all or nothing. Each output goes first to a temporary file and reaches
//! its target only at [`Outputs::commit`], once the whole run has succeeded: a run that fails
//! leaves existing files untouched, and its temporaries are removed when dropped. A regular
//! file's temporary is beside the file (same folder, so the final rename stays on one file
//! system and is atomic; a symbolic link is followed, and stays a link); a target that is not
//! a regular file — a device, a FIFO, a process's descriptor ([`target`]) — is written into
//! directly at commit, never replaced. [`check_paths`] refuses, before a run starts, an output
//! that is a folder, one of the inputs, or another output ([`check`]).

mod check;
pub mod target;

pub use check::check_paths;

use cachesim_core::error::{Error, Result};
use std::path::{Path, PathBuf};
use target::Target;

/// Outputs staged in temporary files, waiting for [`Outputs::commit`].
#[derive(Debug, Default)]
pub struct Outputs {
    /// (the path given, how it is written, its temporary file).
    pending: Vec<(PathBuf, Target, tempfile::TempPath)>,
}

fn io_err(path: &Path, error: std::io::Error) -> Error {
    Error::Io { path: path.to_path_buf(), error }
}

impl Outputs {
    /// No outputs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new empty temporary file for `target`'s content, with the same extension (the plot
    /// picks its format by it): beside the file a regular target leads to, in the system's
    /// temporary folder for a target written directly.
    pub fn stage(&mut self, target: &Path) -> Result<PathBuf> {
        let how = Target::of(&target.display().to_string(), target)?;
        let dir = match &how {
            Target::File(file) => {
                file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
            }
            Target::Direct(_) => std::env::temp_dir(),
        };
        let suffix = target.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(".cachesim-")
            .suffix(&suffix)
            .tempfile_in(&dir)
            .map_err(|e| io_err(target, e))?
            .into_temp_path();
        let path = tmp.to_path_buf();
        self.pending.push((target.to_path_buf(), how, tmp));
        Ok(path)
    }

    /// Takes over `other`'s staged files, after this one's (committed in that order).
    pub fn append(&mut self, other: Outputs) {
        self.pending.extend(other.pending);
    }

    /// Moves every staged file to its target, in the order staged: a regular file is renamed
    /// onto (a target that exists keeps its permissions; a new one gets the usual 0644, as
    /// temporary files are created 0600); anything else has the content appended to it.
    pub fn commit(self) -> Result<()> {
        for (given, how, tmp) in self.pending {
            match how {
                Target::File(file) => {
                    #[cfg(unix)]
                    {
                        use std::os::unix::fs::PermissionsExt;
                        let perms = std::fs::metadata(&file)
                            .map(|m| m.permissions())
                            .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
                        std::fs::set_permissions(&tmp, perms).map_err(|e| io_err(&given, e))?;
                    }
                    tmp.persist(&file).map_err(|e| io_err(&given, e.error))?;
                }
                Target::Direct(path) => {
                    let mut from = std::fs::File::open(&tmp).map_err(|e| io_err(&given, e))?;
                    let mut to = std::fs::OpenOptions::new().append(true).open(&path).map_err(|e| io_err(&given, e))?;
                    std::io::copy(&mut from, &mut to).map_err(|e| io_err(&given, e))?;
                }
            }
        }
        Ok(())
    }
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

    #[cfg(unix)]
    #[test]
    fn a_link_stays_a_link_and_a_device_stays_a_device() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/out.csv"), "old").unwrap();
        let link = dir.path().join("out.csv");
        std::os::unix::fs::symlink("real/out.csv", &link).unwrap();
        let mut o = Outputs::new();
        std::fs::write(o.stage(&link).unwrap(), "new").unwrap();
        o.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(dir.path().join("real/out.csv")).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path().join("real")).unwrap().count(), 1, "no temporaries left");
        let null = Path::new("/dev/null");
        if null.exists() {
            let mut o = Outputs::new();
            std::fs::write(o.stage(null).unwrap(), "gone").unwrap();
            o.commit().unwrap();
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::metadata(null).unwrap().file_type().is_char_device());
        }
    }
}
