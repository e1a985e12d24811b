#!/usr/bin/env python3
"""Side by side with NVIDIA Dynamo's mocker (its `offline_replay_bench`): the same Mooncake
trace and engine settings, whole processes timed in alternating pairs on one core each, and
what each computed.

    gunzip -c ../shared/tools/mocker/dynamo_offline_replay_bench-1.6.1.gz > mocker && chmod +x mocker
    python3 scripts/mocker_compare.py --mocker ./mocker                    # every case, 5 pairs each
    python3 scripts/mocker_compare.py --mocker ./mocker --case one-1000 --pairs 9

Each case runs A B A B … after one warm-up of each (absolute times on a shared machine wander;
the ratio of medians from the same run does not), pinned to one core with `taskset -c 0` where
it exists and RAYON_NUM_THREADS=1. Wall and CPU seconds and peak RSS come from os.wait4. The
outcome columns are each tool's own report: cachesim's `--json`, the mocker's `--report-json`.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from process_timing import measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]

# name, requests (None: the whole trace), instances, cachesim router, mocker router mode
CASES = [
    ("one-1000", 1000, 1, None, "round-robin"),
    ("one", None, 1, None, "round-robin"),
    ("sixteen-kv", None, 16, "kv-aware", "kv-router"),
    ("sixteen-rr", None, 16, "round-robin", "round-robin"),
]


def commands(cachesim, mocker, trace, instances, router, mode, report):
    c = [cachesim, "--trace", trace, "--block", "16", "--num-gpu-blocks-override", "16384", *ENGINE]
    if instances > 1:
        c += ["--instances", str(instances), "--router", router]
    m = [mocker, trace, "--num-workers", str(instances), "--router-mode", mode, "--block-size", "16",
         "--arrival-speedup-ratio", "1", "--trace-block-size", "512", "--num-gpu-blocks", "16384", *ENGINE,
         "--iterations", "1", "--report-json", report]
    return c, m


def once(cmd, pin):
    """(wall s, CPU s, peak RSS MB) of one whole process."""
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    full = (["taskset", "-c", "0"] if pin else []) + cmd
    return measure(full, env, f"mocker_compare.py: {' '.join(cmd[:2])}")


def outcomes(cachesim_cmd, report):
    c = json.loads(subprocess.run(cachesim_cmd + ["--json"], env=dict(os.environ, RAYON_NUM_THREADS="1"),
                                  check=True, capture_output=True, text=True).stdout)
    m = json.load(open(report))
    return [
        ("completed", c["completed"], m.get("completed_requests")),
        ("duration s", c["duration"], m.get("duration_ms", 0) / 1e3),
        ("output tok/s", c["output_throughput"], m.get("output_throughput_tok_s")),
        ("mean TTFT ms", c["mean_ttft_ms"], m.get("mean_ttft_ms")),
        ("median TTFT ms", c["median_ttft_ms"], m.get("median_ttft_ms")),
        ("p99 TTFT ms", c["p99_ttft_ms"], m.get("p99_ttft_ms")),
        ("mean TPOT ms", c["mean_tpot_ms"], m.get("mean_tpot_ms")),
        ("prefix reuse, first admission", c["hit_ratio"], m.get("first_admission_prefix_cache_reused_ratio")),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mocker", required=True, help="the mocker's executable (unpacked)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "cachesim"))
    ap.add_argument("--trace", default=os.path.join(ROOT, "..", "shared", "data", "traces", "mooncake",
                                                     "conversation_trace.jsonl"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--case", action="append", choices=[c[0] for c in CASES], help="only these cases")
    a = ap.parse_args()
    pin = shutil.which("taskset") is not None
    tmp = tempfile.mkdtemp()
    for name, requests, instances, router, mode in CASES:
        if a.case and name not in a.case:
            continue
        trace = a.trace
        if requests:
            trace = os.path.join(tmp, f"first_{requests}.jsonl")
            with open(a.trace, encoding="utf-8") as f, open(trace, "w", encoding="utf-8") as out:
                for _, line in zip(range(requests), f):
                    out.write(line)
        report = os.path.join(tmp, f"{name}.json")
        c, m = commands(a.bin, a.mocker, trace, instances, router, mode, report)
        once(c, pin), once(m, pin)  # warm-up
        runs = {"cachesim": [], "mocker": []}
        for _ in range(a.pairs):
            runs["cachesim"].append(once(c, pin))
            runs["mocker"].append(once(m, pin))
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in runs.items()}
        print(f"## {name}: {instances} instance(s), {requests or 'all'} requests, {a.pairs} pairs"
              f"{', one core' if pin else ''}")
        print("| | cachesim | mocker | cachesim / mocker |")
        print("|---|---|---|---|")
        for i, what in enumerate(["wall s (median)", "CPU s (median)", "peak RSS MB"]):
            x, y = med["cachesim"][i], med["mocker"][i]
            print(f"| {what} | {x:.3f} | {y:.3f} | {x / y:.3f} ({y / x:.1f}× {'faster' if i < 2 else 'less'}) |")
        for what, x, y in outcomes(c, report):
            print(f"| {what} | {x:.4g} | {'-' if y is None else format(y, '.4g')} | |")
        print()
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
