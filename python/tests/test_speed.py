"""What a Python call costs over the same simulations from Rust: 1,000 `run` calls on a
preloaded workload of 1,000 requests, against 1,000 resolve + simulate calls in Rust on the same
workload in the same process (`cachesim._native.time_rust_runs`). Both sides are timed in
process CPU time (wall time follows whatever else the machine runs), three alternating rounds,
the fastest of each side kept. Printed, never asserted."""

import time

import cachesim
from conftest import MEASURED, write_random_trace

N = 1000
ROUNDS = 3


def test_overhead_of_python_calls(tmp_path):
    w = cachesim.Workload.from_file(write_random_trace(tmp_path / "r1000.jsonl", 1000, prompt=256, output=64))
    assert len(w) == 1000
    flags = {"request_rate": 50, "max_num_seqs": 64}
    for keep_steps in (True, False):
        r = cachesim.run(workload=w, keep_steps=keep_steps, **flags)  # warm up
        py, rust = [], []
        for _ in range(ROUNDS):
            t = time.process_time()
            for _ in range(N):
                r = cachesim.run(workload=w, keep_steps=keep_steps, **flags)
            py.append(time.process_time() - t)
            t = time.process_time()
            cachesim._native.time_rust_runs(w._native, flags, N, keep_steps)
            rust.append(time.process_time() - t)
        assert r.summary["completed"] == 1000
        p, q = min(py), min(rust)
        MEASURED.append(
            f"{N} run() calls x 1,000 requests, keep_steps={keep_steps}: Python {p:.3f} s, Rust {q:.3f} s CPU "
            f"(fastest of {ROUNDS}), overhead {100 * (p - q) / q:+.1f} % ({1e6 * (p - q) / N:+.0f} us per call)"
        )
