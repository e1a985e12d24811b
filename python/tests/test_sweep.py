"""`cachesim.sweep` gives `cachesim sweep`'s points, metrics and ranked table, and the Ray
backend (a local Ray with two CPUs) gives exactly the local DataFrame."""

import pytest

import cachesim
from conftest import write_random_trace

GRID = {"max_num_seqs": [16, 24, 32, 48, 64], "max_num_batched_tokens": [2048, 4096]}
CLI_GRID = ["--grid", "max-num-seqs=16,24,32,48,64", "--grid", "max-num-batched-tokens=2048,4096"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_random_trace(tmp_path_factory.mktemp("sweep") / "r50.jsonl", 50, prompt=1024, output=1024)


def rows_of(df):
    return df.to_dict("records") if hasattr(df, "to_dict") else df


def test_sweep_is_the_cli_sweep(cli, cli_json, trace):
    doc = cli_json("sweep", "--json", "--trace", trace, "--request-rate", "20", *CLI_GRID)
    df = cachesim.sweep(GRID, trace=trace, request_rate=20)
    rows = rows_of(df)
    assert len(rows) == len(doc["results"]) == 10
    for got, want in zip(rows, doc["results"]):
        assert got["rank"] == want["rank"] and got["point"] == want["point"]
        assert {"max-num-seqs": str(got["max_num_seqs"]), "max-num-batched-tokens": str(got["max_num_batched_tokens"])} == want["knobs"]
        for k, v in want.items():
            if k not in ("rank", "point", "knobs"):
                assert got[k] == v, k
    text = cli("sweep", "--trace", trace, "--request-rate", "20", *CLI_GRID).stdout
    if hasattr(df, "attrs"):
        assert df.attrs["table"] in text
        assert df.attrs["rank_by"] == "output_throughput" and df.attrs["ascending"] is False


def test_grid_order_ranges_zip_and_refusals(trace):
    w = cachesim.Workload.from_file(trace)
    df = rows_of(cachesim.sweep({"max_num_seqs": "8..16:8"}, workload=w, zip={"seed": [1, 2], "request_rate": [5, 10]},
                                rank_by="median_ttft_ms"))
    assert sorted((r["point"], r["max_num_seqs"], r["seed"], r["request_rate"]) for r in df) == [
        (0, 8, 1, 5), (1, 8, 2, 10), (2, 16, 1, 5), (3, 16, 2, 10)]
    ttfts = [r["median_ttft_ms"] for r in df]
    assert ttfts == sorted(ttfts)  # latencies: smallest first
    # A point the engine refuses is a row with the reason, ranked last.
    df = rows_of(cachesim.sweep({"kv_cache_memory_bytes": [1000, 40 * 10**9]}, workload=w))
    assert df[-1]["kv_cache_memory_bytes"] == 1000 and "leaves no room for the KV cache" in df[-1]["error"]
    assert not isinstance(df[0]["error"], str) and df[0]["completed"] == 50  # None, or NaN in pandas


def test_ray_sweep_equals_local(trace):
    ray = pytest.importorskip("ray")
    pd = pytest.importorskip("pandas")
    w = cachesim.Workload.from_file(trace)
    local = cachesim.sweep(GRID, workload=w, request_rate=20)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = cachesim.sweep(GRID, workload=w, backend="ray", request_rate=20)
        one_task = cachesim.sweep(GRID, workload=w, backend="ray", tasks=1, request_rate=20)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(remote, local, check_exact=True)
    pd.testing.assert_frame_equal(one_task, local, check_exact=True)
    assert remote.attrs == local.attrs


def test_sweep_marks_points_within_error_of_the_best(cli):
    """As the command line's `near #1`: on the bundled sample sent at once, 8 sequences serve far
    less than 64 and 256, which the error bars cannot tell apart."""
    df = cachesim.sweep({"max_num_seqs": [8, 64, 256]}, request_rate="inf", num_prompts=100)
    marks = [r["within_error_of_best"] for r in rows_of(df)]
    assert marks == [True, True, False], marks
    if hasattr(df, "attrs"):
        text = cli("sweep", "--request-rate", "inf", "--num-prompts", "100", "--grid", "max-num-seqs=8,64,256").stdout
        assert "near #1" in df.attrs["table"] and df.attrs["table"] in text
