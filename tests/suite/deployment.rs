//! Deployment files (`--deployment FILE.toml`): every key type expands to the flag words clap
//! parses (tables, booleans, arrays, aliases, paths relative to the file), the command line
//! overrides the file (seen in `--json`'s config), unknown keys and bad values are errors naming
//! file, line and key, and the two V100 seed deployments of `calibration/deployments/` (two
//! instances behind a router; one prefill + one decode instance) run end to end (on a ShareGPT
//! workload of the seed's size when the shared data is present).

use crate::common;

use cachesim::deployment::{command_line, parse};
use clap::{Arg, ArgAction, Command};
use common::{cachesim, fails, ok};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const TWO_DP: &str = "calibration/deployments/v100-llama11b-2dp-router.toml";
const ONE_P_ONE_D: &str = "calibration/deployments/v100-llama11b-1p1d.toml";

/// A command with one flag of every kind a deployment key can stand for.
fn flags() -> Command {
    let value = |id: &'static str, long: &'static str| Arg::new(id).long(long);
    Command::new("run")
        .arg(value("count", "count").value_parser(clap::value_parser!(u32)))
        .arg(value("rate", "rate"))
        .arg(value("on", "on").action(ArgAction::SetTrue))
        .arg(value("off", "off").action(ArgAction::SetTrue).conflicts_with("on"))
        .arg(value("grid", "grid").action(ArgAction::Append))
        .arg(value("blocks", "blocks").value_delimiter(','))
        .arg(value("trace", "trace").value_parser(clap::value_parser!(PathBuf)))
        .arg(value("block_size", "block-size").visible_alias("block"))
        .arg(value("router", "router"))
        .arg(value("cache_threshold", "cache-threshold"))
        .arg(value("prefill_instances", "prefill-instances"))
        .arg(value("decode_max_num_seqs", "decode-max-num-seqs"))
        .arg(value("kv_link_gbps", "kv-link-gbps"))
        .arg(value("kv_links", "kv-links"))
        .arg(value("deployment", "deployment").value_parser(clap::value_parser!(PathBuf)))
}

const EVERY_KIND: &str = r#"name = "every kind"
description = "one key of each kind"
count = 64
rate = inf
on = true
off = false
grid = ["max-num-seqs=8,16", "tp=1"]
blocks = [16, 32]
trace = "t.jsonl"
block = 32

[router]
policy = "cache-aware"
cache-threshold = 0.5

[prefill]
instances = 1

[decode]
max-num-seqs = 8

[link]
gbps = 200
count = 2
"#;

fn words(args: &[cachesim::deployment::Argument]) -> Vec<String> {
    args.iter().flat_map(|a| a.words.iter().map(|w| w.to_string_lossy().into_owned())).collect()
}

#[test]
fn every_key_type_expands_to_its_flag() {
    let d = parse(Path::new("deploy/d.toml"), EVERY_KIND).unwrap();
    assert_eq!(d.name.as_deref(), Some("every kind"));
    assert_eq!(d.description.as_deref(), Some("one key of each kind"));
    let args = d.arguments(&flags()).unwrap();
    d.check(&args, &flags()).unwrap();
    let trace = Path::new("deploy").join("t.jsonl");
    assert_eq!(
        words(&args),
        [
            "--count=64",
            "--rate=inf",
            "--on",
            "--grid=max-num-seqs=8,16",
            "--grid=tp=1",
            "--blocks=16,32",
            &format!("--trace={}", trace.display()),
            "--block-size=32",
            "--router=cache-aware",
            "--cache-threshold=0.5",
            "--prefill-instances=1",
            "--decode-max-num-seqs=8",
            "--kv-link-gbps=200",
            "--kv-links=2",
        ]
    );
    // Each key's line, as the file has it.
    let lines: Vec<(String, usize)> = args.iter().map(|a| (a.entry.key.clone(), a.entry.line)).collect();
    assert_eq!(lines[0], ("count".to_string(), 3));
    assert_eq!(lines[8], ("router.policy".to_string(), 13));
    assert_eq!(lines[13], ("link.count".to_string(), 24));
}

