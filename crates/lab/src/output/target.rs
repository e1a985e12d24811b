//! What an output path is once written, decided before anything is written to it: a regular
//! file (existing or new) is replaced atomically — written beside the file its symbolic links
//! lead to and renamed onto that file, so a link stays a link — while anything else is written
//! into directly: a character or block device (`/dev/null`, a terminal), a FIFO, a socket, or
//! the process's own descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`, even when they
//! lead to a regular file: renaming over it would detach the file the shell opened). A
//! temporary file and a rename would replace such a target with a regular file. A folder is
//! no output.

use cachesim_core::error::{Error, Result};
use std::path::{Path, PathBuf};

/// At most this many symbolic links followed from an output path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// How an output path is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A regular file, existing or new, at this path (the given path with its symbolic links
    /// followed): written beside it and renamed onto it.
    File(PathBuf),
    /// Not a regular file, or reached through a process's descriptor: opened at this path
    /// (as given) and appended to, never replaced.
    Direct(PathBuf),
}

impl Target {
    /// What `path` is, refusing a folder; `flag` names the output in the message.
    pub fn of(flag: &str, path: &Path) -> Result<Target> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Err(Error::invalid(
                flag,
                format!("{} is a folder, not a file: name a file in it (e.g. {})", path.display(), example(path)),
            )),
            Ok(m) if !m.is_file() => Ok(Target::Direct(path.to_path_buf())),
            _ => {
                let (file, descriptor) = follow(flag, path)?;
                Ok(if descriptor { Target::Direct(path.to_path_buf()) } else { Target::File(file) })
            }
        }
    }

    /// Whether the target is a regular file replaced on commit (so the input it may be is lost).
    pub fn replaces(&self) -> bool {
        matches!(self, Target::File(_))
    }
}

/// A file name in the folder `path`, for the message.
fn example(path: &Path) -> String {
    path.join("out.csv").display().to_string()
}

/// `path` with its final symbolic links followed (each relative to its own folder), and
/// whether one of the paths on the way is a process's descriptor.
fn follow(flag: &str, path: &Path) -> Result<(PathBuf, bool)> {
    let mut p = path.to_path_buf();
    let mut descriptor = false;
    for _ in 0..MAX_LINKS {
        descriptor |= is_descriptor(&p);
        let is_link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok((p, descriptor));
        }
        let to = std::fs::read_link(&p).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
        p = match p.parent() {
            Some(dir) if to.is_relative() => dir.join(to),
            _ => to,
        };
    }
    Err(Error::invalid(flag, format!("{}: more than {MAX_LINKS} symbolic links", path.display())))
}

/// A path in a descriptor folder: `/dev/fd/N`, `/proc/self/fd/N`, `/proc/PID/task/TID/fd/N`
/// (`/dev/stdout` leads to `/proc/self/fd/1`).
fn is_descriptor(p: &Path) -> bool {
    let in_fd = p.parent().and_then(Path::file_name).is_some_and(|n| n == "fd");
    in_fd && (p.starts_with("/proc") || p.starts_with("/dev"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_links_devices_and_folders() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.csv");
        assert_eq!(Target::of("--csv", &file).unwrap(), Target::File(file.clone()));
        std::fs::write(&file, "x").unwrap();
        assert_eq!(Target::of("--csv", &file).unwrap(), Target::File(file.clone()));
        #[cfg(unix)]
        {
            let link = dir.path().join("link.csv");
            std::os::unix::fs::symlink("a.csv", &link).unwrap();
            assert_eq!(Target::of("--csv", &link).unwrap(), Target::File(dir.path().join("a.csv")));
            let dangling = dir.path().join("dangling.csv");
            std::os::unix::fs::symlink("new.csv", &dangling).unwrap();
            assert_eq!(Target::of("--csv", &dangling).unwrap(), Target::File(dir.path().join("new.csv")));
            let null = Path::new("/dev/null");
            if null.exists() {
                assert_eq!(Target::of("--csv", null).unwrap(), Target::Direct(null.to_path_buf()));
            }
            let fd = Path::new("/dev/fd/9");
            assert!(is_descriptor(fd) && is_descriptor(Path::new("/proc/self/fd/1")));
            assert!(!is_descriptor(Path::new("/dev/shm/a.csv")));
        }
        let e = Target::of("--csv", dir.path()).unwrap_err().to_string();
        assert!(e.contains("--csv") && e.contains("is a folder"), "{e}");
    }
}
