#!/bin/bash
# Regenerates the traces and every schedule under schedules/. Usage: ./run_all.sh [extra driver args]
DRIVER=run_vllm_mamba.py
. "$(dirname "$0")/../vllm_cases.sh"  # cd here, PY, traces, run <case> <trace> [driver args...]
run shared_prefix            shared_prefix --num-gpu-blocks 2000
run shared_prefix_dense      shared_prefix --num-gpu-blocks 2000 --prefix-cache-retention-interval none
run shared_prefix_ckpt_grid  shared_prefix --num-gpu-blocks 2000 --mamba-checkpoint grid
run shared_prefix_ckpt_one   shared_prefix --num-gpu-blocks 2000 --mamba-checkpoint one
run shared_prefix_3lin       shared_prefix --num-gpu-blocks 2000 --linear-layers 3
run resend                   resend        --num-gpu-blocks 2000
run resend_ckpt_grid         resend        --num-gpu-blocks 2000 --mamba-checkpoint grid
run chunked                  chunked       --num-gpu-blocks 2000 --max-num-seqs 16 --max-num-batched-tokens 32
run chunked_ckpt_grid        chunked       --num-gpu-blocks 2000 --max-num-seqs 16 --max-num-batched-tokens 32 --mamba-checkpoint grid
run pressure                 pressure      --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 128 --max-model-len 256
run pressure_ckpt_grid       pressure      --num-gpu-blocks 40 --max-num-seqs 8 --max-num-batched-tokens 128 --max-model-len 256 --mamba-checkpoint grid
run no_prefix_caching        shared_prefix --num-gpu-blocks 2000 --no-prefix-caching
