#!/usr/bin/env bash
# CUDA benchmarks on the GPU machine, tc next to PyTorch eager on the same GPU in the same run:
# model forward times (bench/models_cuda.lua vs bench/peer_torch_models_cuda.py; tc twice: the
# default, cuDNN's graph API for every convolution it takes, and the im2col + cuBLAS fallback
# always (TC_CUDNN_DISABLE=1)), per-op eager
# overhead from Lua (bench/eager_overhead.lua cuda vs bench/peer_torch_eager.py cuda), and the
# pointwise bandwidth table of bench_cuda_eager (its own output, with PyTorch's peer).
# Usage: bench/run_cuda.sh [BUILD_DIR (default build)] [PYTHON (default python3)]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PY=${2:-python3}
tcm=$(mktemp); tcf=$(mktemp); ptm=$(mktemp); tco=$(mktemp); pto=$(mktemp)
trap 'rm -f "$tcm" "$tcf" "$ptm" "$tco" "$pto"' EXIT
"$B/tcrun" bench/models_cuda.lua > "$tcm" || echo "tc models bench failed" >&2
TC_CUDNN_DISABLE=1 "$B/tcrun" bench/models_cuda.lua > "$tcf" || echo "tc models bench (fallback) failed" >&2
$PY bench/peer_torch_models_cuda.py > "$ptm" || echo "torch models bench failed" >&2
"$B/tcrun" bench/eager_overhead.lua 20000 cuda > "$tco" || echo "tc overhead bench failed" >&2
$PY bench/peer_torch_eager.py 20000 cuda > "$pto" || echo "torch overhead bench failed" >&2
if [ -x "$B/bench/bench_cuda_eager" ]; then "$B/bench/bench_cuda_eager" $((1 << 26)); fi
$PY bench/peer_torch_cuda.py $((1 << 26)) 2>/dev/null | grep -v "^device" | sed 's/^/torch: /'
echo
echo "per-op eager overhead from Lua / Python, us per op (cuda, 1-element tensors)"
while read -r name us; do
  printf "%-20s tc %8.2f   torch %8.2f\n" "$name" "$us" "$(awk -v n="$name" '$1==n {print $2}' "$pto")"
done < "$tco"
echo "eager CUDA forward ms, TF32 allowed, best of N; tc: default (cuDNN), convolutions on the fallback always"
printf "%-16s %-12s %9s %9s %9s %8s %9s\n" model input "tc ms" "fallbk ms" "torch ms" "tc/pt" "fallbk/pt"
declare -A input=([seed_64_layers]="10x10" [resnet50]="16x3x128x128" [densenet121]="16x3x128x128" [conv3x3_x50]="16x256x16x16" [conv1x1_x50]="16x1024x8x8")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{print (b > 0 ? a/b : 0)}'; }
while read -r name ms _; do
  f=$(awk -v n="$name" '$1==n {print $2}' "$tcf")
  peer=$(awk -v n="$name" '$1==n {print $2}' "$ptm")
  printf "%-16s %-12s %9.3f %9.3f %9.3f %8.2f %9.2f\n" "$name" "${input[$name]:-}" "$ms" "${f:-0}" "${peer:-0}" \
    "$(ratio "$ms" "${peer:-0}")" "$(ratio "${f:-0}" "${peer:-0}")"
done < "$tcm"
