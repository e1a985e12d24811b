//! Instance failures through the binary: the failure table in the text report and
//! `instance_failures` in `--json`, every request sent completing or failing, migration keeping
//! them all, a rolling restart taking every instance down in turn without losing a request, the
//! same seed giving the same bytes under `--mtbf-s`, `plan` holding the failed share to an SLO
//! limit (`failed_pct`), and the refusals (a flag that means nothing
//! without a failure or a restart, an instance that does not exist, PD pools, vLLM V0).

use crate::common::{fails, ok, ok_at_threads};

/// The bundled sample at ten times its load on four instances.
const BASE: [&str; 6] = ["--time-scale", "0.1", "--instances", "4", "--router", "kv-aware"];

fn json(extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = BASE.iter().copied().chain(extra.iter().copied()).chain(["--json"]).collect();
    serde_json::from_str(&ok(&args)).expect("JSON")
}

#[test]
fn a_failure_loses_or_migrates_requests_and_every_request_is_accounted_for() {
    for (limit, migrated) in [("0", false), ("1", true)] {
        let d = json(&["--fail-at", "10:2", "--migration-limit", limit]);
        let f = &d["instance_failures"];
        let events = f["events"].as_array().expect("events");
        assert_eq!(events.len(), 1, "{f}");
        assert_eq!((events[0]["instance"].as_u64(), events[0]["time_s"].as_f64()), (Some(2), Some(10.0)));
        assert_eq!(events[0]["back_s"].as_f64(), Some(70.0), "the default recovery is 60 s");
        let lost = f["lost"].as_u64().unwrap();
        assert!(lost > 0, "instance 2 held requests at 10 s: {f}");
        let sent = d["requests_sent"].as_u64().unwrap();
        let (completed, failed) = (d["completed"].as_u64().unwrap(), d["failed_reasons"].as_object().unwrap());
        let failed: u64 = failed.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(completed + failed, sent);
        if migrated {
            assert_eq!((f["migrated"].as_u64(), f["failed"].as_u64()), (Some(lost), Some(0)));
            assert_eq!(completed, sent);
            assert_eq!(f["completed_after_migrating"].as_u64(), Some(lost));
        } else {
            assert_eq!((f["migrated"].as_u64(), f["failed"].as_u64()), (Some(0), Some(lost)));
            assert_eq!(d["failed_reasons"]["instance_failed"].as_u64(), Some(lost));
        }
        assert_eq!(d["config"]["faults"]["migration_limit"].as_u64(), Some(limit.parse().unwrap()));
    }
    // A run without failures says nothing of them.
    let d = json(&[]);
    assert!(d.get("instance_failures").is_none() && d["config"].get("faults").is_none());
}

#[test]
fn a_rolling_restart_takes_each_instance_down_in_turn_and_loses_nothing() {
    let d = json(&["--rolling-restart", "2", "--recovery-s", "3"]);
    let f = &d["instance_failures"];
    assert_eq!(
        (f["restarts"].as_u64(), f["failures"].as_u64(), f["lost"].as_u64()),
        (Some(4), Some(0), Some(0)),
        "{f}"
    );
    let events = f["events"].as_array().unwrap();
    let order: Vec<u64> = events.iter().map(|e| e["instance"].as_u64().unwrap()).collect();
    assert_eq!(order, [0, 1, 2, 3]);
    for pair in events.windows(2) {
        // The next instance drains when the one before serves again, and stops once drained.
        let (back, next) = (pair[0]["back_s"].as_f64().unwrap(), &pair[1]);
        let started = next["time_s"].as_f64().unwrap() - next["drain_s"].as_f64().unwrap();
        assert!((started - back).abs() < 1e-9, "{pair:?}");
        assert!(next["drain_s"].as_f64().unwrap() <= 30.0);
    }
    assert!(events.iter().all(|e| e["kind"] == "restart"));
    assert_eq!(d["completed"].as_u64(), d["requests_sent"].as_u64());
    // A drain timeout shorter than the requests held: what is left migrates.
    let d =
        json(&["--rolling-restart", "2", "--recovery-s", "3", "--drain-timeout-s", "0.2", "--migration-limit", "1"]);
    let f = &d["instance_failures"];
    assert!(f["migrated"].as_u64().unwrap() > 0 && f["failed"].as_u64() == Some(0), "{f}");
    assert_eq!(d["completed"].as_u64(), d["requests_sent"].as_u64());
}

