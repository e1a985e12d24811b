//! The one check of a command's files before it runs ([`check_paths`]): every output names a
//! file (not a folder) in a folder that exists, no two outputs name one file, and no output
//! replaces an input — an input file, or a file inside an input folder. Paths are compared
//! after resolving symbolic links; `-` (standard input or output) is exempt, and an output that
//! is written into rather than replaced (a device, a FIFO: [`Target::Direct`]) destroys no
//! input.

use super::target::Target;
use cachesim_core::error::{Error, Result};
use std::path::{Path, PathBuf};

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

/// Standard input or output, which no check applies to.
fn is_std(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Refuses, before anything runs, an output (flag, path) that is a folder, is in a folder that
/// does not exist, names the same file as another output, or would replace an input (flag,
/// path): an input file, or an existing file inside an input folder.
pub fn check_paths(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    // (flag, canonical path, whether a folder, the path as given).
    let ins: Vec<(&str, PathBuf, bool, &Path)> = inputs
        .iter()
        .filter(|(_, p)| !is_std(p))
        .filter_map(|&(f, p)| p.canonicalize().ok().map(|c| (f, c, p.is_dir(), p)))
        .collect();
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for &(flag, path) in outputs.iter().filter(|(_, p)| !is_std(p)) {
        let target = Target::of(flag, path)?;
        let c = canonical(flag, path)?;
        let replaced = target.replaces().then_some(&c);
        if let Some((input, ..)) = ins.iter().find(|(_, i, dir, _)| !dir && replaced == Some(i)) {
            return Err(Error::invalid(
                flag,
                format!("{} is the input given to {input}: writing it would destroy the input", path.display()),
            ));
        }
        let inside = |(_, i, dir, _): &&(&str, PathBuf, bool, &Path)| *dir && c.exists() && c.starts_with(i);
        if let Some((input, _, _, folder)) = ins.iter().find(|i| replaced.is_some() && inside(i)) {
            return Err(Error::invalid(
                flag,
                format!(
                    "{} is a file of the folder given to {input} ({}): writing it would destroy an input",
                    path.display(),
                    folder.display()
                ),
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
        let e = check_paths(&[], &[("--csv", dir.path())]).unwrap_err().to_string();
        assert!(e.contains("is a folder"), "{e}");
        let std = Path::new("-");
        assert!(check_paths(&[("--trace", std)], &[("--output", std)]).is_ok());
    }

    #[test]
    fn an_output_may_not_replace_a_file_of_an_input_folder() {
        let dir = tempfile::tempdir().unwrap();
        let case = dir.path().join("P001.toml");
        std::fs::write(&case, "case = 1").unwrap();
        let e = check_paths(&[("--cases-dir", dir.path())], &[("--csv", &case)]).unwrap_err().to_string();
        assert!(e.contains("--csv") && e.contains("folder given to --cases-dir"), "{e}");
        assert!(check_paths(&[("--cases-dir", dir.path())], &[("--csv", &dir.path().join("new.csv"))]).is_ok());
        #[cfg(unix)]
        {
            let null = Path::new("/dev/null");
            if null.exists() {
                // Written into, not replaced: no input is destroyed.
                assert!(check_paths(&[("--trace", null)], &[("--requests-csv", null)]).is_ok());
            }
        }
    }
}
