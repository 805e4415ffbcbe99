#!/usr/bin/env bash
# Everything we check and measure on the GPU machine, in one call (nothing is built there):
#   source scripts/dev/gpu_env.sh; scripts/dev/gpu_all.sh
# runs every CUDA test, bench/run_cuda.sh (tc next to PyTorch), the training-step benchmarks
# (bench/run_train.sh: DenseNet-121 and GPT-2 small, tc next to PyTorch; PyTorch's torch.compile
# variants only with TORCH_VARIANTS=eager,default,reduce-overhead, their cold compiles take
# minutes), the capture dispatch benchmark
# (on that machine's quiet CPU), and prints a summary table last. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/p/build}
LOG=${OUT:-/tmp}
summary=()
for t in "$B"/tests/cuda_*; do
  name=$(basename "$t")
  # NVRTC compiling every kernel needs no GPU: CI runs it; here it would take minutes
  [ "$name" = cuda_nvrtc_compiles_all_kernels ] && continue
  t0=$(date +%s)
  if "$t" > "$LOG/$name.log" 2>&1; then r=pass; else r=FAIL; tail -40 "$LOG/$name.log"; fi
  summary+=("$(printf '%-48s %-5s %4ss' "$name" "$r" "$(( $(date +%s) - t0 ))")")
done
for suite in tests/lua/run.lua tests/capture/run.lua; do
  t0=$(date +%s)
  if "$B/tcrun" "$suite" > "$LOG/$(basename "$(dirname "$suite")")_lua.log" 2>&1; then r=pass; else r=FAIL; tail -40 "$LOG/$(basename "$(dirname "$suite")")_lua.log"; fi
  summary+=("$(printf '%-48s %-5s %4ss' "tcrun $suite" "$r" "$(( $(date +%s) - t0 ))")")
done
t0=$(date +%s)
if tests/distributed/run.sh "$B/tcrun" cuda > "$LOG/distributed.log" 2>&1; then r=pass; else r=FAIL; tail -40 "$LOG/distributed.log"; fi
summary+=("$(printf '%-48s %-5s %4ss' "tests/distributed/run.sh (nccl)" "$r" "$(( $(date +%s) - t0 ))")")
echo "== bench/run_cuda.sh"
bench/run_cuda.sh "$B" 2>&1 | tee "$LOG/run_cuda.log"
echo "== bench/run_train.sh (training steps)"
TORCH_VARIANTS=${TORCH_VARIANTS:-eager} bench/run_train.sh "$B" python3 gpu 2>&1 | tee "$LOG/run_train.log"
echo "== capture dispatch (CPU of this machine)"
"$B/bench/bench_capture_dispatch" 2>&1 | tee "$LOG/capture_dispatch.log"
"$B/tcrun" bench/capture_overhead.lua 2>&1 | tee -a "$LOG/capture_dispatch.log"
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
grep -E "^(seed_64_layers|resnet50|densenet121) " "$LOG/run_cuda.log" || true
grep -E "^(densenet121|gpt2) +(eager|default|reduce-overhead) " "$LOG/run_train.log" || true
grep -E "^(16|64|256|foo) " "$LOG/capture_dispatch.log" || true
