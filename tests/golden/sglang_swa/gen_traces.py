#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the standard
library only). cachesim's native JSONL: `prompt_ids`, `output_len`, `output_ids`, `timestamp_ms`;
request i (line i, from 0) gets id "i". `output_ids` are the tokens the driver's fake model samples
for it (the driver reads neither them nor anything but `prompt_ids`, `output_len` and
`timestamp_ms`); they let a replay know what a later turn's prompt reuses of an earlier turn's
output. A request arriving before step k gets timestamp_ms (k - 0.5) * 1000, 0 for step 0
(README.md, arrival rule).

Multi-turn conversations: turn t+1's prompt is turn t's prompt, then the exact tokens the driver's
fake model samples for turn t (token j of request r is 10_000_000 + r * 100_000 + j), then new user
tokens. Lengths are chosen around the sliding windows of the cases (32 and 128 tokens): prompts and
shared prefixes shorter than, between and longer than them, and outputs long enough (> window +
SGLang's 128-token SWA eviction interval) that a decoding request frees SWA slots behind its window.
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
        {"step": s, "order": order, "prompt": ids.take(rng.randint(8, 24)), "output_len": rng.randint(every + 5, every + 20)}
        for s in range(0, last_step + 1, every)
    ]


def w_conv():
    """A 100-token system prompt shared by 5 conversations x 4 turns. First user messages 10-250
    tokens (shorter than, between and longer than the windows), later ones 10-60; outputs 20-60,
    but 180-300 on every third turn. Turn t+1 arrives after turn t's output has had time to finish
    (its output length + 40 steps), conversation c starts at step 8c."""
    rng = random.Random(11)
    ids = Ids(1000)
    system = ids.take(100)
    ev = []
    last = 0
    for c in range(5):
        step = 8 * c
        for t in range(4):
            new = ids.take(rng.randint(10, 250) if t == 0 else rng.randint(10, 60))
            out_len = rng.randint(180, 300) if (c + t) % 3 == 0 else rng.randint(20, 60)
            ev.append({"step": step, "order": c, "conv": c, "new": (system + new) if t == 0 else new, "output_len": out_len})
            last = max(last, step)
            step += out_len + 40
    ev += fillers(rng, ids, last, 30)
    return build(ev)


def w_sibling():
    """Siblings over three shared documents of 20, 90 and 400 tokens (shorter than 32, between 32
    and 128, longer than 128), in 5 waves of 6 (steps 0, 40, 80, 120, 160), each with its own
    3-60-token question; two unrelated short prompts (6-30 tokens) per wave; the first sibling of
    waves 1 and 3 decodes 200-260 tokens."""
    rng = random.Random(22)
    ids = Ids(1000)
    docs = [ids.take(20), ids.take(90), ids.take(400)]
    ev = []
    for w in range(5):
        base = 40 * w
        for i in range(6):
            d = docs[(w + i) % 3]
            out_len = rng.randint(200, 260) if (i == 0 and w in (1, 3)) else rng.randint(10, 50)
            ev.append({"step": base + 2 * i, "order": i, "prompt": d + ids.take(rng.randint(3, 60)), "output_len": out_len})
        for j in range(2):
            ev.append({"step": base + 5 + 10 * j, "order": 10 + j, "prompt": ids.take(rng.randint(6, 30)), "output_len": rng.randint(10, 40)})
    ev += fillers(rng, ids, 200, 30)
    return build(ev)


def w_burst():
    """All 24 requests queued before step 0: 8 over each of three documents of 100, 250 and 500
    tokens, with 5-80-token suffixes, and long outputs (100-350): a tight pool forces evictions,
    and (without ignore_eos) retractions."""
    rng = random.Random(33)
    ids = Ids(1000)
    docs = [ids.take(100), ids.take(250), ids.take(500)]
    ev = [
        {"step": 0, "order": i, "prompt": docs[i % 3] + ids.take(rng.randint(5, 80)), "output_len": rng.randint(100, 350)}
        for i in range(24)
    ]
    return build(ev)


def w_long():
    """Long prompts for chunked prefill below their lengths: 7 conversations x 3 turns, first prompts
    300-900 tokens, later turns add 50-200; outputs 30-80, 250-300 on one turn in three;
    conversation c starts at step 6c, turn t+1 arrives output length + 50 steps after turn t."""
    rng = random.Random(44)
    ids = Ids(1000)
    ev = []
    last = 0
    for c in range(7):
        step = 6 * c
        for t in range(3):
            new = ids.take(rng.randint(300, 900) if t == 0 else rng.randint(50, 200))
            out_len = rng.randint(250, 300) if (c + t) % 3 == 1 else rng.randint(30, 80)
            ev.append({"step": step, "order": c, "conv": c, "new": new, "output_len": out_len})
            last = max(last, step)
            step += out_len + 50
    ev += fillers(rng, ids, last, 30)
    return build(ev)


if __name__ == "__main__":
    write_traces(HERE, (w_conv, w_sibling, w_burst, w_long))
