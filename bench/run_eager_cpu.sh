#!/usr/bin/env bash
# The eager CPU benchmark: bandwidth and GEMM against their peers (bench_eager_cpu), then the
# per-op overhead from Lua next to PyTorch's eager overhead, measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200000}
./build/bench/bench_eager_cpu "$@"
echo
tcfile=$(mktemp); ptfile=$(mktemp)
./build/tcrun bench/eager_overhead.lua "$N" > "$tcfile"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 bench/peer_torch_eager.py "$N" > "$ptfile"
fi
printf "%-22s %10s %12s %8s\n" "per-op overhead" "tc (µs)" "torch (µs)" "ratio"
while read -r name us; do
  peer=$(awk -v n="$name" '$1==n {print $2}' "$ptfile")
  if [ -n "$peer" ]; then
    printf "%-22s %10.3f %12.3f %8.2f\n" "$name" "$us" "$peer" "$(awk -v a="$peer" -v b="$us" 'BEGIN{print a/b}')"
  else
    printf "%-22s %10.3f %12s %8s\n" "$name" "$us" "-" "-"
  fi
done < "$tcfile"
rm -f "$tcfile" "$ptfile"
