#!/usr/bin/env bash
# Byte-identity check for refactors: runs a fixed list of commands (the README's jobs, every
# output file kind, a cluster and a PD run, deployment files, a sweep CSV, plan, validate --json,
# a calibration fit, refusals and bad input) with one binary and writes each command's stdout,
# stderr, exit status and written files under OUT. Run it with the binary before a change and
# after, then compare the two folders:
#
#   scripts/identity.sh BIN_BEFORE before/ && scripts/identity.sh BIN_AFTER after/ && diff -r before after
#
# `scripts/identity.sh --compare BIN_BEFORE BIN_AFTER` does the three steps and prints
# "identical" or the differing files. The data folder is ../shared/data or $CACHESIM_DATA;
# the commands that need it are skipped (and said so) when it is absent.
set -euo pipefail

if [[ "${1:-}" == "--compare" ]]; then
  [[ $# -eq 3 ]] || { echo "usage: $0 --compare BIN_BEFORE BIN_AFTER" >&2; exit 2; }
  work="$(mktemp -d)"
  "$0" "$2" "$work/before"
  "$0" "$3" "$work/after"
  if diff -r "$work/before" "$work/after" > "$work/diff.txt"; then
    echo "identical: $(ls "$work/before"/*.args | wc -l) commands, every output and file"
    rm -rf "$work"
  else
    cat "$work/diff.txt" | head -200
    echo "DIFFERENT (both folders kept under $work)"
    exit 1
  fi
  exit 0
fi

[[ $# -eq 2 ]] || { echo "usage: $0 BIN OUT_DIR | $0 --compare BIN_BEFORE BIN_AFTER" >&2; exit 2; }
OUT="$(realpath -m "$2")"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="$(realpath -m "${CACHESIM_DATA:-$ROOT/../shared/data}")"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# One name for every binary compared: messages print it.
mkdir -p "$WORK/bin" && cp "$1" "$WORK/bin/cachesim"
BIN="$WORK/bin/cachesim"
cd "$WORK"
# Relative paths in the commands below (calibration/, examples/, traces/) are the repository's.
for d in calibration examples traces models; do ln -s "$ROOT/$d" "$d"; done

n=0
# case NAME ARGS...: runs BIN ARGS in a fresh folder; keeps stdout, stderr, status and files.
case_() {
  local name="$1"; shift
  n=$((n + 1))
  local id; id="$(printf '%03d-%s' "$n" "$name")"
  local dir="$WORK/run-$id"
  mkdir -p "$dir"
  for d in calibration examples traces models; do ln -s "$ROOT/$d" "$dir/$d"; done
  cp -f "$WORK"/*.jsonl "$dir"/ 2>/dev/null || true
  local status=0
  (cd "$dir" && "$BIN" "$@" > "$OUT/$id.stdout" 2> "$OUT/$id.stderr") || status=$?
  echo "$status" > "$OUT/$id.status"
  printf '%s\n' "$*" > "$OUT/$id.args"
  # Files the command wrote (everything but the links and the copied inputs).
  (cd "$dir" && find . -type f ! -name r50.jsonl ! -name random50.jsonl) | sort | while read -r f; do
      local dest; dest="$OUT/$id.files/${f#./}"
      mkdir -p "$(dirname "$dest")"
      cp "$dir/$f" "$dest"
    done
  rm -rf "$dir"
}
need_data() {
  if [[ ! -d "$DATA/traces" ]]; then
    echo "skipped (no data folder at $DATA): $*" >&2
    return 1
  fi
}

# Generated inputs, shared by the later cases.
"$BIN" gen random --num-prompts 50 --input-len 200 --output-len 100 --range-ratio 1.0 -o "$WORK/r50.jsonl" > /dev/null
"$BIN" gen random --num-prompts 50 -o "$WORK/random50.jsonl" > /dev/null

# gen
case_ gen-random gen random --num-prompts 20 --input-len 300 --output-len 50 --range-ratio 0.5 -o out-random.jsonl
case_ gen-gsp gen gsp --num-groups 4 -o out-gsp.jsonl
case_ gen-sessions gen sessions -o out-sessions.jsonl

# run: the bundled sample, every report form and output file
case_ run-default
case_ run-vllm-style run --report-style vllm
case_ run-json run --json
case_ run-files run --requests-csv out-req.csv --timeline-csv out-tl.csv --token-times-csv out-tok.csv --ttft-breakdown
case_ run-plot run --plot out-plot.svg
case_ run-sglang run --engine sglang
case_ run-lightllm run --engine lightllm
case_ run-trtllm run --engine trtllm
case_ run-vllm-v0 run --engine-version vllm-v0@0.9 --num-scheduler-steps 8
case_ run-shape-16 --trace r50.jsonl --request-rate 20 --gpu v100 --model llama-3.2-11b --max-model-len 4096 --max-num-seqs 16 --max-num-batched-tokens 2048 --calibration none
case_ run-shape-64 --trace r50.jsonl --request-rate 20 --gpu v100 --model llama-3.2-11b --max-model-len 4096 --max-num-seqs 64 --max-num-batched-tokens 6144 --calibration none
case_ run-profile run --calibration calibration/profiles/seed-vllm-ttft-sweep.toml --gpu v100 --model llama-3.2-11b --trace r50.jsonl --request-rate 30 --max-num-seqs 48 --max-num-batched-tokens 4096 --engine-version vllm@0.18 --max-model-len 4096
case_ run-big --model deepseek-r1 --gpu h200 --tp 8 --enable-expert-parallel --num-prompts 40
# clusters and PD
case_ cluster-least-load --instances 2 --router least-load --requests-csv out-req.csv
case_ cluster-kv-aware --instances 4 --router kv-aware --json
case_ cluster-cache-aware --instances 2 --router cache-aware --engine sglang
case_ pd --prefill-instances 1 --decode-instances 1 --requests-csv out-req.csv --timeline-csv out-tl.csv --json
case_ deployment-2dp run --deployment calibration/deployments/v100-llama11b-2dp-router.toml --trace r50.jsonl --request-rate inf
case_ deployment-1p1d run --deployment calibration/deployments/v100-llama11b-1p1d.toml --trace r50.jsonl --request-rate inf --ttft-breakdown
# cache and analyze
case_ cache-all cache --policy all --block 16,32
case_ cache-capacity cache --policy paged,radix,token --capacity-tokens 4000,unlimited --inflight 8 --json
case_ analyze analyze
case_ analyze-gsp analyze --trace traces/gsp.jsonl --plot out-gsp.svg --json
# sweep, merge, plan
case_ sweep-grid sweep --trace random50.jsonl --request-rate 20 --grid max-num-seqs=16,24,32,48,64 --grid max-num-batched-tokens=2048,4096 --csv out-sweep.csv
case_ sweep-file sweep --trace r50.jsonl --file examples/vllm-tuning.toml --json
case_ sweep-engines sweep --grid engine=vllm,sglang --grid request-rate=2,8 --csv out-eng.csv
case_ plan-rate plan --slo ttft_p99=2000,tpot_p99=50 --grid max-num-seqs=16,64
case_ plan-deploy plan --target-rate 1 --slo ttft_p99=1000,tpot_p99=30 --gpus h100-sxm,a100-80gb --tp 1,2 --instances 1..4 --gpu-price h100-sxm=3.5,a100-80gb=1.8
# refusals and bad input
case_ refuse-model --model no-such-model
case_ refuse-flag --max-num-seqs 0
case_ refuse-trace --trace no-such-file.jsonl
case_ overload --trace r50.jsonl --request-rate inf --gpu v100 --model llama-3.2-11b --max-model-len 4096 --max-num-seqs 4 --calibration none

# with the data folder
if need_data "data-folder cases"; then
  T="$DATA/traces/sharegpt/sharegpt_v3_head.jsonl.gz"
  case_ data-sharegpt-run --trace "$T" --turns first --num-prompts 300 --request-rate 8 --json
  case_ data-mooncake-cluster --trace "$DATA/traces/mooncake/conversation_trace.jsonl" --num-prompts 2000 --block 16 --num-gpu-blocks-override 16384 --max-num-seqs 256 --max-num-batched-tokens 8192 --instances 4 --router kv-aware
  case_ data-mooncake-offload --trace "$DATA/traces/mooncake/conversation_trace.jsonl" --num-prompts 3000 --block 16 --num-gpu-blocks-override 8192 --max-num-seqs 256 --max-num-batched-tokens 8192 --kv-offloading-size 32 --json
  case_ data-mooncake-lmcache --trace "$DATA/traces/mooncake/conversation_trace.jsonl" --num-prompts 3000 --block 16 --num-gpu-blocks-override 8192 --max-num-seqs 256 --max-num-batched-tokens 8192 --engine-version vllm@0.18 --kv-offloading-size 32 --kv-offloading-backend lmcache --json
  case_ data-h20-vllm run --deployment calibration/deployments/h20-dsr1-vllm-tp8pp2.toml --trace "$T" --turns first --num-prompts 200 --request-rate inf --calibration none
  case_ data-h20-sglang run --deployment calibration/deployments/h20-dsr1-sglang-tp16-mtp.toml --trace "$T" --turns first --num-prompts 200 --request-rate inf --calibration none
  case_ data-cache cache --trace "$DATA/traces/mooncake/conversation_trace.jsonl" --policy all --block 16,512 --json
  case_ data-analyze analyze --trace "$T" --no-bounds --scope first-turn
  case_ data-validate validate --data "$DATA" --json
  case_ data-validate-csv validate --data "$DATA" --uncalibrated --csv out-v.csv
  case_ data-validate-loo validate --data "$DATA" --leave-group-out source
  case_ data-sweep-compare sweep --trace r50.jsonl --file examples/vllm-tuning.toml --compare "$DATA/../calibration/ttft_sweep.csv"
  case_ data-calibrate calibrate --fit --cases 'vllm-ttft-64seq-6144btk' --data "$DATA" --out out-fit.toml --max-iters 60
fi
echo "$n commands, outputs in $OUT" >&2
