#!/bin/sh
# Regenerates traces/ and every schedule of cases.txt (name|trace|flags) into
# schedules/<name>.jsonl.gz, as ../sglang_cases.sh says. PYTHON: a Python with sglang 0.5.23 and
# torch importable (README.md, "Regenerate"). Extra arguments are passed to every driver run
# (e.g. --tree-core python).
. "$(dirname "$0")/../sglang_cases.sh"
