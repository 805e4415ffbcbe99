#!/usr/bin/env bash
# Issue 29's checks on the GPU machine (after `source scripts/dev/gpu_env.sh`): exact resume on cuda
# (a SIGKILLed trainer run resumed gives the uninterrupted run's losses bit for bit), the char-GPT
# example on cuda, and seed 003's Inception-v3 benchmark through tc.Trainer beside PyTorch's plain
# loop (eager and torch.compile). Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-/tmp/p/build}
LOG=${OUT:-/tmp}
PARTS=${PARTS:-resume char seed003 torch}  # which parts run
has() { [[ " $PARTS " == *" $1 "* ]]; }
S=tests/lua/trainer_resume_script.lua
has resume && for c in "30 1 global x batch" "25 2 workers compiled batch" "15 1 seed x epoch"; do
  set -- $c
  full=$(mktemp -d); part=$(mktemp -d)
  "$B/tcrun" $S "$full" full $2 $3 $4 $5 cuda > "$full/out" 2>&1 || { echo "resume cuda ($c): full run failed"; tail -5 "$full/out"; }
  "$B/tcrun" $S "$part" kill:$1 $2 $3 $4 $5 cuda > "$part/out" 2>&1
  n=$(wc -l < "$part/losses")
  "$B/tcrun" $S "$part" resume $2 $3 $4 $5 cuda > "$part/out2" 2>&1 || { echo "resume cuda ($c): resume failed"; tail -5 "$part/out2"; }
  tail -n +$((n + 1)) "$part/losses" > "$part/resumed"
  echo "resume cuda ($c): $(join <(sort "$full/losses") <(sort "$part/resumed") | awk '{ if ($2 != $3) bad++; n++ } END { print n " losses compared, " bad+0 " differ" }')"
done
has char && timeout 300 "$B/tcrun" scripts/examples/char_gpt.lua --device cuda --compile 1 2>&1 | tail -6
has seed003 && timeout 400 "$B/tcrun" scripts/examples/seed003_inception.lua --device cuda --batch 16 --size 512 --steps 10 2>&1 | tail -8
has torch && timeout 500 python3 bench/peer_torch_seed003.py --batch 16 --size 512 --steps 10 --modes eager,default 2>&1 | grep -v Warning | tail -6
nvidia-smi --query-gpu=name --format=csv,noheader
