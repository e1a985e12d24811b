#!/usr/bin/env python3
"""Writes the traces of this folder (traces/*.jsonl), deterministically (fixed seeds; the
standard library only). Each record may name a LoRA adapter (`lora`, one of a, b, c, d; absent:
the base model). Token ids stay below 100000 and are distinct per request, except the shared
system prompt every request of l_prefix starts with. A later arrival at step k gets
timestamp_ms (k - 0.5) * 1000.

    python gen_traces.py            # writes traces/ beside this file
"""

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = ["a", "b", "c", "d"]


def arrive_at(step):
    return int((step - 0.5) * 1000) if step > 0 else 0


def build(recs, base, prefix=()):
    out = []
    for i, r in enumerate(recs):
        ids = list(prefix) + [base + 1000 * i + j for j in range(r["prompt_len"])]
        line = {"prompt_ids": ids, "output_len": r["output_len"]}
        if r.get("lora"):
            line["lora"] = r["lora"]
        if "step" in r or any("step" in x for x in recs):
            line["timestamp_ms"] = arrive_at(r.get("step", 0))
        out.append(line)
    return out


def l_mix():
    """Sixteen requests at step 0 over three adapters and the base model: the batch rule
    passes adapters by while base-model requests behind them are admitted."""
    rng = random.Random(11)
    recs = []
    for _ in range(16):
        recs.append(
            {
                "prompt_len": rng.randint(20, 90),
                "output_len": rng.randint(5, 30),
                "lora": rng.choice(["a", "b", "c", None]),
            }
        )
    return build(recs, base=1000)


def l_arrivals():
    """Requests arriving over 20 steps over four adapters, in a pool small enough to preempt:
    a preempted request's adapter leaves the running set."""
    rng = random.Random(5)
    recs = []
    for k in range(18):
        recs.append(
            {
                "prompt_len": rng.randint(30, 110),
                "output_len": rng.randint(20, 50),
                "lora": rng.choice(ADAPTERS + [None]),
                "step": 0 if k < 6 else rng.randint(1, 20),
            }
        )
    recs.sort(key=lambda r: r["step"])
    return build(recs, base=1000)


def l_prefix():
    """One system prompt (4 blocks) under every adapter and the base model: hits only within
    one adapter."""
    rng = random.Random(9)
    system = [90000 + j for j in range(64)]
    recs = []
    for k in range(14):
        recs.append(
            {
                "prompt_len": rng.randint(8, 60),
                "output_len": rng.randint(5, 20),
                "lora": rng.choice(["a", "b", None]),
                "step": 0 if k < 4 else 2 * k,
            }
        )
    return build(recs, base=1000, prefix=system)


def main():
    os.makedirs(os.path.join(HERE, "traces"), exist_ok=True)
    for name, recs in (("l_mix", l_mix()), ("l_arrivals", l_arrivals()), ("l_prefix", l_prefix())):
        with open(os.path.join(HERE, "traces", name + ".jsonl"), "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
