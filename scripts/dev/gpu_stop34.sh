#!/usr/bin/env bash
# One device call for stop 34 (after `source scripts/dev/gpu_env.sh`): issue 32's remaining GPU checks
# (the Lua and capture suites with a GPU, size overflow on cuda, the two CUDA fixes' binaries), then
# issue 29's (exact resume on cuda, seed 003 beside PyTorch, char GPT on cuda, Trainer overhead).
# Each part has its own time limit; a summary comes last.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/p/build}
LOG=${OUT:-/tmp}
summary=()
run() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  if timeout "$limit" "$@" > "$LOG/$name.log" 2>&1; then summary+=("$(printf '%-44s pass %ss' "$name" $(( $(date +%s) - t0 )))")
  else summary+=("$(printf '%-44s FAIL %ss' "$name" $(( $(date +%s) - t0 )))"); echo "== $name"; tail -25 "$LOG/$name.log"; fi
  echo "${summary[-1]}"  # as it goes: a call cut short at its limit still says what ran
}
run lua_suite 150 "$B/tcrun" tests/lua/run.lua
run capture_suite_cuda 120 "$B/tcrun" --device=cuda tests/capture/run.lua
run size_overflow_on_cuda 30 "$B/tcrun" --device=cuda tests/lua/run.lua test_size_overflow
for t in "$B"/tests/*; do run "$(basename "$t")" 60 "$t"; done
run resume_on_cuda 60 env PARTS=resume scripts/dev/gpu_issue29.sh "$B"
grep '^resume cuda' "$LOG/resume_on_cuda.log"
run seed003_tc 150 "$B/tcrun" scripts/examples/seed003_inception.lua --device cuda --batch 16 --size 512 --steps 10
tail -4 "$LOG/seed003_tc.log"
run seed003_torch 150 python3 bench/peer_torch_seed003.py --batch 16 --size 512 --steps 10 --modes eager,default
grep -v Warn "$LOG/seed003_torch.log" | tail -5
run trainer_overhead_gpt2 90 "$B/tcrun" bench/trainer_overhead.lua gpt2 cuda 20 2
tail -3 "$LOG/trainer_overhead_gpt2.log"
run data_loading_resnet50 150 "$B/tcrun" bench/data_loading.lua --device cuda --rounds 1 --steps 15
grep -i "ratio\|median\|mean" "$LOG/data_loading_resnet50.log" | tail -8
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader))"
printf '%s\n' "${summary[@]}"
