//! Tells the tests whether the real data beside the repository is there: without the data
//! folder (`$CACHESIM_DATA`, else `../shared/data`), the benchmark reports
//! (`$CACHESIM_CALIBRATION`, else `../shared/calibration`) and the golden schedules
//! (`$CACHESIM_GOLDEN`, else `../shared/golden`), it sets `cfg(cachesim_no_data)`, under which
//! the tests that need them are marked ignored (counted as such in the test summary, with the
//! reason) rather than passing without checking anything. `CACHESIM_REQUIRE_DATA=1` makes a
//! missing folder a build error instead. Nothing of the binary depends on it.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cachesim_no_data)");
    println!("cargo::rerun-if-changed=build.rs");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut missing = Vec::new();
    for (env, name, marker) in [
        ("CACHESIM_DATA", "data", "traces"),
        ("CACHESIM_CALIBRATION", "calibration", "reports"),
        ("CACHESIM_GOLDEN", "golden", "vllm"),
    ] {
        println!("cargo::rerun-if-env-changed={env}");
        let dir = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| root.join("../shared").join(name));
        let found = dir.join(marker);
        if found.is_dir() {
            // Rerun when the folder changes (it is scanned, so only an existing one is named:
            // a missing path would rerun this script, and rebuild the tests, every time).
            println!("cargo::rerun-if-changed={}", found.display());
        } else {
            missing.push(format!("{} (set {env})", found.display()));
        }
    }
    println!("cargo::rerun-if-env-changed=CACHESIM_REQUIRE_DATA");
    if !missing.is_empty() {
        let list = missing.join(", ");
        if std::env::var("CACHESIM_REQUIRE_DATA").as_deref() == Ok("1") {
            panic!("CACHESIM_REQUIRE_DATA=1 but the real data is missing: {list}");
        }
        println!(
            "cargo::warning=no real data at {list}: the tests that need it are ignored (set the variable, or touch build.rs once the folder exists)"
        );
        println!("cargo::rustc-cfg=cachesim_no_data");
    }
}
