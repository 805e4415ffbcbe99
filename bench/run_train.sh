#!/usr/bin/env bash
# Issue 13's training benchmarks, tc next to PyTorch in the same run (bench/train_step.lua,
# bench/peer_torch_train.py): on the GPU, DenseNet-121 (batch 16, 3x128x128, Adam) and GPT-2 small
# (batch 8 x 256, AdamW) training steps; on the CPU, a small CNN's. Each: eager, compiled
# (default) and compiled with mode="reduce-overhead", median step time and the first call (cold
# compile plus one step); a variant that does not run prints n/a with its error.
# Usage: bench/run_train.sh [BUILD_DIR (build)] [PYTHON (python3)] [gpu|cpu (gpu)] [ITERS (10)]
# TC_VARIANTS / TORCH_VARIANTS (default eager,default,reduce-overhead) choose the variants
# (torch.compile's cold compile of the DenseNet step takes minutes); TC_BENCH_BUDGET caps the
# seconds each variant spends timing (60).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PY=${2:-python3}
WHERE=${3:-gpu}
N=${4:-10}
TCV=${TC_VARIANTS:-eager,default,reduce-overhead}
PTV=${TORCH_VARIANTS:-eager,default,reduce-overhead}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "$WHERE" = gpu ]; then
  models="densenet121 gpt2" dev=cuda
  echo "# GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
else
  models=cnn dev=cpu
  echo "# CPU: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
fi
for m in $models; do
  "$B/tcrun" bench/train_step.lua "$m" "$dev" "$N" "$TCV" 2>&1 | tee -a "$out"
  $PY bench/peer_torch_train.py "$m" "$dev" "$N" "$PTV" 2>&1 | tee -a "$out"
done
cell() {  # who model variant -> "ms (first s)", "n/a" or "-"
  awk -v w="$1" -v m="$2" -v v="$3" '$1==w && $2==m && $3==v {found=1; if ($4=="n/a:") print "n/a"; else printf "%.2f (%.1fs)\n", $4, $5}
    END {if (!found) print "-"}' "$out"
}
echo
echo "training step on $dev, median ms (first call s: cold compile + one step)"
printf "%-12s %-16s %18s %18s\n" model variant tc torch
for m in $models; do
  for v in eager default reduce-overhead; do
    printf "%-12s %-16s %18s %18s\n" "$m" "$v" "$(cell tc "$m" "$v")" "$(cell torch "$m" "$v")"
  done
done