#[test]
fn shapes_that_do_not_fit_their_flag_are_refused_with_line_and_key() {
    let err = |text: &str| {
        let d = parse(Path::new("d.toml"), text).unwrap();
        d.arguments(&flags()).and_then(|a| d.check(&a, &flags())).unwrap_err().to_string()
    };
    assert_eq!(err("\ncount = [1, 2]\n"), "d.toml: line 2: field `count`: `--count` takes one value, not an array");
    assert_eq!(err("on = 3\n"), "d.toml: line 1: field `on`: `--on` takes no value: write true or false");
    assert_eq!(
        err("block = 1\nblock-size = 2\n"),
        "d.toml: line 2: field `block-size`: sets the same flag as key `block` (line 1)"
    );
    assert_eq!(
        err("kv-links = 3\n[link]\ncount = 1\n"),
        "d.toml: line 3: field `link.count`: sets the same flag as key `kv-links` (line 1)"
    );
    assert!(err("deployment = \"other.toml\"\n").starts_with("d.toml: line 1: field `deployment`: unknown key"));
    assert_eq!(
        err("count = \"many\"\n"),
        "d.toml: line 1: field `count`: invalid value 'many' for this key: invalid digit found in string"
    );
    assert_eq!(
        err("on = true\n\noff = true\n"),
        "d.toml: line 1: field `on`: this key cannot be used with key `off` (line 3)"
    );
}

/// `prog run` with a file of `text` in a fresh folder, and the user's `extra` flags.
fn expand(text: &str, extra: &[&str]) -> (cachesim::deployment::Expanded, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.toml");
    std::fs::write(&file, text).unwrap();
    let top = Command::new("prog").subcommand(flags());
    let mut args: Vec<OsString> = vec!["prog".into(), "run".into(), "--deployment".into(), file.clone().into()];
    args.extend(extra.iter().map(OsString::from));
    (command_line(args, &top, &flags()).unwrap(), dir)
}

#[test]
fn the_command_line_overrides_the_file_and_what_it_excludes() {
    let (e, dir) = expand("count = 64\nrate = 2\non = true\n", &["--count", "8", "--off"]);
    let file = dir.path().join("d.toml").into_os_string();
    let want: Vec<OsString> = ["prog", "run", "--rate=2", "--deployment"]
        .iter()
        .map(OsString::from)
        .chain([file, "--count".into(), "8".into(), "--off".into()])
        .collect();
    assert_eq!(e.args, want);
    let echo = e.echo.unwrap();
    assert_eq!(echo.overridden, ["count", "on"]);
    assert_eq!(echo.file_values, ["64", "true"]);
    // A value this build refuses is not checked when the command line replaces it.
    let (e, _dir) = expand("count = \"many\"\n", &["--count=3"]);
    assert_eq!(e.echo.unwrap().overridden, ["count"]);
    // Without --deployment, or for a subcommand without the flag, nothing changes.
    let top = Command::new("prog").subcommand(flags()).subcommand(Command::new("cache"));
    let plain: Vec<OsString> = ["prog", "run", "--count", "1"].iter().map(OsString::from).collect();
    assert_eq!(command_line(plain.clone(), &top, &flags()).unwrap().args, plain);
    let other: Vec<OsString> = ["prog", "cache", "--deployment", "x.toml"].iter().map(OsString::from).collect();
    assert_eq!(command_line(other.clone(), &top, &flags()).unwrap().args, other);
}

/// A deployment file in a fresh folder.
fn deployment_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deploy.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file.display().to_string())
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("json")
}

#[test]
fn command_line_flags_win_in_the_json_config() {
    let (_dir, f) = deployment_file(
        "name = \"what-if\"\nmax-num-seqs = 32\nnum-prompts = 12\nrequest-rate = \"inf\"\ninstances = 2\n",
    );
    let base = json(&["run", "--deployment", &f, "--json"]);
    assert_eq!(base["config"]["engine"]["max_num_seqs"], 32);
    assert_eq!(base["config"]["cluster"]["instances"], 2);
    assert_eq!(base["completed"], 12);
    assert_eq!(base["config"]["deployment_file"], serde_json::json!({"path": f, "name": "what-if", "overridden": []}));
    let what_if = json(&["run", "--deployment", &f, "--max-num-seqs", "64", "--instances=1", "--json"]);
    assert_eq!(what_if["config"]["engine"]["max_num_seqs"], 64);
    assert_eq!(what_if["config"]["cluster"]["instances"], 1);
    assert_eq!(what_if["completed"], 12);
    assert_eq!(what_if["config"]["deployment_file"]["overridden"], serde_json::json!(["max-num-seqs", "instances"]));
    // The same without a subcommand, and the text echo.
    let text = ok(&["--deployment", &f, "--max-num-seqs", "64"]);
    assert!(
        text.contains(&format!("Deployment:     {f} (what-if) · the command line overrides max-num-seqs (file: 32)\n")),
        "{text}"
    );
    assert!(text.contains("max_num_seqs 64"), "{text}");
    // Runs without a deployment have no such key.
    assert!(json(&["run", "--num-prompts", "2", "--json"])["config"].get("deployment_file").is_none());
}

