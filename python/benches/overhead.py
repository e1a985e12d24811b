"""Bench: what a Python call costs over the same simulations from Rust. 1,000 `run` calls on a
preloaded workload of 1,000 requests, against 1,000 resolve + simulate calls in Rust on the same
workload in the same process (`cachesim._native.time_rust_runs`). Both sides are timed in
process CPU time (wall time follows whatever else the machine runs), three alternating rounds,
the fastest of each side kept; the figures are printed.

    python python/benches/overhead.py          # after `pip install ./python`
"""

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import cachesim

N = 1000
ROUNDS = 3


def write_random_trace(path, n, prompt, output, seed=1):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = [rng.randrange(100_000) for _ in range(rng.randint(prompt // 2, prompt))]
            f.write(json.dumps({"prompt_ids": ids, "output_len": rng.randint(output // 2, output)}) + "\n")
    return path


def main(n=N, rounds=ROUNDS):
    with tempfile.TemporaryDirectory() as d:
        w = cachesim.Workload.from_file(write_random_trace(Path(d) / "r1000.jsonl", 1000, prompt=256, output=64))
    flags = {"request_rate": 50, "max_num_seqs": 64}
    for keep_steps in (True, False):
        r = cachesim.run(workload=w, keep_steps=keep_steps, **flags)  # warm up
        py, rust = [], []
        for _ in range(rounds):
            t = time.process_time()
            for _ in range(n):
                r = cachesim.run(workload=w, keep_steps=keep_steps, **flags)
            py.append(time.process_time() - t)
            t = time.process_time()
            cachesim._native.time_rust_runs(w._native, flags, n, keep_steps)
            rust.append(time.process_time() - t)
        assert r.summary["completed"] == 1000
        p, q = min(py), min(rust)
        print(
            f"{n} run() calls x 1,000 requests, keep_steps={keep_steps}: Python {p:.3f} s, Rust {q:.3f} s CPU "
            f"(fastest of {rounds}), overhead {100 * (p - q) / q:+.1f} % ({1e6 * (p - q) / n:+.0f} us per call)"
        )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
