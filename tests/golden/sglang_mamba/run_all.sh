#!/bin/sh
# Regenerates traces/ and every schedule of cases.txt (name|trace|flags) into schedules/<name>.jsonl.gz.
# PYTHON: a Python with sglang 0.5.23 and torch importable (README.md, "Regenerate").
# Extra arguments are passed to every driver run (e.g. --tree-core python).
set -eu
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
export PYTHONHASHSEED=0
python3 gen_traces.py
mkdir -p schedules
while IFS='|' read -r name trace flags; do
  case "$name" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086
  "$PYTHON" driver.py --trace "traces/$trace.jsonl" --out "schedules/$name.jsonl" $flags "$@"
  gzip -n -9 -f "schedules/$name.jsonl"
done < cases.txt
