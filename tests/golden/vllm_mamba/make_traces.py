#!/usr/bin/env python3
"""Writes traces/<case>.jsonl (prompt_ids, output_len; request id = line number) and
traces/<case>.arrivals.json for run_vllm_mamba.py. Deterministic, standard library only.
Token families never overlap; each request's own suffix has its own id range."""
import json, os
HERE = os.path.dirname(os.path.abspath(__file__)); T = os.path.join(HERE, "traces")
def toks(b, n): return list(range(b, b + n))
def own(i, n): return toks(1_000_000 + 10_000 * i, n)
def write(name, rows):
    os.makedirs(T, exist_ok=True)
    with open(os.path.join(T, f"{name}.jsonl"), "w") as f:
        for p, o, _ in rows: f.write(json.dumps({"prompt_ids": p, "output_len": o}) + "\n")
    with open(os.path.join(T, f"{name}.arrivals.json"), "w") as f: json.dump([s for _, _, s in rows], f)

# (a) shared_prefix (block 16): P1 = 64 tokens (4 blocks, aligned), P2 = 40 tokens (2.5 blocks).
P1, P2 = toks(10_000, 64), toks(20_000, 40)
write("shared_prefix", [
    (P1 + own(0, 20), 3, 0), (P1 + own(1, 30), 3, 10), (P1 + own(2, 10), 3, 20),
    (P2 + own(3, 20), 3, 30), (P2 + own(4, 25), 3, 40), (P2 + own(5, 30), 3, 50),
    (P1 + own(6, 20), 3, 60), (P1 + own(7, 40), 3, 60),   # two siblings in one step
])
# (b) resend: identical prompts again after the first finished (and once while it decodes).
A, B, C = toks(40_000, 64), toks(41_000, 50), toks(42_000, 100)
write("resend", [
    (A, 3, 0), (list(A), 3, 10),
    (B, 3, 20), (list(B), 3, 30), (list(B), 3, 40),
    (C, 8, 50), (list(C), 3, 52),
    (A + toks(43_000, 1), 3, 70), (A + toks(44_000, 20), 3, 80),
])
# (c) chunked (run with a 32-token budget): S = 100-token prefix.
S = toks(50_000, 100)
write("chunked", [
    (S + own(0, 44), 3, 0), (S + own(1, 20), 3, 0), (toks(60_000, 90), 3, 2),
    (S + own(0, 44), 3, 30), (S + own(4, 60), 3, 40),
])
# (d) pressure: 16 requests at step 0; request i in group g = i // 4 (48-token group prefix),
# member m = i % 4, own tokens 16 * (1 + (g + m) % 3), output 4 + 4 * ((3g + m) % 4).
rows = []
for i in range(16):
    g, m = i // 4, i % 4
    rows.append((toks(70_000 + 1000 * g, 48) + own(i, 16 * (1 + (g + m) % 3)), 4 + 4 * ((3 * g + m) % 4), 0))
write("pressure", rows)
