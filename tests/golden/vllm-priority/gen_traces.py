#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the
standard library only). Token ids stay below 100000 and are distinct per request, except the
shared system prompt of p_prefix. A later arrival at step k gets timestamp_ms (k - 0.5) * 1000.

    python gen_traces.py            # writes traces/ beside this file
"""

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def arrive_at(step):
    return int((step - 0.5) * 1000) if step > 0 else 0


def unique_ids(i, n, base):
    """n token ids private to request i of a trace (blocks of 1000 ids per request)."""
    assert n < 1000
    return [base + 1000 * i + j for j in range(n)]


def p_preempt():
    rng = random.Random(7)
    recs = []
    # Ten low-priority requests, all at step 0.
    for _ in range(10):
        recs.append({"prompt_len": rng.randint(40, 120), "output_len": rng.randint(30, 60), "priority": 5})
    # Four high-priority ones later, one at each of steps 3, 4, 6 and 9.
    for step, prio in ((3, 0), (4, -1), (6, 0), (9, -1)):
        recs.append(
            {
                "prompt_len": rng.randint(40, 100),
                "output_len": rng.randint(30, 50),
                "priority": prio,
                "step": step,
            }
        )
    return build(recs, base=1000)


def p_prefix():
    rng = random.Random(2)
    system = [90000 + j for j in range(64)]  # 4 full blocks shared by every request
    recs = []
    for _ in range(14):
        recs.append({"prompt_len": rng.randint(16, 100), "output_len": rng.randint(10, 40), "priority": rng.randint(0, 2)})
    for step in (4, 8, 12, 16, 20, 24):
        recs.append(
            {"prompt_len": rng.randint(16, 100), "output_len": rng.randint(10, 40), "priority": rng.randint(0, 2), "step": step}
        )
    return build(recs, base=1000, prefix=system)


def p_chunked():
    rng = random.Random(3)
    recs = []
    for _ in range(5):
        recs.append({"prompt_len": rng.randint(300, 900), "output_len": rng.randint(20, 60), "priority": rng.randint(0, 2)})
    for step, prio in ((5, 0), (9, 1), (14, 0)):
        recs.append({"prompt_len": rng.randint(300, 900), "output_len": rng.randint(20, 60), "priority": prio, "step": step})
    return build(recs, base=1000)


def build(recs, base, prefix=()):
    out = []
    for i, r in enumerate(recs):
        rec = {
            "prompt_ids": list(prefix) + unique_ids(i, r["prompt_len"], base),
            "output_len": r["output_len"],
            "priority": r["priority"],
        }
        # Every record has a time (cachesim takes times for all records or none): 0 = before step 0.
        rec["timestamp_ms"] = arrive_at(r["step"]) if "step" in r else 0
        assert max(rec["prompt_ids"]) < 100000
        out.append(rec)
    return out


TRACES = {"p_preempt": p_preempt, "p_prefix": p_prefix, "p_chunked": p_chunked}


def main():
    os.makedirs(os.path.join(HERE, "traces"), exist_ok=True)
    for name, make in TRACES.items():
        path = os.path.join(HERE, "traces", name + ".jsonl")
        with open(path, "w") as f:
            for rec in make():
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        print(path)


if __name__ == "__main__":
    main()
