"""The same inputs give the same JSON as the command line: `run --json` (the summary), `cache
--json`, `analyze --json`, and the per-request CSV; a preloaded Workload gives what a fresh read
gives; a pickled Workload gives the same runs."""

import pickle

import pytest

import cachesim
from conftest import write_random_trace

RUNS = [
    {},
    {"max_num_seqs": 8, "max_num_batched_tokens": 1024},
    {"engine": "sglang", "schedule_policy": "lpm", "request_rate": 4},
    {"engine": "sglang", "enable_priority_scheduling": True, "priority_mix": "0:0.3,20:0.7", "request_rate": 20,
     "max_running_requests": 16, "priority_scheduling_preemption_threshold": 5},
    {"engine": "vllm-v0", "enable_chunked_prefill": True, "report_style": "vllm"},
    {"engine_version": "vllm@0.18", "num_prompts": 40, "seed": 3, "request_rate": "inf"},
    {"engine": "lightllm", "max_concurrency": 4},
    {"gpu": "a100-80gb", "tp": 2, "arrival_process": "vllm", "burstiness": 0.5, "request_rate": 10.5},
    {"instances": 3, "router": "least-load", "request_rate": 12},
    {"num_gpu_blocks_override": 300, "kv_offloading_size": 16, "host_link_gbps": 25},
    {"enable_lora": True, "lora_modules": ["sql", "chat", "code"], "max_loras": 2, "max_cpu_loras": 2,
     "lora_assignment": "round-robin", "request_rate": 8},
    {"instances": 3, "router": "llm-d", "enable_lora": True, "lora_modules": ["a", "b", "c"], "max_loras": 2,
     "lora_affinity_scorer_weight": 1.5, "refresh_metrics_interval_ms": 20, "request_rate": 12},
    {"instances": 3, "router": "cache-aware", "time_scale": 0.1, "fail_at": "5:1,8:2", "mtbf_s": 30, "migration_limit": 1},
    {"instances": 2, "router": "least-load", "time_scale": 0.1, "rolling_restart": 3, "recovery_s": 2, "drain_timeout_s": 0.5},
    {"router": "kv-aware", "time_scale": 0.02, "autoscale": "hpa", "max_instances": 4, "scale_metric": "in-flight",
     "scale_target": 8, "hpa_sync_period_s": 0.2, "cold_start_s": 0.5, "drain_timeout_s": 0.05, "goodput": ["ttft:100", "tpot:50"]},
]


def argv(kwargs):
    out = []
    for k, v in kwargs.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif isinstance(v, list):
            out.append(f"{flag}={','.join(v)}")
        elif v is not False:
            out.append(f"{flag}={v}")
    return out


@pytest.mark.parametrize("kwargs", RUNS, ids=lambda k: " ".join(argv(k)) or "defaults")
def test_run_summary_is_the_cli_json(cli_json, kwargs):
    expected = cli_json("run", "--json", *argv(kwargs))
    got = cachesim.run(**kwargs).summary
    assert got == expected
    assert list(got) == list(expected)  # and in the same key order


def test_trace_file_and_workload_reuse(cli_json, tmp_path):
    t = write_random_trace(tmp_path / "r.jsonl", 120)
    expected = cli_json("run", "--json", "--trace", t, "--request-rate", "15", "--max-num-seqs", "16")
    assert cachesim.run(t, request_rate=15, max_num_seqs=16).summary == expected
    w = cachesim.Workload.from_file(t)
    assert len(w) == 120
    assert w.info == expected["trace"]
    for _ in range(2):  # the workload is not consumed by a run
        assert cachesim.run(workload=w, request_rate=15, max_num_seqs=16).summary == expected
    back = pickle.loads(pickle.dumps(w))
    assert back.path == w.path and len(back) == 120
    assert cachesim.run(workload=back, request_rate=15, max_num_seqs=16).summary == expected


def test_a_priority_mix_is_drawn_with_the_workload(cli_json):
    args = ["--priority-mix", "0:0.3,1:0.7", "--seed", "4", "--scheduling-policy", "priority", "--max-num-seqs", "8"]
    expected = cli_json("run", "--json", *args)
    w = cachesim.Workload.from_file(None, priority_mix="0:0.3,1:0.7", seed=4)
    got = cachesim.run(workload=w, scheduling_policy="priority", max_num_seqs=8).summary
    assert got == expected
    assert [c["priority"] for c in got["priority_classes"]] == [0, 1]
    with pytest.raises(cachesim.Error, match="differently from how the Workload was built"):
        cachesim.run(workload=w, seed=5)
    with pytest.raises(TypeError, match="seed"):
        cachesim.Workload.from_file(None, seed=4)


