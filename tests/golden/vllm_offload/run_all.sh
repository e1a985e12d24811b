#!/bin/bash
# Regenerates every golden under schedules/. Usage: ./run_all.sh [extra driver args, e.g. --copy-lag-steps 1] 
set -e
cd "$(dirname "$0")"
PY=venv/bin/python
SUFFIX=${SUFFIX:-}
python3 make_traces.py
mkdir -p schedules
$PY run_vllm_offload.py --trace traces/reload.jsonl --arrival-steps traces/reload.arrivals.json \
  --num-gpu-blocks 9 --cpu-chunks 64 --out schedules/reload$SUFFIX.jsonl "$@"
$PY run_vllm_offload.py --trace traces/aligned.jsonl --arrival-steps traces/aligned.arrivals.json \
  --num-gpu-blocks 1000 --cpu-chunks 64 --out schedules/aligned$SUFFIX.jsonl "$@"
$PY run_vllm_offload.py --trace traces/dedup.jsonl --arrival-steps traces/dedup.arrivals.json \
  --num-gpu-blocks 9 --cpu-chunks 64 --out schedules/dedup$SUFFIX.jsonl "$@"
$PY run_vllm_offload.py --trace traces/pressure.jsonl --arrival-steps traces/pressure.arrivals.json \
  --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 256 --cpu-chunks 30 \
  --out schedules/pressure$SUFFIX.jsonl "$@"
$PY run_vllm_offload.py --trace traces/pressure.jsonl --arrival-steps traces/pressure.arrivals.json \
  --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 256 --cpu-chunks 8 \
  --out schedules/pressure_small_cpu$SUFFIX.jsonl "$@"
