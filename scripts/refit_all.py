#!/usr/bin/env python3
"""Refits every built-in calibration profile with the command in its own `[fit]` table and
says how long it took and how far each refit lands from the committed profile.

Each `calibration/profiles/*.toml` names the command that made it (`[fit] command`). This
script runs each one with the release binary into a scratch folder (never over the committed
file), with `--data DIR` and — unless `--loo` is given — `--no-loo`, one after the other, the
kernel profile first (others start from it). It prints, per profile, the CPU seconds the fit
took, its fit median |error| against the committed one, and the largest relative difference of
any step-time factor; then the totals. `--check` exits 1 when a refit's factors differ from the
committed ones by more than `--tolerance` (relative; default 1e-6): the profiles are then not
what their own commands make at this commit.

    cargo build --release
    python3 scripts/refit_all.py --data ../shared/data            # every profile, no leave-one-out
    python3 scripts/refit_all.py --data ../shared/data --check    # and fail on a drifted profile
"""

import argparse
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "calibration", "profiles")
FIRST = "h200-kernels.toml"


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def command(profile_path):
    with open(profile_path, "rb") as f:
        doc = tomllib.load(f)
    return doc, doc.get("fit", {}).get("command")


def args_for(cmd, out, data, loo):
    words = shlex.split(cmd)
    if words and words[0] == "cachesim":
        words = words[1:]
    if "--out" in words:
        i = words.index("--out")
        words[i + 1] = out
    else:
        words += ["--out", out]
    if "--data" not in words:
        words += ["--data", data]
    if not loo and "--no-loo" not in words:
        words.append("--no-loo")
    return words


def largest_difference(a, b):
    worst, name = 0.0, None
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            if x != y:
                return float("inf"), k
            continue
        d = abs(x - y) / max(abs(x), abs(y), 1e-30)
        if d > worst:
            worst, name = d, k
    return worst, name


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=os.environ.get("CACHESIM_DATA", os.path.join(ROOT, "..", "shared", "data")))
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "cachesim"))
    p.add_argument("--loo", action="store_true", help="keep each command's leave-one-out (much longer)")
    p.add_argument("--check", action="store_true", help="exit 1 when a refit differs from its committed profile")
    p.add_argument("--tolerance", type=float, default=1e-6)
    p.add_argument("profiles", nargs="*", help="profile file names (default: every one)")
    a = p.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"no data folder at {a.data} (give --data)")
    names = a.profiles or sorted(os.listdir(PROFILES))
    names = sorted((n for n in names if n.endswith(".toml")), key=lambda n: (n != FIRST, n))
    drifted, total_cpu, t0 = [], 0.0, time.time()
    print(f"{'profile':<28} {'CPU s':>7} {'fit |err| committed → refit':>30} {'largest factor change':>28}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            doc, cmd = command(os.path.join(PROFILES, name))
            if not cmd:
                print(f"{name:<28} no [fit] command")
                continue
            out = os.path.join(tmp, name)
            before = cpu_children()
            r = subprocess.run([a.binary] + args_for(cmd, out, a.data, a.loo), cwd=ROOT, capture_output=True, text=True)
            cpu = cpu_children() - before
            total_cpu += cpu
            if r.returncode != 0:
                print(f"{name:<28} {cpu:7.1f} failed:\n{r.stderr}")
                drifted.append(name)
                continue
            with open(out, "rb") as f:
                new = tomllib.load(f)
            d, which = largest_difference(doc.get("efficiency", {}), new.get("efficiency", {}))
            old_err = doc.get("fit", {}).get("median_abs_error_pct", float("nan"))
            new_err = new.get("fit", {}).get("median_abs_error_pct", float("nan"))
            change = "none" if d == 0 else f"{d:.2e} ({which})"
            print(f"{name:<28} {cpu:7.1f} {old_err:13.2f} % → {new_err:6.2f} % {change:>28}")
            if d > a.tolerance:
                drifted.append(name)
    print(f"{len(names)} profiles refitted in {total_cpu:.0f} CPU-seconds ({time.time() - t0:.0f} s wall)")
    if drifted:
        print("differ from their committed files: " + ", ".join(drifted))
        if a.check:
            sys.exit(1)


if __name__ == "__main__":
    main()
