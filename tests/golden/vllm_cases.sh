# Shared by the run_all.sh of vllm_hybrid, vllm_mamba and vllm_offload, which set DRIVER (the driver
# script) and source this file: it goes to that run_all.sh's folder, regenerates traces/ with
# make_traces.py, and defines
#   run <case> <trace> [driver args...]
# which writes schedules/<case>$SUFFIX.jsonl from traces/<trace>.jsonl and
# traces/<trace>.arrivals.json. PY: the vLLM 0.33.0 venv's python (default venv/bin/python; the
# drivers set PYTHONHASHSEED=0 themselves if it is unset). SUFFIX: appended to every case name
# (default none). The arguments given to run_all.sh are passed to every driver run.
set -e
cd "$(dirname "$0")"
PY=${PY:-venv/bin/python}
EXTRA_ARGS=("$@")
python3 make_traces.py
mkdir -p schedules

run() {  # run <case> <trace> [driver args...]
  local name=$1 trace=$2
  shift 2
  $PY "$DRIVER" --trace "traces/$trace.jsonl" --arrival-steps "traces/$trace.arrivals.json" \
    --out "schedules/$name${SUFFIX:-}.jsonl" "$@" "${EXTRA_ARGS[@]}"
}
