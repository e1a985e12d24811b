#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the standard
library only). cachesim's native JSONL: `prompt_ids`, `output_len`, `output_ids`, `timestamp_ms`;
request i (line i, from 0) gets id "i". `output_ids` are the tokens the driver's fake model samples
for it (token j of request r is 10_000_000 + r * 100_000 + j; the driver reads only `prompt_ids`,
`output_len` and `timestamp_ms`). A request arriving before step k gets timestamp_ms
(k - 0.5) * 1000, 0 for step 0 (README.md, arrival rule).

The radix cache is off in every case, so nothing is shared between requests; a few prompts still
repeat a document (which a radix cache would hit) to show that nothing is reused. Short "filler"
requests arrive every few steps so that the engine never idles between arrivals.

    python3 gen_traces.py            # writes traces/ beside this file
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # for sglang_common
from sglang_common import arrive_at, Ids, write_traces  # noqa: E402


def build(events):
    """events: dicts with `step` (arrival), `order` (tie-break), `prompt`, `output_len`."""
    events = sorted(events, key=lambda e: (e["step"], e["order"]))
    return [{"prompt_ids": list(e["prompt"]), "output_len": e["output_len"], "timestamp_ms": arrive_at(e["step"])} for e in events]


def fillers(rng, ids, last_step, every, order=1000):
    return [
        {"step": s, "order": order, "prompt": ids.take(rng.randint(8, 24)), "output_len": rng.randint(every + 5, every + 20)}
        for s in range(0, last_step + 1, every)
    ]


def n_mixed():
    """Arrivals over 300 steps: 3 bursts of 8 (steps 0, 100, 200) with prompts 20-700 tokens and
    outputs 50-400, 12 single arrivals every 25 steps (prompts 30-300, outputs 20-120), every
    fourth burst request repeating a 200-token document; plus fillers every 30 steps."""
    rng = random.Random(101)
    ids = Ids(1000)
    doc = ids.take(200)
    ev = []
    for b, base in enumerate((0, 100, 200)):
        for i in range(8):
            p = doc + ids.take(rng.randint(10, 80)) if i % 4 == 0 else ids.take(rng.randint(20, 700))
            ev.append({"step": base, "order": i, "prompt": p, "output_len": rng.randint(50, 400)})
    for k in range(12):
        ev.append({"step": 12 + 25 * k, "order": 100, "prompt": ids.take(rng.randint(30, 300)), "output_len": rng.randint(20, 120)})
    ev += fillers(rng, ids, 300, 30)
    return build(ev)


def n_burst():
    """All 30 requests queued before step 0: prompts 30-600 tokens (every third one a 150-token
    document plus a 5-60-token suffix), long outputs 100-450: a tight pool refuses admissions and
    (without ignore_eos) retracts."""
    rng = random.Random(202)
    ids = Ids(1000)
    doc = ids.take(150)
    ev = [
        {"step": 0, "order": i,
         "prompt": doc + ids.take(rng.randint(5, 60)) if i % 3 == 0 else ids.take(rng.randint(30, 600)),
         "output_len": rng.randint(100, 450)}
        for i in range(30)
    ]
    return build(ev)


def n_long():
    """Long prompts for chunked prefill below their lengths: 16 requests, prompts 300-1500 tokens,
    arriving every 15 steps in pairs, outputs 20-80 or 200-300 (one in three); plus fillers every 20
    steps."""
    rng = random.Random(303)
    ids = Ids(1000)
    ev = []
    for k in range(8):
        for j in range(2):
            out_len = rng.randint(200, 300) if (2 * k + j) % 3 == 1 else rng.randint(20, 80)
            ev.append({"step": 15 * k, "order": j, "prompt": ids.take(rng.randint(300, 1500)), "output_len": out_len})
    ev += fillers(rng, ids, 120, 20)
    return build(ev)


def n_decode():
    """Short prompts, long outputs: 24 requests queued before step 0 with prompts 10-80 tokens and
    outputs 200-600, then 12 more (prompts 10-120, outputs 100-500) every 40 steps from step 40;
    fillers every 30 steps. A request's own output, not its prompt, is what a tight pool cannot hold:
    the case for add_one_req_ignore_eos's req_states check."""
    rng = random.Random(404)
    ids = Ids(1000)
    ev = [{"step": 0, "order": i, "prompt": ids.take(rng.randint(10, 80)), "output_len": rng.randint(200, 600)} for i in range(24)]
    ev += [{"step": 40 * (k + 1), "order": 100, "prompt": ids.take(rng.randint(10, 120)), "output_len": rng.randint(100, 500)}
           for k in range(12)]
    ev += fillers(rng, ids, 480, 30)
    return build(ev)


if __name__ == "__main__":
    write_traces(HERE, (n_mixed, n_burst, n_long, n_decode))
