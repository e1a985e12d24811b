#!/usr/bin/env python3
"""Predicts llm-d's published KV-offloading benchmarks and prints them beside the measurements.

The sources: llm-d's "Tiered prefix cache" guide (github.com/llm-d/llm-d,
guides/tiered-prefix-cache/README.md, "CPU Offloading Benchmarking Results"; the table as
committed in 92255db, 2026-06-02, with the manifests it was measured with) and its SGLang
counterpart (llm-d PR #1921, guides/tiered-prefix-cache/benchmark-results/
sglang-qwen3-32b-h100.md): Qwen3-32B on 16 H100s as 8 servers of TP 2 behind llm-d's endpoint
picker. vLLM 0.19.1: HBM only (the optimized-baseline guide: --gpu-memory-utilization 0.95,
scorers queue 2, KV utilization 2, prefix 3, no-hit LRU 2) against vLLM's native CPU offloading
(OffloadingConnector, cpu_bytes_to_use 200 GiB a server, the default 0.9 utilization, every
scorer weight 1 and a second approximate prefix producer for the CPU tier). SGLang 0.5.13.post1
at --mem-fraction-static 0.9: HBM only against HiCache with --hicache-size 200 (the same two
routers assumed: the PR does not show its router). The workload is inference-perf 0.4.0's
`shared_prefix` profile (llm-d-benchmark workload/profiles/inference-perf/
guide_tiered-prefix-cache_1.yaml.in): 250 groups × 5 prompts of a 16,000-token system prompt
and a 256-token question, 256 output tokens with ignore_eos, the 1,250 prompts shuffled once;
Poisson stages of 60 s at 5, 10, …, 40 requests/s, each sending rate × 60 requests from the
first prompt of the shuffled order again, then waiting for them all and 60 s more.

What this script does: writes that workload as a Mooncake-format trace (blocks of 64 tokens,
a group's system prompt 250 shared blocks, each question 4 blocks of its own, the stages
2,000 s apart so each drains first; inference-perf's 1-second Poisson slots), runs `cachesim`
on it once per engine, variant and router release with --requests-csv, and summarises each
stage as inference-perf does (TTFT and E2E over the stage's requests: mean and NumPy-linear
P90; throughput = input and output tokens over last end − first send). The measured rows are
the sources'.

What differs from the measured runs: vLLM 0.19.1 and SGLang 0.5.13.post1 ran them, cachesim
prices vllm@0.33 (the only bundle with the offloading connector) and sglang@0.5; the router
image was a floating `main` tag, and llm-d-router 44582a8f4, which floors the prefix
producers' blocks at 64 tokens, merged six hours before the vLLM table was committed, so
--release runs either or both (cachesim's --epp-release); the measured prompts are random ids decoded to text and
re-tokenised (lengths drift a little). Seeds are not stated (inference-perf 0.4.0 draws
unseeded): --seeds repeats.

Usage: python3 scripts/llmd_tiered.py --cachesim target/release/cachesim [--seeds 3] [--engine vllm]
       [--release 44582a8f4|520af478|both] [--json]
"""

import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile

SOURCE = "github.com/llm-d/llm-d guides/tiered-prefix-cache/README.md (92255db, 2026-06-02)"
RATES = [5, 10, 15, 20, 25, 30, 35, 40]
STAGE_SECONDS = 60
STAGE_GAP_S = 2000.0
GROUPS, PER_GROUP, SYSTEM, QUESTION, OUTPUT = 250, 5, 16000, 256, 256
BLOCK = 64

# The guides' tables: engine -> variant -> rate -> (mean TTFT s, P90 TTFT s, mean E2E s, P90 E2E s, tok/s).
MEASURED = {
    "vllm": {
        "hbm": {
            5: (1.62, 2.65, 11.98, 21.60, 74638.5),
            10: (8.08, 16.61, 26.28, 32.60, 122387.7),
            20: (43.67, 78.13, 62.29, 92.14, 114663.2),
            40: (115.57, 206.39, 134.78, 223.93, 115645.0),
        },
        "cpu": {
            5: (1.17, 1.79, 11.49, 20.25, 82880.0),
            10: (0.41, 1.31, 6.97, 9.23, 167027.5),
            20: (0.89, 2.66, 9.03, 11.22, 300749.2),
            40: (25.38, 48.14, 33.95, 56.29, 331212.6),
        },
    },
    # guides/tiered-prefix-cache/benchmark-results/sglang-qwen3-32b-h100.md (llm-d PR #1921).
    "sglang": {
        "hbm": {
            5: (2.12, 4.35, 9.54, 13.67, 68517.5),
            10: (9.76, 19.66, 25.62, 34.78, 111155.9),
            20: (40.55, 76.70, 53.77, 87.84, 117451.7),
            40: (107.88, 185.77, 121.07, 199.02, 115459.0),
        },
        "cpu": {
            5: (0.95, 1.39, 10.26, 18.55, 73860.3),
            10: (0.43, 1.27, 7.74, 11.08, 152045.3),
            20: (1.56, 3.99, 9.61, 12.21, 280447.9),
            40: (25.56, 47.25, 33.61, 54.66, 308779.8),
        },
    },
}

