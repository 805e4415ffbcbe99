#!/usr/bin/env bash
# Eager CPU forward time of the model zoo, tc next to PyTorch (Debian's python3-torch) on the same
# machine with the same thread count. Usage: bench/run_models_cpu.sh [THREADS [MODEL...]]
# (default: all cores). Columns: best-of-N ms per forward (median in brackets); ratio = tc / torch
# of the best times (> 1: tc is slower).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
shift || true
tcfile=$(mktemp); ptfile=$(mktemp)
trap 'rm -f "$tcfile" "$ptfile"' EXIT
./build/tcrun bench/models_cpu.lua "$THREADS" "$@" > "$tcfile"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then  # models without torchvision: tc only
  /usr/bin/python3 bench/peer_torch_models.py "$THREADS" "$@" > "$ptfile"
fi
echo "eager CPU forward, $THREADS threads, $(uname -m), $(nproc) cores"
printf "%-16s %-14s %22s %22s %9s\n" "model" "input" "tc ms (median)" "torch ms (median)" "tc/torch"
declare -A input=([seed_64_layers]="10x10" [my_module]="10x100" [resnet18]="2x3x128x128"
                  [resnet50]="2x3x128x128" [densenet121]="2x3x128x128" [inception_v3]="1x3x299x299"
                  [gpt2_small]="2x64 tokens")
while read -r name ms med _; do
  peer=$(awk -v n="$name" '$1==n {print $2}' "$ptfile")
  pmed=$(awk -v n="$name" '$1==n {print $3}' "$ptfile")
  if [ -n "$peer" ]; then
    printf "%-16s %-14s %12.3f (%8.3f) %12.3f (%8.3f) %9.2f\n" "$name" "${input[$name]:-}" "$ms" "$med" "$peer" "$pmed" \
      "$(awk -v a="$ms" -v b="$peer" 'BEGIN{print a/b}')"
  else
    printf "%-16s %-14s %12.3f (%8.3f) %22s %9s\n" "$name" "${input[$name]:-}" "$ms" "$med" "-" "-"
  fi
done < "$tcfile"
