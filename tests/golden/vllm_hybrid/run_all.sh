#!/bin/bash
# Regenerates the traces and every golden under schedules/. Usage: ./run_all.sh [extra driver args]
# PY defaults to venv/bin/python (the vLLM 0.33.0 venv); the driver sets PYTHONHASHSEED=0 itself if unset.
DRIVER=run_vllm_hybrid.py
. "$(dirname "$0")/../vllm_cases.sh"  # cd here, PY, traces, run <case> <trace> [driver args...]

# (a) shared prefixes, W=32, 1 SW + 1 full group (sliding layer first, as gpt-oss/Gemma), big pool
run shared_prefix           shared_prefix --sliding-window 32 --num-gpu-blocks 5000
run shared_prefix_fullfirst shared_prefix --sliding-window 32 --num-gpu-blocks 5000 --layer-order full-first
run shared_prefix_r64       shared_prefix --sliding-window 32 --num-gpu-blocks 5000 --prefix-cache-retention-interval 64
run shared_prefix_dense     shared_prefix --sliding-window 32 --num-gpu-blocks 5000 --prefix-cache-retention-interval none
# (b) identical prompt resent after the first finished
run resend                  resend        --sliding-window 32 --num-gpu-blocks 5000
# (c) siblings of a common prefix
run siblings                siblings      --sliding-window 32 --num-gpu-blocks 5000
run siblings_dense          siblings      --sliding-window 32 --num-gpu-blocks 5000 --prefix-cache-retention-interval none
# (d) chunked prefill with a 64-token budget: the window slides during the prefill
run chunked                 chunked       --sliding-window 32 --num-gpu-blocks 5000 --max-num-seqs 16 --max-num-batched-tokens 64
# (e) pressure: small pool, eviction and preemption; (f) the same with dense retention.
# max_model_len 512 so that vLLM's startup check (one max_model_len request must fit) accepts the
# 56/96-block pools; with 65536 the step records are identical (checked for pressure).
run pressure                pressure      --sliding-window 32 --num-gpu-blocks 56 --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512
run pressure_dense          pressure      --sliding-window 32 --num-gpu-blocks 56 --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512 --prefix-cache-retention-interval none
run pressure_fullfirst      pressure      --sliding-window 32 --num-gpu-blocks 56 --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512 --layer-order full-first
# (g) wide window W=128 (gpt-oss), prompts up to 600 tokens; also with a 128-token budget
run wide_window             wide_window   --sliding-window 128 --num-gpu-blocks 5000
run wide_window_chunked     wide_window   --sliding-window 128 --num-gpu-blocks 5000 --max-num-seqs 16 --max-num-batched-tokens 128
# (h) Gemma-like: 3 sliding-window layers, each its own group, + 1 full group
run gemma_shared_prefix     shared_prefix --sliding-window 32 --num-gpu-blocks 6000 --sw-groups 3
run gemma_pressure          pressure      --sliding-window 32 --num-gpu-blocks 96 --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512 --sw-groups 3
# No full-attention layer (Mistral-7B-v0.1's shape): one sliding group, UnitaryKVCacheCoordinator.
run pure_shared_prefix      shared_prefix --sliding-window 32 --num-gpu-blocks 5000 --no-full-layer
run pure_shared_prefix_dense shared_prefix --sliding-window 32 --num-gpu-blocks 5000 --no-full-layer --prefix-cache-retention-interval none
run pure_resend             resend        --sliding-window 32 --num-gpu-blocks 5000 --no-full-layer
run pure_siblings           siblings      --sliding-window 32 --num-gpu-blocks 5000 --no-full-layer
run pure_chunked            chunked       --sliding-window 32 --num-gpu-blocks 5000 --no-full-layer --max-num-seqs 16 --max-num-batched-tokens 64
run pure_pressure           pressure      --sliding-window 32 --num-gpu-blocks 14 --no-full-layer --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512
run pure_pressure_dense     pressure      --sliding-window 32 --num-gpu-blocks 14 --no-full-layer --max-num-seqs 8 --max-num-batched-tokens 256 --max-model-len 512 --prefix-cache-retention-interval none
run pure_wide_window        wide_window   --sliding-window 128 --num-gpu-blocks 5000 --no-full-layer