COMMON = [
    "--model", "qwen3-32b", "--gpu", "h100-sxm", "--tp", "2", "--instances", "8",
    "--router", "llm-d", "--max-model-len", "40960", "--trace-block-size", str(BLOCK), "--report-style", "vllm",
]
# The routers: guides/optimized-baseline (queue 2, KV utilization 2, prefix 3, no-hit LRU 2) for
# HBM only; guides/tiered-prefix-cache/cpu (every scorer 1, a GPU and a CPU prefix producer
# matching up to 40,000 tokens, the CPU one an LRU of 82,000 blocks a server) with the tier.
ROUTER = {
    "hbm": ["--queue-scorer-weight", "2", "--kv-cache-utilization-scorer-weight", "2",
            "--prefix-cache-scorer-weight", "3", "--no-hit-lru-scorer-weight", "2"],
    "cpu": ["--queue-scorer-weight", "1", "--kv-cache-utilization-scorer-weight", "1",
            "--prefix-cache-scorer-weight", "1", "--cpu-prefix-cache-scorer-weight", "1",
            "--cpu-lru-capacity-per-server", "82000", "--max-prefix-tokens-to-match", "40000",
            "--no-hit-lru-scorer-weight", "1"],
}
ENGINES = {
    # vLLM 0.19.1 measured; vllm@0.33 is the bundle with the offloading connector.
    "vllm": {
        "hbm": ["--engine-version", "vllm@0.33", "--gpu-memory-utilization", "0.95"],
        "cpu": ["--engine-version", "vllm@0.33", "--gpu-memory-utilization", "0.9", "--kv-offloading-size", "200"],
    },
    # SGLang 0.5.13.post1 measured, --mem-fraction-static 0.9 (the PR's thread); sglang@0.5.
    "sglang": {
        "hbm": ["--engine-version", "sglang@0.5", "--mem-fraction-static", "0.9"],
        "cpu": ["--engine-version", "sglang@0.5", "--mem-fraction-static", "0.9", "--enable-hierarchical-cache",
                "--hicache-size", "200"],
    },
}


def poisson(rng, lam):
    """Knuth's method (lam ≤ 40 here)."""
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def stage_times(rng, rate):
    """inference-perf 0.4.0 PoissonLoadTimer: per 1 s slot a Poisson count, placed by exponential
    gaps scaled to fill the slot, until rate × 60 requests are placed."""
    n, times, slot = rate * STAGE_SECONDS, [], 0
    while len(times) < n:
        k = poisson(rng, rate)
        if k:
            gaps = [rng.expovariate(1.0) for _ in range(k)]
            total, t = sum(gaps), 0.0
            for g in gaps:
                t += g / total
                times.append(slot + t)
        slot += 1
    return times[:n]


def write_trace(path, seed):
    rng = random.Random(seed)
    prompts = [(g, q) for g in range(GROUPS) for q in range(PER_GROUP)]
    rng.shuffle(prompts)
    sys_blocks, q_blocks = SYSTEM // BLOCK, QUESTION // BLOCK
    question_base = GROUPS * sys_blocks
    stages = []
    with open(path, "w") as f:
        for s, rate in enumerate(RATES):
            start = s * STAGE_GAP_S
            times = stage_times(rng, rate)
            stages.append((rate, start, len(times)))
            for i, t in enumerate(times):
                g, q = prompts[i % len(prompts)]
                ids = list(range(g * sys_blocks, (g + 1) * sys_blocks))
                first_q = question_base + (g * PER_GROUP + q) * q_blocks
                ids += list(range(first_q, first_q + q_blocks))
                rec = {"timestamp": round((start + t) * 1000.0, 3), "input_length": SYSTEM + QUESTION,
                       "output_length": OUTPUT, "hash_ids": ids}
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return stages


