#!/usr/bin/env python3
"""Writes traces/*.jsonl beside this file (fixed seeds, standard library only), in cachesim's native
JSONL (`prompt_ids`, `output_len`, `output_ids`, `timestamp_ms`; request i = line i). Same helpers as the
SWA goldens (../sglang_common.py): token j sampled by the
driver's fake model for request r is 10_000_000 + r * 100_000 + j, so a later conversation turn's prompt
reuses an earlier turn's exact output; a request arriving before step k has timestamp_ms (k - 0.5) * 1000.

    python3 gen_traces.py
"""
import os, random, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))  # for sglang_common
from sglang_common import Ids, build_conversations as build, write_traces  # noqa: E402


def fillers(rng, ids, last_step, every, order=1000):
    return [{"step": s, "order": order, "prompt": ids.take(rng.randint(8, 24)), "output_len": rng.randint(every + 5, every + 20)}
            for s in range(0, last_step + 1, every)]


def m_conv():
    """A 100-token system prompt shared by 5 conversations x 4 turns; turn t+1 = turn t's prompt +
    its sampled output + 10-60 new tokens (the prefix ends exactly where turn t's finish inserted a
    mamba state); first user messages 10-250 tokens; outputs 20-60, 120-200 on every third turn;
    turn t+1 arrives output_len + 30 steps after turn t; conversation c starts at step 6c. Fillers
    every 30 steps."""
    rng = random.Random(11)
    ids = Ids(1000)
    system = ids.take(100)
    ev, last = [], 0
    for c in range(5):
        step = 6 * c
        for t in range(4):
            new = ids.take(rng.randint(10, 250) if t == 0 else rng.randint(10, 60))
            out_len = rng.randint(120, 200) if (c + t) % 3 == 0 else rng.randint(20, 60)
            ev.append({"step": step, "order": c, "conv": c, "new": (system + new) if t == 0 else new, "output_len": out_len})
            last = max(last, step)
            step += out_len + 30
    ev += fillers(rng, ids, last, 30)
    return build(ev)


def m_sibling():
    """Siblings over three documents of 60, 200 and 700 tokens (below, across and over several
    chunk boundaries) with 3-60-token questions, in 4 waves of 6 (steps 0, 40, 80, 120); each wave
    also re-sends one earlier prompt verbatim (an exact resend) and has two unrelated prompts."""
    rng = random.Random(22)
    ids = Ids(1000)
    docs = [ids.take(60), ids.take(200), ids.take(700)]
    ev, sent = [], []
    for w in range(4):
        base = 40 * w
        for i in range(6):
            d = docs[(w + i) % 3]
            p = d + ids.take(rng.randint(3, 60))
            sent.append(p)
            ev.append({"step": base + 2 * i, "order": i, "prompt": p, "output_len": rng.randint(10, 50)})
        ev.append({"step": base + 15, "order": 8, "prompt": list(sent[rng.randrange(len(sent) - 3)]), "output_len": rng.randint(10, 30)})
        for j in range(2):
            ev.append({"step": base + 5 + 10 * j, "order": 10 + j, "prompt": ids.take(rng.randint(6, 30)), "output_len": rng.randint(10, 40)})
    ev += fillers(rng, ids, 160, 30)
    return build(ev)


def m_burst():
    """All 24 requests queued before step 0: 8 over each of three documents of 100, 250 and 500
    tokens with 5-80-token suffixes; outputs 60-250: with a small state pool (max_mamba_cache_size)
    or a small KV pool, evictions of states and KV, and retractions without ignore_eos."""
    rng = random.Random(33)
    ids = Ids(1000)
    docs = [ids.take(100), ids.take(250), ids.take(500)]
    ev = [{"step": 0, "order": i, "prompt": docs[i % 3] + ids.take(rng.randint(5, 80)), "output_len": rng.randint(60, 250)}
          for i in range(24)]
    return build(ev)


if __name__ == "__main__":
    write_traces(HERE, (m_conv, m_sibling, m_burst))
