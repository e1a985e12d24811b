#!/usr/bin/env python3
"""Writes the native JSONL traces (prompt_ids, output_len; request id = line number) and their
--arrival-steps files under traces/. Deterministic; standard library only."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
T = os.path.join(HERE, "traces")


def toks(base, n):
    return list(range(base, base + n))


def write(name, reqs, arrivals):
    os.makedirs(T, exist_ok=True)
    with open(os.path.join(T, f"{name}.jsonl"), "w") as f:
        for p, o in reqs:
            f.write(json.dumps({"prompt_ids": p, "output_len": o}) + "\n")
    with open(os.path.join(T, f"{name}.arrivals.json"), "w") as f:
        json.dump(arrivals, f)


A = toks(1000, 64)
F = toks(2000, 128)

# 1. reload: A; F (evicts A's GPU blocks in a 9-block pool); B = A + 16 new.
write("reload", [(A, 1), (F, 1), (A + toks(3000, 16), 2)], [0, 5, 10])
# 2. aligned: A; B = A (identical), large pool.
write("aligned", [(A, 1), (list(A), 1)], [0, 5])
# 3. dedup: as reload, then B1 = A + X and B2 = A + Y in the same step.
write("dedup", [(A, 1), (F, 1), (A + toks(3000, 16), 2), (A + toks(4000, 16), 2)], [0, 5, 10, 10])

# 4/5. pressure: 24 requests, 6 groups of 4 sharing a 48-token prefix per group. Request i is
# member i // 6 of group i % 6 (groups interleaved). Own tokens 16..64, outputs 4..16.
reqs = []
for i in range(24):
    g, m = i % 6, i // 6
    prefix = toks(10000 + 100 * g, 48)
    own_len = 16 * (1 + (g + m) % 4)
    out_len = 4 + 4 * ((3 * g + m) % 4)
    reqs.append((prefix + toks(50000 + 100 * i, own_len), out_len))
write("pressure", reqs, [0] * 24)