#[test]
fn unknown_keys_and_bad_values_name_file_line_and_key() {
    let (_dir, f) = deployment_file("name = \"x\"\n\n[prefill]\nmax-num-seq = 8\n");
    let e = fails(&["run", "--deployment", &f]);
    assert!(e.contains(&format!("{f}: line 4: field `prefill.max-num-seq`: unknown key")), "{e}");
    let (_dir, f) = deployment_file("max_num_seqs = 8\n");
    let e = fails(&["run", "--deployment", &f]);
    assert!(e.contains("line 1: field `max_num_seqs`: unknown key") && e.contains("`max-num-seqs`"), "{e}");
    let (_dir, f) = deployment_file("tp = 1\nmax-num-seqs = -3\n");
    let e = fails(&["run", "--deployment", &f]);
    assert!(e.contains(&format!("{f}: line 2: field `max-num-seqs`: invalid value '-3' for this key")), "{e}");
    assert!(!e.contains("'--max-num-seqs"), "{e}");
    let (_dir, f) = deployment_file("tp = \n");
    let e = fails(&["run", "--deployment", &f]);
    assert!(e.contains(&f) && e.contains("line 1"), "{e}");
    let e = fails(&["run", "--deployment", "no-such-deployment.toml"]);
    assert!(e.contains("no-such-deployment.toml"), "{e}");
}

#[test]
fn paths_in_the_file_are_relative_to_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("seven.jsonl");
    ok(&[
        "gen",
        "random",
        "--num-prompts",
        "7",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "-o",
        &trace.display().to_string(),
    ]);
    let file = dir.path().join("deploy.toml");
    std::fs::write(&file, "trace = \"seven.jsonl\"\nrequest-rate = \"inf\"\n").unwrap();
    // Run from the crate's folder, not the file's.
    let out = json(&["run", "--deployment", &file.display().to_string(), "--json"]);
    assert_eq!(out["completed"], 7);
    assert_eq!(out["trace"]["path"], dir.path().join("seven.jsonl").display().to_string());
}

#[test]
fn sweep_takes_the_file_as_its_base() {
    let (_dir, f) = deployment_file("num-prompts = 9\nrequest-rate = \"inf\"\nmax-num-seqs = 4\n");
    let out = json(&["sweep", "--deployment", &f, "--grid", "max-num-seqs=1,2", "--json"]);
    let rows = out["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["completed"] == 9), "{out}");
}

/// The router flag for the 2-instance seed: its own `cache-aware` when this build has it, else
/// round-robin as a command-line what-if.
fn router_override() -> Vec<&'static str> {
    let help = String::from_utf8(cachesim(&["run", "--help"]).stdout).unwrap();
    if help.contains("cache-aware") {
        vec![]
    } else {
        vec!["--router", "round-robin"]
    }
}

#[test]
fn the_seed_deployments_parse() {
    for (file, name) in [(TWO_DP, "v100-llama11b-2dp-router"), (ONE_P_ONE_D, "v100-llama11b-1p1d")] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let d = cachesim::deployment::load(&path).unwrap();
        assert_eq!(d.name.as_deref(), Some(name));
        let flags: Vec<&str> = d.entries.iter().map(|e| e.flag.as_str()).collect();
        assert!(flags.starts_with(&["model", "gpu", "tp", "engine-version", "max-model-len"]), "{flags:?}");
    }
    let two = cachesim::deployment::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(TWO_DP)).unwrap();
    assert_eq!(two.entries.iter().find(|e| e.key == "router.policy").map(|e| e.flag.as_str()), Some("router"));
    let one = cachesim::deployment::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(ONE_P_ONE_D)).unwrap();
    // Both cap the batch at 32 (the model's vLLM limit; the deployment files say why).
    // Both run eager (the same advice; it turns V0's async output processing off).
    for d in [&two, &one] {
        assert_eq!(d.entries[5].flag, "max-num-seqs");
        assert_eq!(d.entries[6].flag, "enforce-eager");
    }
    let pd: Vec<&str> = one.entries.iter().skip(7).map(|e| e.flag.as_str()).collect();
    assert_eq!(
        pd,
        ["pd-style", "prefill-instances", "decode-instances", "kv-link-gbps", "kv-link-latency-ms", "kv-links"]
    );
}