def percentile(xs, q):
    """NumPy's default (linear) percentile."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(csv_path, stages):
    rows = [(float(r["send_s"]), float(r["first_token_s"]), float(r["last_token_s"]),
             int(r["prompt_tokens"]) + int(r["output_tokens"])) for r in csv.DictReader(open(csv_path))
            if r["last_token_s"] != ""]
    out = {}
    for rate, start, _ in stages:
        # cachesim starts the clock at the first send, so a stage is the sends within half a gap.
        mine = [r for r in rows if abs(r[0] - start) < STAGE_GAP_S / 2]
        ttft = [first - send for send, first, _, _ in mine]
        e2e = [last - send for send, _, last, _ in mine]
        span = max(r[2] for r in mine) - min(r[0] for r in mine)
        toks = sum(r[3] for r in mine)
        out[rate] = (sum(ttft) / len(ttft), percentile(ttft, 90), sum(e2e) / len(e2e), percentile(e2e, 90), toks / span)
    return out


RELEASES = {
    "44582a8f4": "llm-d-router 44582a8f4 on: prefix blocks floored at 64 tokens",
    "520af478": "llm-d-inference-scheduler 520af478: prefix blocks of 16 tokens",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cachesim", default="target/release/cachesim")
    ap.add_argument("--seeds", type=int, default=1, help="workload seeds (the median of each figure is shown)")
    ap.add_argument("--engine", choices=list(ENGINES), action="append", help="only these engines [default: both]")
    ap.add_argument("--release", choices=[*RELEASES, "both"], default="44582a8f4",
                    help="the router release(s) to run [default: 44582a8f4]; 520af478 hashes SGLang's prompts in "
                         "blocks of its 1-token pages, a minute a run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    engines = args.engine or list(ENGINES)
    releases = list(RELEASES) if args.release == "both" else [args.release]
    keys = [(e, rel, v) for e in engines for rel in releases for v in ROUTER]
    results = {k: {} for k in keys}
    with tempfile.TemporaryDirectory() as d:
        for seed in range(args.seeds):
            trace = os.path.join(d, f"trace{seed}.jsonl")
            stages = write_trace(trace, seed)
            for (e, rel, v), per in results.items():
                req = os.path.join(d, f"{e}-{rel}-{v}{seed}.csv")
                cmd = [args.cachesim, "--trace", trace, *COMMON, *ENGINES[e][v], *ROUTER[v], "--epp-release", rel,
                       "--seed", str(seed), "--requests-csv", req]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                for rate, fig in summarise(req, stages).items():
                    per.setdefault(rate, []).append(fig)
    med = {k: {r: tuple(percentile([f[i] for f in figs], 50) for i in range(5)) for r, figs in per.items()}
           for k, per in results.items()}
    errors = {}
    for (e, rel, v), per in med.items():
        for rate, m in MEASURED[e][v].items():
            errors.setdefault((e, rel), []).extend(abs(p / x - 1.0) * 100.0 for p, x in zip(per[rate], m))
    if args.json:
        out = {e: {rel: {v: med[(e, rel, v)] for v in ROUTER} for rel in releases} for e in engines}
        print(json.dumps({"source": SOURCE, "seeds": args.seeds, "predicted": out,
                          "measured": {e: MEASURED[e] for e in engines},
                          "median_abs_error_pct": {f"{e} {rel}": percentile(x, 50) for (e, rel), x in errors.items()}},
                         indent=1))
        return
    print(f"llm-d tiered prefix cache, Qwen3-32B on 8 × TP2 H100 (measured: {SOURCE} and PR #1921)")
    print(f"predicted / measured (median over {args.seeds} workload seed(s)): mean and P90 TTFT (s), "
          "mean and P90 E2E (s), throughput (input + output tok/s)")
    names = ["mean TTFT", "P90 TTFT", "mean E2E", "P90 E2E", "tok/s"]
    for e in engines:
        for rel in releases:
            what = RELEASES[rel]
            for v, label in (("hbm", "HBM only"), ("cpu", "GPU + CPU (200 GiB a server)")):
                print(f"\n{e}, {label}, router {what}")
                print(f"{'QPS':>4}  " + "  ".join(f"{n:>17}" for n in names))
                for rate in RATES:
                    p, m = med[(e, rel, v)][rate], MEASURED[e][v].get(rate)
                    cells = []
                    for i in range(5):
                        fmt = "{:.0f}" if i == 4 else "{:.2f}"
                        cell = fmt.format(p[i]) + (" / " + fmt.format(m[i]) if m else "")
                        cells.append(f"{cell:>17}")
                    print(f"{rate:>4}  " + "  ".join(cells))
    print()
    for (e, rel), x in errors.items():
        print(f"{e}, router {rel}: median |error| {percentile(x, 50):.1f} % over the {len(x)} published figures")


if __name__ == "__main__":
    sys.exit(main())
