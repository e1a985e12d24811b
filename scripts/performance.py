#!/usr/bin/env python3
"""Regenerates docs/performance-figures.md: the speed and memory of the commands that
docs/performance.md discusses, and what each run computed (steps, preemptions, hit ratios,
cache tables), from the release binary over the real traces.

    python3 scripts/performance.py                 # time every case (best and median of --repeat runs)
    python3 scripts/performance.py --check         # fail if what the runs compute has changed

Timings are wall seconds and peak resident memory of the whole process (os.wait4), on the
machine the script runs on; a shared machine's figures wander by a third from hour to hour, so
the page says when and how they were taken. The computed figures (the `--check` part) do not
depend on the machine: CI fails when the model changes them and the page was not regenerated.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from process_timing import measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "performance-figures.md")
DATA_LINE = "<!-- computed: "

MOONCAKE = "{data}/traces/mooncake/conversation_trace.jsonl"
SHAREGPT = "{data}/traces/sharegpt/sharegpt_v3_head.jsonl.gz"
VLLM_MOONCAKE = ["--block", "16", "--num-gpu-blocks-override", "16384", "--max-num-seqs", "256",
                 "--max-num-batched-tokens", "8192"]

# (name, what it is, arguments, single-threaded, kind of output)
CASES = [
    ("mooncake-vllm", "Mooncake conversation trace, 12,031 requests at their time stamps, one vLLM v1 instance",
     ["--trace", MOONCAKE, *VLLM_MOONCAKE], True, "run"),
    ("mooncake-vllm-1000", "its first 1,000 requests by arrival (`--num-prompts 1000`)",
     ["--trace", MOONCAKE, *VLLM_MOONCAKE, "--num-prompts", "1000"], True, "run"),
    ("mooncake-sglang", "the same trace, one SGLang instance of about the same KV capacity",
     ["--trace", MOONCAKE, "--engine", "sglang", "--max-total-tokens", "262144"], True, "run"),
    ("mooncake-lightllm", "the same trace, one LightLLM instance",
     ["--trace", MOONCAKE, "--engine", "lightllm", "--max-total-tokens", "262144", "--max-model-len", "131072"],
     True, "run"),
    ("sharegpt-multi-turn", "ShareGPT V3 multi-turn, 61,239 turn requests sent at once, vLLM defaults",
     ["--trace", SHAREGPT], False, "run"),
    *[(f"mooncake-16-{r}", f"Mooncake on 16 vLLM instances, `--router {r}`",
       ["--trace", MOONCAKE, *VLLM_MOONCAKE, "--instances", "16", "--router", r], True, "run")
      for r in ["round-robin", "kv-aware", "cache-aware", "aibrix"]],
    ("cache-mooncake-all", "cache replay of Mooncake, every policy, blocks 16, 32, 512, unlimited",
     ["cache", "--trace", MOONCAKE, "--policy", "all", "--block", "16,32,512"], False, "cache"),
    ("cache-mooncake-bounded", "cache replay of Mooncake, 4M and 1M tokens, 8 in flight",
     ["cache", "--trace", MOONCAKE, "--policy", "paged,radix,token", "--capacity-tokens", "4M,1M", "--inflight", "8"],
     False, "cache"),
    ("cache-sharegpt-all", "cache replay of ShareGPT multi-turn, every policy, blocks 16, 32",
     ["cache", "--trace", SHAREGPT, "--policy", "all", "--block", "16,32"], False, "cache"),
    ("sweep-1", "sweep of 1 configuration × 1,000 ShareGPT first turns (reading and tokenising the trace)",
     ["sweep", "--trace", SHAREGPT, "--turns", "first", "--num-prompts", "1000", "--request-rate", "20",
      "--grid", "max-num-seqs=16"], False, "sweep"),
    ("sweep-1000", "sweep of 1,000 configurations × 1,000 ShareGPT first turns",
     ["sweep", "--trace", SHAREGPT, "--turns", "first", "--num-prompts", "1000",
      "--grid", "max-num-seqs=16..160:16", "--grid", "max-num-batched-tokens=2048..11264:1024",
      "--grid", "request-rate=5..50:5"], False, "sweep"),
    ("plan-3", "plan over 3 configurations × 1,000 ShareGPT first turns",
     ["plan", "--trace", SHAREGPT, "--turns", "first", "--num-prompts", "1000", "--slo", "ttft_p99=2000,tpot_p99=50",
      "--grid", "max-num-seqs=16,64,256"], False, "plan"),
]


def argv(binary, data, args, json_out):
    words = [a.replace("{data}", data) for a in args]
    return [binary, *words, *(["--json"] if json_out else [])]


def env_for(single):
    env = dict(os.environ)
    if single:
        env["RAYON_NUM_THREADS"] = "1"
    return env


def computed(binary, data, case):
    """What the run computes (machine-independent), from its --json."""
    name, _, args, single, kind = case
    out = subprocess.run(argv(binary, data, args, True), env=env_for(single), check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    if kind == "run":
        return {"completed": d["completed"], "failed": d["failed"], "steps": d["steps"],
                "preemptions": d["preemptions"], "output_tokens": d["total_output_tokens"],
                "hit_ratio_pct": round(d["hit_ratio"] * 100, 2)}
    if kind == "cache":
        rows = []
        for r in d["results"]:
            rows.append([r["policy"], r["block_size"], r["page_size"], r["capacity_tokens"], r["hit_tokens"],
                         r["evicted_tokens"], r["peak_used_tokens"]])
        return {"rows": rows}
    if kind == "sweep":
        res = d["results"]
        return {"points": len(res), "failed": sum(1 for r in res if "error" in r),
                "best": res[0]["knobs"] if res else None}
    if kind == "plan":
        return {"configurations": len(d["results"]),
                "max_rates": [round(r.get("max_rate") or 0.0, 3) for r in d["results"]]}
    raise ValueError(kind)


def timed(binary, data, case, repeat):
    """Wall seconds of each of `repeat` runs of the text command, and the largest peak RSS (MB)."""
    _, _, args, single, _ = case
    walls, rss = [], 0
    for _ in range(repeat):
        wall, _, peak = measure(argv(binary, data, args, False), env_for(single), f"performance.py: {case[0]}")
        walls.append(wall)
        rss = max(rss, peak)
    return walls, rss


def stored():
    if not os.path.exists(PAGE):
        return {}
    for line in open(PAGE, encoding="utf-8"):
        if line.startswith(DATA_LINE):
            return json.loads(line[len(DATA_LINE):].rstrip().removesuffix("-->").strip())
    return {}


def render(results, meta):
    out = [
        "# Performance figures (generated)",
        "",
        "Written by `python3 scripts/performance.py` from the release binary; do not edit by hand.",
        "What the figures mean and how the simulator got there: [performance.md](performance.md).",
        f"Measured {meta['when']} at commit {meta['commit']} on {meta['machine']}: the best and the median of",
        f"{meta['repeat']} runs of each whole command (wall seconds), and its largest peak resident memory. CI runs",
        "`python3 scripts/performance.py --check`, which fails when what a run computes (the right-hand",
        "columns) differs from what the binary computes now.",
        "",
        "Every command runs as `cachesim ARGS` with the traces under `../shared/data/traces`; "
        "\"1 thread\" means `RAYON_NUM_THREADS=1`.",
        "",
        "| case | what | threads | best s | median s | peak MB | computed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, what, args, single, _ in CASES:
        r = results[name]
        shown = "; ".join(f"{k} {v}" for k, v in r["computed"].items() if k != "rows")
        if "rows" in r["computed"]:
            shown = f"{len(r['computed']['rows'])} replays"
        out.append(f"| `{name}` | {what} | {'1' if single else 'all'} | {r['best']:.3f} | {r['median']:.3f} "
                   f"| {r['rss']:.0f} | {shown} |")
    out += ["", "The commands:", "", "```sh"]
    for name, _, args, single, _ in CASES:
        words = " ".join(a.replace("{data}", "../shared/data") for a in args)
        out.append(f"{'RAYON_NUM_THREADS=1 ' if single else ''}cachesim {words}    # {name}")
    out += ["```", "", DATA_LINE + json.dumps({n: r["computed"] for n, r in results.items()}, sort_keys=True) + " -->",
            ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "cachesim"))
    ap.add_argument("--data", default=os.environ.get("CACHESIM_DATA", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per case (default 5)")
    ap.add_argument("--check", action="store_true", help="fail if what the runs compute is not what the page says")
    ap.add_argument("--machine", default="the 2-core reference machine", help="how the page names the machine")
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"performance.py: no data folder at {a.data} (set CACHESIM_DATA)")
    data = os.path.abspath(a.data)
    if a.check:
        old = stored()
        stale = [c[0] for c in CASES if old.get(c[0]) != computed(a.bin, data, c)]
        if stale:
            sys.exit(f"docs/performance-figures.md is out of date ({', '.join(stale)}): run python3 scripts/performance.py")
        print("docs/performance-figures.md is current")
        return
    results = {}
    for case in CASES:
        print(f"performance.py: {case[0]} …", file=sys.stderr)
        c = computed(a.bin, data, case)
        walls, rss = timed(a.bin, data, case, a.repeat)
        results[case[0]] = {"computed": c, "best": min(walls), "median": statistics.median(walls), "rss": rss}
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d"), "commit": commit, "machine": a.machine, "repeat": a.repeat}
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(render(results, meta))


if __name__ == "__main__":
    main()