#[test]
fn the_two_instance_seed_runs_from_its_file() {
    let mut args = vec!["run", "--deployment", TWO_DP, "--num-prompts", "40", "--request-rate", "inf", "--json"];
    args.extend(router_override());
    let out = json(&args);
    let c = &out["config"];
    assert_eq!((c["model"]["name"].as_str(), c["gpu"]["name"].as_str()), (Some("llama-3.2-11b"), Some("v100")));
    assert_eq!(c["engine"]["version"], "VllmV0");
    assert_eq!(c["engine"]["async_output_proc"], false, "eager: no async output processing");
    assert_eq!(c["max_model_len"], 8192);
    assert_eq!(c["cluster"]["instances"], 2);
    assert_eq!(out["completed"], 40);
    assert_eq!(out["instances"].as_array().map(Vec::len), Some(2));
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_two_instance_seed_serves_a_sharegpt_workload_of_the_seeds_size() {
    let Some(data) = common::data_dir() else { return };
    let trace = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz").display().to_string();
    let mut args = vec![
        "run",
        "--deployment",
        TWO_DP,
        "--trace",
        &trace,
        "--turns",
        "first",
        "--num-prompts",
        "1000",
        "--request-rate",
        "inf",
        "--json",
    ];
    let router = router_override();
    args.extend(&router);
    let out = json(&args);
    // All 1,000 succeed, as in the real run (max-model-len 8192 admits every sampled request).
    assert_eq!(out["completed"], 1000);
    assert_eq!(out["failed"], 0);
    let per_instance: Vec<u64> =
        out["instances"].as_array().unwrap().iter().map(|i| i["requests"].as_u64().unwrap()).collect();
    assert_eq!(per_instance.iter().sum::<u64>(), 1000);
    if !router.is_empty() {
        assert_eq!(per_instance, [500, 500]);
    }
}

#[test]
fn the_one_prefill_one_decode_seed_runs_from_its_file() {
    let out = json(&["run", "--deployment", ONE_P_ONE_D, "--num-prompts", "40", "--request-rate", "inf", "--json"]);
    let pd = &out["config"]["cluster"]["pd"];
    assert_eq!((pd["prefill"].as_u64(), pd["decode"].as_u64(), pd["style"].as_str()), (Some(1), Some(1), Some("vllm")));
    assert_eq!(pd["link"], serde_json::json!({"gbps": 200.0, "latency_ms": 1.0, "links": 1}));
    assert_eq!(out["config"]["engine"]["version"], "VllmV0");
    assert_eq!(out["config"]["max_model_len"], 8192);
    assert_eq!(out["completed"], 40);
    let roles: Vec<(&str, u64)> = out["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["role"].as_str().unwrap(), i["requests"].as_u64().unwrap()))
        .collect();
    assert_eq!(roles, [("prefill", 40), ("decode", 40)]);
    // A what-if of the file: a faster link and a decode pool of two, from the command line.
    let what_if = json(&[
        "run",
        "--deployment",
        ONE_P_ONE_D,
        "--num-prompts",
        "40",
        "--request-rate",
        "inf",
        "--decode-instances",
        "2",
        "--kv-link-gbps=400",
        "--json",
    ]);
    assert_eq!(what_if["config"]["cluster"]["pd"]["decode"], 2);
    assert_eq!(what_if["config"]["cluster"]["pd"]["link"]["gbps"], 400.0);
    assert_eq!(
        what_if["config"]["deployment_file"]["overridden"],
        serde_json::json!(["decode.instances", "link.gbps"])
    );
    assert_eq!(what_if["completed"], 40);
}

#[test]
fn a_flag_the_file_requires_may_come_from_the_command_line() {
    let (_dir, f) = deployment_file("num-prompts = 6\nrequest-rate = \"inf\"\n[prefill]\ninstances = 1\n");
    let out = json(&["run", "--deployment", &f, "--decode-instances", "1", "--json"]);
    assert_eq!(out["completed"], 6);
    assert_eq!(out["config"]["cluster"]["pd"]["decode"], 1);
    let e = fails(&["run", "--deployment", &f]);
    assert!(e.contains("--decode-instances"), "{e}");
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_one_prefill_one_decode_seed_serves_a_sharegpt_workload_of_the_seeds_size() {
    let Some(data) = common::data_dir() else { return };
    let trace = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz").display().to_string();
    let out = json(&[
        "run",
        "--deployment",
        ONE_P_ONE_D,
        "--trace",
        &trace,
        "--turns",
        "first",
        "--num-prompts",
        "1000",
        "--request-rate",
        "inf",
        "--json",
    ]);
    // The engines serve all 1,000 (the real run's 953 failures are the client's, not modelled).
    assert_eq!(out["completed"], 1000);
    assert_eq!(out["failed"], 0);
    let requests: Vec<u64> =
        out["instances"].as_array().unwrap().iter().map(|i| i["requests"].as_u64().unwrap()).collect();
    assert_eq!(requests, [1000, 1000]);
}
