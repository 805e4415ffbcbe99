#!/usr/bin/env bash
# Issue 15's measurement on a machine with N >= 1 GPUs: bench/ddp_scaling.lua under
# `tcrun --nproc-per-node` with 1 and with N ranks (GPT-2 small DDP training step, all-reduce of
# 256 MB), PyTorch's all-reduce of the same tensor on the same NCCL next to it, and the scaling.
# Usage: bench/run_ddp.sh [BUILD_DIR (default build)] [PYTHON (default python3)] [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
PY=${2:-python3}
STEPS=${3:-10}
n=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
[ "$n" -ge 1 ] || { echo "run_ddp.sh: no GPU"; exit 1; }
one=$(mktemp); many=$(mktemp); pt=$(mktemp)
trap 'rm -f "$one" "$many" "$pt"' EXIT
"$B/tcrun" --nproc-per-node 1 --master-port 29811 bench/ddp_scaling.lua "$STEPS" > "$one" || echo "tc 1 rank failed" >&2
cat "$one" | sed 's/^/tc 1 gpu:  /'
if [ "$n" -ge 2 ]; then
  "$B/tcrun" --nproc-per-node "$n" --master-port 29812 bench/ddp_scaling.lua "$STEPS" > "$many" || echo "tc $n ranks failed" >&2
  sed "s/^/tc $n gpus: /" "$many"
  $PY -m torch.distributed.run --nproc-per-node "$n" --master-port 29813 bench/peer_torch_allreduce.py > "$pt" 2>/dev/null || echo "torch all-reduce failed" >&2
  sed "s/^/torch $n gpus: /" "$pt"
  get() { awk -v k="$1" '$1==k {print $2}' "$2"; }
  awk -v a="$(get gpt2_tokens_per_s "$many")" -v b="$(get gpt2_tokens_per_s "$one")" -v n="$n" \
    'BEGIN { if (b > 0) printf "gpt2 training throughput scaling %d gpus / 1 gpu: %.3fx (goal >= 1.9x for 2)\n", n, a / b }'
  awk -v a="$(get allreduce_busbw_GBps "$many")" -v b="$(get allreduce_busbw_GBps "$pt")" \
    'BEGIN { if (b > 0) printf "all-reduce 256 MB bus bandwidth: tc %.1f GB/s, torch (same NCCL) %.1f GB/s, ratio %.3f\n", a, b, a / b }'
fi
