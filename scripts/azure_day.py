#!/usr/bin/env python3
"""A day of traffic from the Azure LLM inference trace 2023 (one hour): the hour repeated for
24 hours, each hour thinned by a day curve, written in the trace's own CSV format.

The curve is an assumption, not a measurement: the share of the hour's requests kept at hour h
is 0.3 + 0.7 x (1 - cos(2 pi (h - 4) / 24)) / 2, from 30 % at 04:00 to 100 % at 16:00 (the
shape of a business-hours service; the 2023 trace itself spans one hour). With --copies K each
hour is laid down K times, shifted by 60 / K minutes, so the load is K times the hour's.
Requests keep their context and generated lengths; which are kept is drawn with --seed.

    python3 scripts/azure_day.py ../shared/data/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv -o day.csv
"""
import argparse
import csv
import datetime
import math
import random


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="AzureLLMInferenceTrace_conv.csv or _code.csv")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--copies", type=int, default=1, help="the hour laid down K times per hour, shifted")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with open(a.trace, newline="") as f:
        rows = list(csv.DictReader(f))
    parse = lambda s: datetime.datetime.strptime(s[:26], "%Y-%m-%d %H:%M:%S.%f")
    t0 = parse(rows[0]["TIMESTAMP"])
    offsets = [(parse(r["TIMESTAMP"]) - t0).total_seconds() for r in rows]
    rng = random.Random(a.seed)
    out = []
    for h in range(24):
        keep = 0.3 + 0.7 * (1 - math.cos(2 * math.pi * (h - 4) / 24)) / 2
        for k in range(a.copies):
            shift = h * 3600 + k * 3600 / a.copies
            for r, off in zip(rows, offsets):
                if rng.random() < keep:
                    out.append((shift + off % 3600, r["ContextTokens"], r["GeneratedTokens"]))
    out.sort(key=lambda x: x[0])
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for t, c, g in out:
            w.writerow([(t0 + datetime.timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0", c, g])
    print(f"{len(out)} requests over 24 h written to {a.out}")


if __name__ == "__main__":
    main()
