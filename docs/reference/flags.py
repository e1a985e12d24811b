#!/usr/bin/env python3
"""Write docs/reference/flags.md from the binary's own --help.

    cargo build --release
    python docs/reference/flags.py target/release/cachesim > docs/reference/flags.md

The help text is clap's long help (`cachesim COMMAND --help`), which the doc comments of the
CLI's flags produce, so this page cannot drift from the binary it was made from.
"""
import re
import subprocess
import sys

COMMANDS = [
    ("run", ["run"]),
    ("cache", ["cache"]),
    ("analyze", ["analyze"]),
    ("gen random", ["gen", "random"]),
    ("gen gsp", ["gen", "gsp"]),
    ("gen sessions", ["gen", "sessions"]),
    ("sweep", ["sweep"]),
    ("merge", ["merge"]),
    ("plan", ["plan"]),
    ("calibrate", ["calibrate"]),
    ("validate", ["validate"]),
]
# Commands that take every flag of `run` besides their own.
TAKE_RUN = {"sweep", "plan", "calibrate"}

FLAG = re.compile(r"^\s{2,6}(?:(-\w), )?(--[\w-]+)(?: <([^>]+)>)?(?:\.\.\.)?\s*(.*)$")


def helptext(binary, args):
    return subprocess.run([binary, *args, "--help"], check=True, capture_output=True, text=True).stdout


def parse(text):
    """[(heading, [(short, long, value, description)])] from clap's help layout."""
    sections, current, flag = [], None, None
    about = []
    for line in text.splitlines():
        if line and not line.startswith(" "):
            if line.endswith(":") and not line.startswith("Usage"):
                current = (line[:-1], [])
                sections.append(current)
                flag = None
            elif current is None and not line.startswith("Usage"):
                about.append(line)
            continue
        if current is None:
            continue
        m = FLAG.match(line)
        if m and (line.startswith("  -") or line.startswith("      --")):
            short, long, value, rest = m.groups()
            flag = [short or "", long, value or "", [rest.strip()] if rest.strip() else []]
            current[1].append(flag)
        elif flag is not None:
            flag[3].append(line.strip())
    return " ".join(about).strip(), sections


def describe(lines):
    """One cell: the description, possible values folded, default and aliases kept."""
    text, values, tail = [], [], []
    in_values = False
    for l in lines:
        if not l:
            in_values = False
            continue
        if l == "Possible values:":
            in_values = True
            continue
        if l.startswith("[default") or l.startswith("[alias") or l.startswith("[env"):
            tail.append(l)
            continue
        if in_values:
            if l.startswith("- "):
                values.append(l[2:])
            elif values:
                values[-1] += " " + l
            continue
        text.append(l)
    s = " ".join(text)
    for t in re.findall(r"\[(?:default|alias|aliases): [^\]]*\]", s):
        s = s.replace(t, "").strip()
        tail.append(t)
    if values:
        vals = [re.sub(r"^([^:\s]+):\s+", r"`\1` — ", v) for v in values]
        s = (s.rstrip(".") + ". " if s else "") + "Values: " + "; ".join(vals) + "."
    if tail:
        s += " " + " ".join(tail)
    return re.sub(r"  +", " ", s).replace("|", "\\|").strip()


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/cachesim"
    out = [
        "# Flags",
        "",
        "Every flag of every command, as `cachesim COMMAND --help` prints it (generated: "
        "`python docs/reference/flags.py target/release/cachesim > docs/reference/flags.md`; "
        "the binary's `--help` is authoritative). Without a subcommand cachesim runs `run`. "
        "What the flags do, by job: [the guides](../README.md#guides).",
        "",
    ]
    run_flags = set()
    for name, args in COMMANDS:
        about, sections = parse(helptext(binary, args))
        if name == "run":
            run_flags = {f[1] for _, fl in sections for f in fl}
        out += [f"## `cachesim {name}`", "", about, ""]
        if name in TAKE_RUN:
            out += ["Besides its own flags below, every flag of [`cachesim run`](#cachesim-run).", ""]
        for heading, flags in sections:
            rows = [f for f in flags if f[1] != "--help" and not (name in TAKE_RUN and f[1] in run_flags)]
            if not rows:
                continue
            if heading != "Options":
                out += [f"**{heading}**", ""]
            out += ["| flag | value | description |", "|---|---|---|"]
            for short, long, value, desc in rows:
                flag = f"`{short}`, `{long}`" if short else f"`{long}`"
                cell = ("`" + value.replace("|", "\\|") + "`") if value else ""
                out.append(f"| {flag} | {cell} | {describe(desc)} |")
            out.append("")
    sys.stdout.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
