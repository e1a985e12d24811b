#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the standard
library only). cachesim's native JSONL: `prompt_ids`, `output_len`, `output_ids`, `timestamp_ms`;
request i (line i, from 0) gets id "i". `output_ids` are the tokens the driver's fake model samples
for it (the driver reads neither them nor anything but `prompt_ids`, `output_len` and
`timestamp_ms`); they let a replay know what a later turn's prompt reuses of an earlier turn's
output. A request arriving before step k gets timestamp_ms (k - 0.5) * 1000, 0 for
step 0 (README.md, arrival rule).

Multi-turn conversations: turn t+1's prompt is turn t's prompt, then the exact tokens the driver's
fake model samples for turn t (token j of request r is 10_000_000 + r * 100_000 + j), then new user
tokens; so a later turn can reuse the whole earlier turn (prompt + output, less the last output
token, whose KV is never computed) from the device pool or, once evicted, from the host pool.
Short "filler" requests arrive every few steps so that the engine never idles between arrivals.

    python3 gen_traces.py            # writes traces/ beside this file
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # for sglang_common
from sglang_common import Ids, build_conversations as build, write_traces  # noqa: E402


def fillers(rng, ids, last_step, every, order=1000):
    return [
        {"step": s, "order": order, "prompt": ids.take(rng.randint(12, 32)), "output_len": rng.randint(every + 5, every + 25)}
        for s in range(0, last_step + 1, every)
    ]


def h_conv():
    """6 conversations x 4 turns; turn t of conversation c arrives at step 12c + 130t."""
    rng = random.Random(101)
    ids = Ids(1000)
    ev = []
    for c in range(6):
        for t in range(4):
            new = ids.take(rng.randint(150, 350) if t == 0 else rng.randint(20, 80))
            ev.append({"step": 12 * c + 130 * t, "order": c, "conv": c, "turn": t, "new": new, "output_len": rng.randint(30, 70)})
    ev += fillers(rng, ids, 12 * 5 + 130 * 3 + 40, 40)
    return build(ev)


def h_sysprompt():
    """A 320-token system prompt shared by waves of 6 requests (steps 0, 140, 280, 420), each with its
    own question; between waves, long unrelated documents push the system prompt out of the device
    pool. The second request of a wave re-inserts the system prompt, which is what
    write_through_selective waits for (hit count 2) before backing it up. From the second wave on, a
    follow-up repeats the previous wave's first (6-token) question."""
    rng = random.Random(202)
    ids = Ids(1000)
    system = ids.take(320)
    ev = []
    prev_short = None
    for w, base in enumerate((0, 140, 280, 420)):
        for i in range(6):
            question = ids.take(6 if i == 0 else rng.randint(40, 120))
            ev.append({"step": base + 3 * i, "order": i, "prompt": system + question, "output_len": rng.randint(20, 40)})
            if i == 0:
                short = question
        if prev_short is not None:
            # a follow-up on the previous wave's 6-token question: once that question's node is
            # only on the host, its host hit (6 tokens) is below load_back_threshold (10)
            ev.append({"step": base + 20, "order": 9, "prompt": system + prev_short + ids.take(30), "output_len": 20})
        prev_short = short
        for j in range(3):
            ev.append({"step": base + 40 + 25 * j, "order": 10 + j, "prompt": ids.take(rng.randint(500, 700)), "output_len": rng.randint(20, 40)})
    ev += fillers(rng, ids, 420 + 60, 35)
    return build(ev)


def h_pressure():
    """10 conversations x 3 turns with long contexts, arriving in a round-robin (conversation c's
    turn t at step 8c + 110t): the host pool given in cases.txt cannot keep them all, so HiCache
    evicts host leaves."""
    rng = random.Random(303)
    ids = Ids(1000)
    ev = []
    for c in range(10):
        for t in range(3):
            new = ids.take(rng.randint(250, 450) if t == 0 else rng.randint(30, 90))
            ev.append({"step": 8 * c + 110 * t, "order": c, "conv": c, "turn": t, "new": new, "output_len": rng.randint(25, 50)})
    ev += fillers(rng, ids, 8 * 9 + 110 * 2 + 40, 30)
    return build(ev)


def h_burst():
    """All requests queued before step 0 (no arrivals): 16 requests over 4 shared document prefixes
    of 200-400 tokens, each with its own suffix; a small device pool forces evictions while later
    requests of the same prefix still wait, so they find it on the host."""
    rng = random.Random(404)
    ids = Ids(1000)
    docs = [ids.take(rng.randint(200, 400)) for _ in range(4)]
    ev = []
    for i in range(16):
        d = docs[(i * 3) % 4] if i % 5 else docs[i % 4]
        ev.append({"step": 0, "order": i, "prompt": d + ids.take(rng.randint(10, 60)), "output_len": rng.randint(20, 60)})
    return build(ev)


def h_retract():
    """For a run without ignore_eos: 12 requests over 2 shared 200-token documents with long outputs,
    all queued before step 0, so that the decode batch outgrows a small pool and SGLang retracts
    requests; a retracted request comes back and finds its prompt on device or host."""
    rng = random.Random(505)
    ids = Ids(1000)
    docs = [ids.take(200) for _ in range(2)]
    ev = [
        {"step": 0, "order": i, "prompt": docs[i % 2] + ids.take(rng.randint(20, 80)), "output_len": rng.randint(150, 300)}
        for i in range(12)
    ]
    return build(ev)


if __name__ == "__main__":
    write_traces(HERE, (h_conv, h_sysprompt, h_pressure, h_burst, h_retract))
