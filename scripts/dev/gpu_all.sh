#!/usr/bin/env bash
# Everything we check and measure on the GPU machine, in one call (nothing is built there):
#   source scripts/dev/gpu_env.sh; scripts/dev/gpu_all.sh
# runs every CUDA test, bench/run_cuda.sh (tc next to PyTorch), the training-step benchmarks
# (bench/run_train.sh: DenseNet-121 and GPT-2 small, tc next to PyTorch; PyTorch's torch.compile
# variants only with TORCH_VARIANTS=eager,default,reduce-overhead, their cold compiles take
# minutes), the capture dispatch benchmark
# (on that machine's quiet CPU), and prints a summary table last. Logs go to $OUT when set.
# GPU_QUICK=1 (for a session's last minutes of device time): the CUDA test binaries and the GPU
# capture suite side by side, then tc's training steps (eager, default, reduce-overhead; PyTorch
# eager beside them) and tc's per-call models only (no torch.compile, no NCCL, no dispatch bench).
#   Quick mode runs every packed test binary of tests/cuda_*, backends_cuda_* and aot_cuda_*, the
#   op conformance harness with --backend=cuda when packed, the capture suite and tests/lua's
#   test_autograd_cuda on the GPU; GPU_QUICK_TRAIN=0 skips the training steps; GPU_QUICK_TORCH=1 replaces tc's per-call rows by bench/compare_torch_cuda.sh
#   (tc and torch.compile side by side, cold compiles; GPU_QUICK_SECTIONS picks its sections);
#   GPU_QUICK_BENCH=0 skips the per-call rows (tests and training steps only).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/p/build}
LOG=${OUT:-/tmp}
summary=()
if [ "${GPU_QUICK:-0}" = 1 ]; then
  ls "$B"/tests/cuda_* "$B"/tests/backends_cuda_* "$B"/tests/aot_cuda_* 2>/dev/null | grep -v cuda_nvrtc_compiles_all_kernels |
    xargs -P 6 -I{} sh -c 'n=$(basename {}); if {} > "$0/$n.log" 2>&1; then echo "$n pass"; else echo "$n FAIL"; tail -30 "$0/$n.log"; fi' "$LOG" &
  conf="$B/tests/backends_conformance_every_op_matches_eager_and_float64"
  # the op conformance harness through the cuda backend on the GPU, in 8 gtest shards at once
  # (one process takes ~270 s, nearly all of it NVRTC)
  [ -x "$conf" ] && ( for i in 0 1 2 3 4 5 6 7; do
      GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i "$conf" --backend=cuda --device=cuda > "$LOG/conformance_cuda.$i.log" 2>&1 &
    done; bad=0; for j in $(jobs -p); do wait "$j" || bad=1; done
    if [ $bad = 0 ]; then echo "conformance harness (cuda backend, 8 shards) pass"; else echo "conformance harness (cuda backend) FAIL";
      grep -h "FAILED\|Failure" "$LOG"/conformance_cuda.*.log | head -20; fi ) &
  ( if "$B/tcrun" --device=cuda tests/capture/run.lua > "$LOG/capture_cuda.log" 2>&1; then echo "capture suite (cuda) pass";
    else echo "capture suite (cuda) FAIL"; grep -iE "fail|error" "$LOG/capture_cuda.log" | head -20; fi ) &
  ( if "$B/tcrun" --device=cuda tests/lua/run.lua test_autograd_cuda > "$LOG/autograd_cuda.log" 2>&1; then echo "test_autograd_cuda pass";
    else echo "test_autograd_cuda FAIL"; tail -20 "$LOG/autograd_cuda.log"; fi ) &
  wait
  [ "${GPU_QUICK_TRAIN:-1}" = 1 ] && for m in densenet121 gpt2; do
    TC_BENCH_BUDGET=${TC_BENCH_BUDGET:-2} "$B/tcrun" bench/train_step.lua $m cuda 5 eager,default,reduce-overhead 2>&1 | tee -a "$LOG/run_train.log"
    python3 bench/peer_torch_train.py $m cuda 5 eager 2>&1 | tee -a "$LOG/run_train.log"
  done
  if [ "${GPU_QUICK_BENCH:-1}" = 0 ]; then
    :
  elif [ "${GPU_QUICK_TORCH:-0}" = 1 ]; then
    # shellcheck disable=SC2086
    bench/compare_torch_cuda.sh -b "$B" -o "$LOG/compare" ${GPU_QUICK_SECTIONS:-seed_whole gpt2 resnet50 densenet121 kernels} 2>&1 | tee "$LOG/compare_torch.log"
  else
    for s in seed_whole resnet50 densenet121 gpt2 kernels; do "$B/tcrun" bench/compare_torch_cuda.lua $s tc 2>&1 | tee -a "$LOG/compare_tc.log"; done
  fi
  exit 0
fi
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