def test_lora_adapters_are_drawn_with_the_workload(cli_json):
    args = ["--enable-lora", "--lora-modules", "a,b", "--seed", "2", "--max-num-seqs", "8"]
    expected = cli_json("run", "--json", *args)
    w = cachesim.Workload.from_file(None, lora_modules=["a", "b"], seed=2)
    assert cachesim.run(workload=w, enable_lora=True, max_num_seqs=8).summary == expected
    with pytest.raises(cachesim.Error, match="--enable-lora"):
        cachesim.run(workload=w, max_num_seqs=8)


def test_trace_flags_belong_to_the_workload(tmp_path):
    w = cachesim.Workload.from_file(write_random_trace(tmp_path / "r.jsonl", 10))
    with pytest.raises(TypeError, match="tokenizer"):
        cachesim.run(workload=w, tokenizer="o200k")
    with pytest.raises(TypeError, match="max_num_seqs"):
        cachesim.Workload.from_file(tmp_path / "r.jsonl", max_num_seqs=4)


def test_requests_and_steps_are_the_cli_csvs(cli, in_tmp):
    pd = pytest.importorskip("pandas")
    p = cli("run", "--max-num-seqs", "8", "--requests-csv", "req.csv", "--timeline-csv", "steps.csv")
    assert p.returncode == 0, p.stderr
    r = cachesim.run(max_num_seqs=8)
    pd.testing.assert_frame_equal(r.requests, pd.read_csv("req.csv"), check_exact=True)
    pd.testing.assert_frame_equal(r.steps, pd.read_csv("steps.csv"), check_exact=True)
    assert cachesim.run(max_num_seqs=8, keep_steps=False).steps is None


def test_output_files_are_written_as_by_the_cli(cli, in_tmp):
    p = cli("run", "--max-num-seqs", "8", "--requests-csv", "cli.csv", "--token-times-csv", "cli_tok.csv")
    assert p.returncode == 0, p.stderr
    r = cachesim.run(max_num_seqs=8, requests_csv="py.csv", token_times_csv="py_tok.csv")
    assert (in_tmp / "py.csv").read_bytes() == (in_tmp / "cli.csv").read_bytes()
    assert (in_tmp / "py_tok.csv").read_bytes() == (in_tmp / "cli_tok.csv").read_bytes()
    assert r.token_times is not None


def test_cache_is_the_cli_json(cli_json, tmp_path):
    expected = cli_json("cache", "--json", "--policy", "paged,radix", "--block", "16,32", "--capacity-tokens", "unlimited,5k")
    got = cachesim.cache(policy=["paged", "radix"], block=[16, 32], capacity_tokens=["unlimited", "5k"])
    assert got == expected
    w = cachesim.Workload.from_file()
    assert cachesim.cache(workload=w, policy="paged,radix", block="16,32", capacity_tokens="unlimited,5k") == expected
    # A host tier below the paged cache, as the command line replays it.
    tiered = cli_json("cache", "--json", "--policy", "paged", "--capacity-tokens", "5k", "--host-capacity-tokens", "0,20k")
    got = cachesim.cache(policy="paged", capacity_tokens="5k", host_capacity_tokens=[0, 20000])
    assert got == tiered
    assert [r["host_capacity_tokens"] for r in got["results"]] == [0, 20000]
    assert got["results"][1]["host_hit_tokens"] > 0


def test_analyze_is_the_cli_json(cli_json):
    assert cachesim.analyze(min_len=64) == cli_json("analyze", "--json", "--min-len", "64")
    assert cachesim.analyze(no_bounds=True, unit="tokens") == cli_json("analyze", "--json", "--no-bounds", "--unit", "tokens")


def test_without_pandas_rows_are_dicts(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now raises ImportError
    r = cachesim.run(max_num_seqs=8, num_prompts=20)
    rows = r.requests
    assert isinstance(rows, list) and len(rows) == r.summary["completed"] == 20
    assert set(rows[0]) >= {"id", "send_s", "first_token_s", "last_token_s", "prompt_tokens", "output_tokens"}
    table = cachesim.sweep({"max_num_seqs": [8, 16]}, num_prompts=20)
    assert [row["rank"] for row in table] == [1, 2]