#[test]
fn the_text_report_has_the_failure_table_and_the_echo_line() {
    let args: Vec<&str> = BASE.iter().copied().chain(["--fail-at", "10:2,15:0", "--recovery-s", "3"]).collect();
    let out = ok(&args);
    assert!(
        out.contains("Failures:       instance 2 at 10 s, instance 0 at 15 s · recovery 3 s · migration limit 0"),
        "{out}"
    );
    let table = out.split("= Instance failures =").nth(1).expect("the failure table");
    assert!(table.contains("2 failures (recovery 3 s, migration limit 0)"), "{table}");
    let rows: Vec<&str> =
        table.lines().filter(|l| l.trim_start().starts_with("10.00") || l.trim_start().starts_with("15.00")).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].contains("13.00"), "back 3 s later: {}", rows[0]);
}

#[test]
fn random_failures_repeat_with_the_seed_at_any_thread_count() {
    let args = |seed: &'static str| -> Vec<&'static str> {
        BASE.iter()
            .copied()
            .chain(["--mtbf-s", "20", "--recovery-s", "5", "--migration-limit", "2", "--seed", seed])
            .collect()
    };
    let a = ok_at_threads(&args("1"), "1");
    assert_eq!(a, ok_at_threads(&args("1"), "2"));
    assert_ne!(a, ok_at_threads(&args("2"), "1"), "another seed, other failures");
    let text = String::from_utf8(a).unwrap();
    assert!(text.contains("MTBF 20 s (seeded)") && text.contains("= Instance failures ="), "{text}");
}

#[test]
fn plan_holds_the_failed_share_to_its_limit() {
    // The bundled sample at 2 req/s (80 s), each instance failing every 30 s on average and
    // down 20 s: without migration every count loses more than 1 % of the requests (each
    // instance fails as often, and holds fewer requests when it does); with it none do.
    let plan = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["plan", "--slo", "ttft_p99=2000,failed_pct=1", "--target-rate", "2", "--instances", "1..8"];
        args.extend(["--mtbf-s", "30", "--recovery-s", "20", "--json"]);
        args.extend(extra);
        serde_json::from_str(&ok(&args)).expect("JSON")
    };
    let d = plan(&[]);
    let r = &d["results"][0];
    assert!(r["instances"].is_null() && r["tried"] == serde_json::json!([[8, false]]), "{r}");
    let d = plan(&["--migration-limit", "2"]);
    let r = &d["results"][0];
    assert!(r["instances"].as_u64().is_some(), "{r}");
    assert!(r["at_target"]["slo_values"]["failed_pct"].as_f64().unwrap() <= 1.0, "{r}");
    let text = ok(&[
        "plan",
        "--slo",
        "ttft_p99=2000,failed_pct=1",
        "--target-rate",
        "2",
        "--mtbf-s",
        "30",
        "--recovery-s",
        "20",
    ]);
    assert!(text.contains("SLO:            p99_ttft_ms <= 2000 ms, failed_pct <= 1 %"), "{text}");
}

#[test]
fn failure_flags_are_refused_where_they_mean_nothing_or_cannot_be() {
    for (args, says) in [
        (vec!["--migration-limit", "1"], "--migration-limit: means nothing without instance failures"),
        (vec!["--recovery-s", "30"], "--recovery-s: means nothing without instance failures"),
        (vec!["--drain-timeout-s", "5"], "--drain-timeout-s: means nothing without a rolling restart"),
        (vec!["--rolling-restart", "-1"], "--rolling-restart: -1 must be a number of seconds 0 or more"),
        (
            vec!["--instances", "2", "--fail-at", "10:2"],
            "instance 2 does not exist: the deployment has 2 instances (0 to 1)",
        ),
        (
            vec!["--fail-at", "10:0", "--prefill-instances", "1", "--decode-instances", "1"],
            "not yet for prefill/decode pools",
        ),
        (vec!["--fail-at", "10:0", "--engine", "vllm-v0"], "not modelled for vLLM V0"),
        (vec!["--mtbf-s", "0"], "--mtbf-s: 0 must be a number of seconds above 0"),
        (vec!["--fail-at", "10:0", "--recovery-s", "-1"], "--recovery-s: -1 must be a number of seconds 0 or more"),
        (vec!["--fail-at", "ten:0"], "`ten` in `ten:0` is not a number of seconds"),
        (vec!["--fail-at", "10"], "is not SECONDS:INSTANCE"),
    ] {
        let e = fails(&args);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}
