#!/bin/bash
# Regenerates every golden under schedules/. Usage: ./run_all.sh [extra driver args, e.g. --copy-lag-steps 1]
# SUFFIX=_lag1 writes schedules/<case>_lag1.jsonl.
DRIVER=run_vllm_offload.py
. "$(dirname "$0")/../vllm_cases.sh"  # cd here, PY, traces, run <case> <trace> [driver args...]
run reload             reload   --num-gpu-blocks 9 --cpu-chunks 64
run aligned            aligned  --num-gpu-blocks 1000 --cpu-chunks 64
run dedup              dedup    --num-gpu-blocks 9 --cpu-chunks 64
run pressure           pressure --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 256 --cpu-chunks 30
run pressure_small_cpu pressure --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 256 --cpu-chunks 8
