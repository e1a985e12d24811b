#!/bin/sh
# Regenerates every schedule of cases.txt (name|trace|flags) into schedules/<name>.jsonl.gz, with
# the traces of ../sglang_hicache. PYTHON: a Python with sglang 0.5.23
# and torch importable (README.md); its bin/ must hold `ninja` (SGLang JIT-builds its native
# page-hash extension with torch.utils.cpp_extension; g++ and OpenSSL headers needed too).
# @SHARED in flags is one fresh directory for the whole run (instances sharing a file backend).
set -eu
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
PATH="$(cd "$(dirname "$(command -v "$PYTHON")")" && pwd):$PATH"; export PATH
export PYTHONHASHSEED=0
SHARED=$(mktemp -d)
mkdir -p schedules
while IFS='|' read -r name trace flags; do
  case "$name" in ''|'#'*) continue ;; esac
  flags=$(echo "$flags" | sed "s#@SHARED#$SHARED#g")
  # shellcheck disable=SC2086
  "$PYTHON" driver.py --trace "../sglang_hicache/traces/$trace.jsonl" \
    --out "schedules/$name.jsonl" --max-running-requests 8 $flags "$@"
  # the shared directory's path is not part of the golden
  sed -i "s#$SHARED#@SHARED#g" "schedules/$name.jsonl"
  gzip -n -9 -f "schedules/$name.jsonl"
done < cases.txt
rm -rf "$SHARED"
