#!/usr/bin/env python3
"""Writes docs/validation/figures.md, the one generated page of cachesim's accuracy figures.

Each section is one mode of `cachesim validate` over the bundled cases and the data folder,
printed by the binary and never typed by hand: per fitted metric the median |error| over the
mode's honest rows (all cases, and the published points alone) with the row count, and the
pooled figure `--max-held-out-error` gates. The summary table at the top is built from the
sections.

    python3 scripts/figures.py                       # held out, leave-group-out source and gpu
    python3 scripts/figures.py --leave-one-out       # also leave-one-out (about an hour on 2 cores)
    python3 scripts/figures.py --check               # CI: held out and source must be current

A mode not run this time keeps its section as it was (with the commit it was measured at).
Standard library only; BIN defaults to target/release/cachesim, the data folder to
../shared/data or $CACHESIM_DATA.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "validation", "figures.md")
METRICS = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"]
# Each mode: its name in the page, the flags beyond `validate --data D`, whether --check runs it.
MODES = [
    ("held out", [], True),
    ("leave-one-out", ["--leave-one-out"], False),
    ("leave-group-out gpu", ["--leave-group-out", "gpu"], False),
    ("leave-group-out source", ["--leave-group-out", "source"], True),
]
DATA_LINE = re.compile(r"^<!-- figures: (.*) -->$")


def validate(binary, data, flags):
    """The mode's figures, from one --json run (its `pooled` is the gated figure)."""
    base = [binary, "validate", "--data", data, *flags]
    doc = json.loads(subprocess.run(base + ["--json"], check=True, capture_output=True, text=True).stdout)
    pooled = doc.get("pooled")
    figures = {"command": "cachesim " + " ".join(base[1:]).replace(data, "../shared/data"), "metrics": {}}
    for m in METRICS:
        row = {}
        for key, part in (("held_out", "all"), ("held_out_published", "published")):
            s = doc.get(key, {}).get(m)
            if s:
                row[part] = [round(s["median_abs_error_pct"], 1), s["cases"]]
        figures["metrics"][m] = row
    figures["pooled"] = round(pooled["median_abs_error_pct"], 2) if pooled else None
    return figures


def cell(row, part):
    v = row.get(part)
    return f"{v[0]:.1f} ({v[1]})" if v else "—"


def render(sections):
    out = [
        "# Accuracy figures (generated)",
        "",
        "Written by `python3 scripts/figures.py` from what `cachesim validate` prints; do not edit by",
        "hand. CI runs `python3 scripts/figures.py --check`, which fails when the held-out or the",
        "leave-one-source-out section differs from what the binary prints now. How the modes work:",
        "[method.md](method.md); what the figures mean: [results.md](results.md).",
        "",
        "## Summary",
        "",
        "Median |error| % over each mode's honest rows (rows): all cases — published points alone.",
        "",
        "| metric | " + " | ".join(name for name, _, _ in MODES if name in sections) + " |",
        "|---|" + "---|" * sum(1 for name, _, _ in MODES if name in sections),
    ]
    present = [name for name, _, _ in MODES if name in sections]
    for m in METRICS:
        cells = []
        for name in present:
            row = sections[name]["metrics"].get(m, {})
            cells.append(f"{cell(row, 'all')} — {cell(row, 'published')}")
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    out.append(
        "| pooled (the gated figure) | "
        + " | ".join(f"{sections[n]['pooled']:.2f}" if sections[n]["pooled"] is not None else "—" for n in present)
        + " |"
    )
    for name in present:
        s = sections[name]
        out += ["", f"## {name}", "", "```sh", s["command"], "```", ""]
        if s.get("commit"):
            out.append(f"Measured at commit {s['commit']}.")
            out.append("")
        out.append("| metric | all cases | published points |")
        out.append("|---|---|---|")
        for m in METRICS:
            row = s["metrics"].get(m, {})
            out.append(f"| {m} | {cell(row, 'all')} | {cell(row, 'published')} |")
        pooled = f"{s['pooled']:.2f} %" if s["pooled"] is not None else "—"
        out.append(f"| pooled | {pooled} | |")
        out.append("")
        out.append("<!-- figures: " + json.dumps({name: s}, sort_keys=True) + " -->")
    return "\n".join(out) + "\n"


def stored():
    """The sections of the page as it is."""
    sections = {}
    if os.path.exists(PAGE):
        for line in open(PAGE, encoding="utf-8"):
            m = DATA_LINE.match(line.strip())
            if m:
                sections.update(json.loads(m.group(1)))
    return sections


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "cachesim"))
    ap.add_argument("--data", default=os.environ.get("CACHESIM_DATA", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--leave-one-out", action="store_true", help="also run leave-one-out (long)")
    ap.add_argument("--check", action="store_true", help="fail if the cheap sections are not current")
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"figures.py: no data folder at {a.data} (set CACHESIM_DATA)")
    old = stored()
    if a.check:
        stale = []
        for name, flags, cheap in MODES:
            if cheap:
                now = validate(a.bin, a.data, flags)
                if {k: v for k, v in old.get(name, {}).items() if k != "commit"} != now:
                    stale.append(name)
        if stale:
            sys.exit(f"docs/validation/figures.md is out of date ({', '.join(stale)}): run python3 scripts/figures.py")
        print("docs/validation/figures.md is current")
        return
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    sections = dict(old)
    for name, flags, cheap in MODES:
        if name == "leave-one-out" and not a.leave_one_out:
            continue
        print(f"figures.py: {name} …", file=sys.stderr)
        sections[name] = validate(a.bin, a.data, flags)
        if not cheap:
            sections[name]["commit"] = commit
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(render(sections))


if __name__ == "__main__":
    main()
