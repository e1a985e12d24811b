//! vLLM's CPU KV offloading from the command line: the tier on the bundled sample under a GPU
//! pool too small for its sessions (more prompt tokens reused, the tier's line in the report
//! and in `--json`, the settings echoed), repeatable and thread-count independent, in a fleet,
//! and on a real trace. The rules themselves are checked by hand-computed scenarios in the
//! core (`sim::offload_tests`, `engine::vllm_offload`).

use crate::common;

/// The bundled sample on 300 GPU blocks, with `extra` flags.
fn small_pool(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["--num-gpu-blocks-override", "300"].iter().map(|s| s.to_string()).collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn json(args: &[String]) -> serde_json::Value {
    let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
    a.push("--json");
    serde_json::from_str(&common::ok(&a)).expect("JSON")
}

#[test]
fn the_host_tier_brings_back_what_the_gpu_pool_lost() {
    let plain = json(&small_pool(&[]));
    let tier = json(&small_pool(&["--kv-offloading-size", "16"]));
    assert!(plain.get("host_tier").is_none(), "no tier, no figures");
    assert!(plain["config"]["engine"].get("offload").is_none());
    let h = &tier["host_tier"];
    let loaded = h["host_hit_tokens"].as_u64().unwrap();
    assert!(loaded > 0 && h["loads"].as_u64().unwrap() > 0, "{h}");
    assert_eq!(tier["config"]["engine"]["offload"]["chunks"], 8192, "16 GiB of 2 MiB chunks");
    // Every host hit is a prompt token the plain run computed.
    let hit = |v: &serde_json::Value| v["hit_ratio"].as_f64().unwrap();
    assert!(hit(&tier) > hit(&plain) + 0.05, "{} vs {}", hit(&tier), hit(&plain));
    assert_eq!(tier["completed"], plain["completed"]);
    let text = common::ok(&small_pool(&["--kv-offloading-size", "16"]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        text.contains("· CPU offloading 16 GiB (8192 chunks of 16 tokens, host link 55.7 GB/s each way)"),
        "{text}"
    );
    assert!(text.contains("Host KV tier:   "), "{text}");
    // A faster link changes no hit, only when the copies end.
    let fast = json(&small_pool(&["--kv-offloading-size", "16", "--host-link-gbps", "500"]));
    assert_eq!(fast["host_tier"]["loaded_chunks"], h["loaded_chunks"]);
    assert!(fast["host_tier"]["load_s"].as_f64().unwrap() < h["load_s"].as_f64().unwrap());
}

#[test]
fn offloading_runs_repeat_at_any_thread_count_and_in_a_fleet() {
    let args = small_pool(&["--kv-offloading-size", "4", "--instances", "3", "--router", "kv-aware"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let one = common::ok_at_threads(&a, "1");
    assert_eq!(one, common::ok_at_threads(&a, "4"));
    let text = String::from_utf8(one).unwrap();
    assert!(text.contains("Host KV tier:") && text.contains("Successful requests:                     160"), "{text}");
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn a_real_trace_reuses_more_with_a_host_tier() {
    let Some(data) = common::data_dir() else { return };
    let trace = data.join("traces/mooncake/conversation_trace.jsonl");
    let base = [
        "--trace",
        trace.to_str().unwrap(),
        "--num-prompts",
        "2000",
        "--num-gpu-blocks-override",
        "4096",
        "--max-num-seqs",
        "256",
        "--json",
    ];
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        serde_json::from_str(&common::ok(&a)).unwrap()
    };
    let plain = run(&[]);
    let tier = run(&["--kv-offloading-size", "128"]);
    let hit = |v: &serde_json::Value| v["hit_ratio"].as_f64().unwrap();
    assert!(hit(&tier) > hit(&plain), "{} vs {}", hit(&tier), hit(&plain));
    assert!(tier["host_tier"]["host_hit_tokens"].as_u64().unwrap() > 0);
    assert_eq!(tier["completed"], plain["completed"]);
}
