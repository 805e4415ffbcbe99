#!/usr/bin/env bash
# Issue 32's checks on the GPU machine (after `source scripts/dev/gpu_env.sh`): the Lua and capture
# suites with a GPU present (attention dropout on cuda, test_autograd_cuda, the API-gap and data
# tests, errors inside compiled cuda code), size overflow on cuda tensors, the distributed suite on
# nccl, and the cost of the cross-rank collective check on nccl. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/p/build}
LOG=${OUT:-/tmp}
summary=()
note() { summary+=("$(printf '%-56s %s' "$1" "$2")"); }
run() {  # name, command...
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" > "$LOG/$name.log" 2>&1; then note "$name" "pass $(( $(date +%s) - t0 ))s"
  else note "$name" "FAIL $(( $(date +%s) - t0 ))s"; echo "== $name"; tail -40 "$LOG/$name.log"; fi
}
run lua_suite "$B/tcrun" tests/lua/run.lua
run capture_suite_cuda "$B/tcrun" --device=cuda tests/capture/run.lua
run api_gaps_on_cuda "$B/tcrun" --device=cuda tests/lua/run.lua test_api_gaps
run size_overflow_on_cuda "$B/tcrun" --device=cuda tests/lua/run.lua test_size_overflow
run size_overflow_cuda_tensors "$B/tcrun" -e '
local tc = require "tc"
for _, c in ipairs({{{2^62}}, {{2^62}, tc.uint8}, {{2^30, 2^32}}}) do
  local args = {table.unpack(c[1])}
  args[#args + 1] = {device = "cuda", dtype = c[2]}
  local ok, e = pcall(tc.zeros, table.unpack(args))
  assert(not ok and type(e) == "table", "expected a tc error, got " .. tostring(e))
  print("cuda zeros", table.concat(c[1], "x"), e.kind, e.message)
end
local ok, e = pcall(function() return tc.ones(1, {device = "cuda"}):expand(2^62):sum() end)
assert(not ok and type(e) == "table", "expand(2^62):sum() on cuda: " .. tostring(e))
print("cuda expand(2^62):sum()", e.kind, e.message)
'
for t in "$B"/tests/*; do run "$(basename "$t")" "$t"; done
run distributed_nccl tests/distributed/run.sh "$B/tcrun" cuda
for c in on off; do
  "$B/tcrun" --nproc-per-node 1 bench/collective_check_cost.lua nccl $c 5000 2>&1 | tail -2 | tee -a "$LOG/check_cost.log"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
cat "$LOG/check_cost.log"
