#!/usr/bin/env python3
"""Writes the native JSONL traces (prompt_ids, output_len; request id = line number from 0) and
their --arrival-steps files (traces/<case>.arrivals.json: one step index per request) under
traces/. Deterministic; standard library only. Token ids of different families never overlap,
and every request's own suffix has its own id range, so two prompts share exactly the tokens
the case says they share."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
T = os.path.join(HERE, "traces")


def toks(base, n):
    return list(range(base, base + n))


def write(name, reqs, arrivals):
    assert len(reqs) == len(arrivals)
    os.makedirs(T, exist_ok=True)
    with open(os.path.join(T, f"{name}.jsonl"), "w") as f:
        for p, o in reqs:
            f.write(json.dumps({"prompt_ids": p, "output_len": o}) + "\n")
    with open(os.path.join(T, f"{name}.arrivals.json"), "w") as f:
        json.dump(arrivals, f)


def own(i, n):
    """Request i's private suffix tokens."""
    return toks(1_000_000 + 10_000 * i, n)


# (a) shared_prefix: 3 prefixes of 64 (block aligned), 136 (8.5 blocks) and 200 (12.5 blocks)
# tokens; request i uses prefix i % 3 plus its own suffix of 20/37/64/5/100 tokens (member
# i // 3); prompts 69..300 tokens; outputs 3..6; one arrival every 3 steps so later members see
# earlier ones cached (some still running).
prefixes = [toks(10_000, 64), toks(20_000, 136), toks(30_000, 200)]
suffix_lens = [20, 37, 64, 5, 100]
reqs, arr = [], []
for i in range(15):
    f, m = i % 3, i // 3
    reqs.append((prefixes[f] + own(i, suffix_lens[m]), 3 + i % 4))
    arr.append(3 * i)
write("shared_prefix", reqs, arr)

# (b) resend: identical prompts sent again after the first finished.
A = toks(40_000, 128)  # block aligned
B = toks(41_000, 150)  # not aligned
C = toks(42_000, 96)  # aligned, resent while the first is still decoding
D = toks(43_000, 20)  # shorter than the window (32)
E = toks(44_000, 33)  # one token past the window
F = toks(45_000, 129)  # one token past a block boundary
resend = [
    (A, 3, 0), (list(A), 3, 10),
    (B, 3, 20), (list(B), 3, 30), (list(B), 3, 40),
    (C, 8, 50), (list(C), 3, 52),
    (D, 3, 70), (list(D), 3, 80),
    (E, 3, 90), (list(E), 3, 100),
    (F, 3, 110), (list(F), 3, 120),
    (A + toks(46_000, 1), 3, 130),  # A plus one token: the longer "sibling" of a resend
]
write("resend", [(p, o) for p, o, _ in resend], [s for _, _, s in resend])

# (c) siblings: prompts extending a common prefix by different suffixes, with suffix/prefix
# lengths varied relative to the window (32) and block (16).
reqs, arr = [], []
X = toks(50_000, 160)  # 10 blocks
reqs.append((X + own(0, 40), 2)); arr.append(0)  # root, 200 tokens
for k, s in enumerate([1, 8, 16, 17, 31, 32, 33, 64, 100]):
    i = len(reqs)
    reqs.append((X + own(i, s), 2)); arr.append(10 + 8 * k)
Y = toks(51_000, 24)  # prefix shorter than the window
for k, s in enumerate([10, 30, 50]):
    i = len(reqs)
    reqs.append((Y + own(i, s), 2)); arr.append(90 + 8 * k)
Z = toks(52_000, 40)  # 2.5 blocks, between W and 2W
for k, s in enumerate([8, 24, 70]):
    i = len(reqs)
    reqs.append((Z + own(i, s), 2)); arr.append(120 + 8 * k)
V = toks(53_000, 80)  # three siblings arriving together, a fourth later
for k, (s, at) in enumerate([(20, 150), (30, 150), (40, 150), (50, 160)]):
    i = len(reqs)
    reqs.append((V + own(i, s), 3)); arr.append(at)
write("siblings", reqs, arr)

# (d) chunked: long prompts with a 64-token budget (run with --max-num-batched-tokens 64), so the
# window slides during chunked prefill. S = 256-token shared prefix.
S = toks(60_000, 256)
r0 = S + own(0, 144)  # 400
chunked = [
    (r0, 3, 0),
    (S + own(1, 44), 3, 0),  # 300, concurrent with r0
    (toks(61_000, 600), 3, 2),  # 600, unrelated
    (S + own(3, 200), 3, 40),  # 456, after r0/r1 finished
    (list(r0), 3, 60),  # resend of r0
    (S + own(5, 344), 3, 70),  # 600
]
write("chunked", [(p, o) for p, o, _ in chunked], [s for _, _, s in chunked])

# (e/f) pressure: 24 requests, 6 groups of 4 sharing a 64-token group prefix. Request i is member
# m = i % 4 of group g = i // 4 (a group's members are adjacent in FCFS order). Own tokens
# 16..64 (prompts 80..128), outputs 8..32. All at step 0; run with a small pool.
reqs = []
for i in range(24):
    g, m = i // 4, i % 4
    prefix = toks(70_000 + 1000 * g, 64)
    own_len = 16 * (1 + (g + m) % 4)
    out_len = 8 + 8 * ((3 * g + m) % 4)
    reqs.append((prefix + own(i, own_len), out_len))
write("pressure", reqs, [0] * 24)

# (g) wide_window (run with --sliding-window 128, as gpt-oss): prompts up to 600 tokens.
Q = toks(80_000, 300)
G4 = toks(81_000, 600)
wide = [
    (Q + own(0, 100), 3, 0),  # 400
    (Q + own(1, 50), 3, 10),  # 350: sibling of r0
    (Q + own(2, 300), 3, 20),  # 600
    (Q + own(2, 300), 3, 30),  # resend of r2
    (G4, 3, 40),  # 600 unrelated
    (G4[:520] + own(5, 20), 3, 50),  # 540: shares 520 with r4
    (Q[:100] + own(6, 100), 3, 60),  # 200: shares only 100 (< W + a block) with Q
    (Q[:100] + own(7, 60), 3, 70),  # 160: sibling of r6
    (toks(82_000, 100), 3, 80),  # 100 < W
    (toks(82_000, 100), 3, 90),  # resend
    (Q + own(0, 100), 3, 100),  # resend of r0 after everything else
]
write("wide_window", [(p, o) for p, o, _ in wide], [s for _, _, s in wide])
