#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the
standard library only). Token ids are distinct per request except the shared system prompt of
s_prefix. A request arriving before step k gets timestamp_ms (k - 0.5) * 1000 (README.md, arrival
rule); one without a `priority` key is sent without a priority.

    python3 gen_traces.py            # writes traces/ beside this file
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # for sglang_common
from sglang_common import arrive_at, write_traces  # noqa: E402


def s_preempt():
    rng = random.Random(11)
    recs = [{"prompt_len": rng.randint(40, 120), "output_len": rng.randint(30, 60), "priority": 0} for _ in range(6)]
    # Later arrivals: none (the least important), 20 (beats 0 by more than the threshold),
    # 5 (does not), -20 (the most important with low values first), 40 (beats 0 and 20).
    for step, prio in ((2, None), (3, 20), (4, 5), (5, 20), (6, -20), (8, 40), (9, 40), (12, 20)):
        r = {"prompt_len": rng.randint(40, 100), "output_len": rng.randint(20, 50), "step": step}
        if prio is not None:
            r["priority"] = prio
        recs.append(r)
    return build(recs)


def s_prefix():
    rng = random.Random(5)
    system = [90000 + j for j in range(64)]
    recs = [
        {"prompt_len": rng.randint(80, 160), "output_len": rng.randint(10, 40), "priority": rng.choice((0, 10, 20, 30))}
        for _ in range(8)
    ]
    for step in (3, 6, 9, 12, 15, 18, 21, 24):
        recs.append(
            {"prompt_len": rng.randint(80, 160), "output_len": rng.randint(10, 40), "priority": rng.choice((0, 10, 20, 30)), "step": step}
        )
    return build(recs, prefix=system)


def s_chunked():
    rng = random.Random(3)
    recs = [{"prompt_len": rng.randint(300, 900), "output_len": rng.randint(20, 60), "priority": rng.choice((0, 1))} for _ in range(4)]
    for step, prio in ((4, 30), (7, 30), (11, 15), (13, 50)):
        recs.append({"prompt_len": rng.randint(200, 700), "output_len": rng.randint(20, 60), "priority": prio, "step": step})
    return build(recs)


def s_retract():
    rng = random.Random(4)
    recs = [{"prompt_len": rng.randint(20, 60), "output_len": rng.randint(100, 300), "priority": rng.choice((0, 1, 2))} for _ in range(20)]
    return build(recs)


def build(recs, prefix=()):
    out = []
    for i, r in enumerate(recs):
        n = r["prompt_len"] - len(prefix)
        assert 0 < n < 1000
        rec = {"prompt_ids": list(prefix) + [1000 + 1000 * i + j for j in range(n)], "output_len": r["output_len"]}
        if "priority" in r:
            rec["priority"] = r["priority"]
        rec["timestamp_ms"] = arrive_at(r.get("step", 0))
        out.append(rec)
    return out


if __name__ == "__main__":
    write_traces(HERE, (s_preempt, s_prefix, s_chunked, s_retract), output_ids=False)
