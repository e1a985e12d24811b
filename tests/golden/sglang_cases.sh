# Shared by the run_all.sh of sglang_hicache, sglang_noradix, sglang_swa and sglang_mamba, which
# source it: it goes to that run_all.sh's folder, regenerates traces/ with gen_traces.py, and runs
# driver.py for every case of cases.txt (name|trace|flags, '#' comments) into
# schedules/<name>.jsonl.gz (`gzip -n -9`). PYTHON: a Python with sglang 0.5.23 and torch
# importable (each folder's README, "Regenerate"); PYTHONHASHSEED is 0. The arguments given to
# run_all.sh are passed to every driver run (e.g. --tree-core python).
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
