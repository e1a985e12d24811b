"""The seed's ten-configuration vLLM tuning sweep, locally and on Ray, notebook style.

Ten configurations (max-num-seqs 16, 24, 32, 48, 64 x max-num-batched-tokens 2048, 4096) of
vLLM serving 50 random requests at 20 req/s, as in the README's sweep section:

    cachesim gen random --num-prompts 50 -o random50.jsonl
    python python/examples/seed_sweep.py random50.jsonl

It runs the grid in this process, then as Ray tasks on a local Ray (or on the cluster named by
$RAY_ADDRESS, e.g. ray://head:10001), checks that both give the same table, and prints it.
"""

import os
import sys
import time

import pandas  # noqa: F401  (imported before the clock starts: sweep returns a DataFrame)

import cachesim

trace = sys.argv[1] if len(sys.argv) > 1 else "random50.jsonl"
if not os.path.exists(trace):
    sys.exit(f"{trace} is missing: make it with `cachesim gen random --num-prompts 50 -o {trace}`")

# Read and tokenise the trace once; every point (and every Ray worker) shares it.
w = cachesim.Workload.from_file(trace)
grid = {"max_num_seqs": [16, 24, 32, 48, 64], "max_num_batched_tokens": [2048, 4096]}

t = time.perf_counter()
local = cachesim.sweep(grid, workload=w, request_rate=20)
t_local = time.perf_counter() - t

import ray  # noqa: E402  (only the second half needs Ray)

ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
t = time.perf_counter()
on_ray = cachesim.sweep(grid, workload=w, backend="ray", request_rate=20)
t_ray = time.perf_counter() - t
ray.shutdown()

print(local.attrs["table"])
cols = ["rank", "max_num_seqs", "max_num_batched_tokens", "output_throughput", "median_ttft_ms", "p99_tpot_ms"]
print(local[cols].to_string(index=False))
same = on_ray.equals(local) and on_ray.attrs == local.attrs
print(f"\nlocal: {t_local:.3f} s; ray: {t_ray:.3f} s; identical: {same}")
if not same:
    sys.exit(1)
