#!/usr/bin/env bash
# The differential fuzzer's campaign runner: `tests/fuzz/run.sh N SEED [BACKENDS]` checks the
# programs of seeds SEED .. SEED+N-1 (check.lua: eager against compiled with each backend of the
# comma list BACKENDS, default eager), each in its own tcrun process under a timeout, shrinks
# failures (shrink.lua) and prints a summary. Exit status 1 when any program failed.
# Environment: TCRUN (default build/tcrun), FUZZ_OUT (default build/fuzz: programs, reproducers,
# the log), FUZZ_TIMEOUT (seconds per program, default 10), FUZZ_SHRINK (0: don't shrink),
# FUZZ_SHRINK_MAX (reproducers shrunk per category, default 2), FUZZ_SHRINK_BUDGET (seconds each),
# FUZZ_JOBS (parallel runners over parts of the range, default 1).
set -u
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then echo "usage: tests/fuzz/run.sh N SEED [BACKENDS]" >&2; exit 2; fi
N=$1 SEED=$2 BACKENDS=${3:-eager}
TCRUN=${TCRUN:-build/tcrun}
OUT=${FUZZ_OUT:-build/fuzz}
TIMEOUT=${FUZZ_TIMEOUT:-10}
SHRINK=${FUZZ_SHRINK:-1}
SHRINK_MAX=${FUZZ_SHRINK_MAX:-2}
SHRINK_BUDGET=${FUZZ_SHRINK_BUDGET:-240}
mkdir -p "$OUT"
JOBS=${FUZZ_JOBS:-1}
if [ "$JOBS" -gt 1 ]; then # split the range, one runner per part, then one combined summary
  per=$(( (N + JOBS - 1) / JOBS )) pids=() status=0
  for ((j = 0; j < JOBS; j++)); do
    n=$(( N - j * per < per ? N - j * per : per ))
    [ "$n" -gt 0 ] || break
    FUZZ_JOBS=1 FUZZ_OUT="$OUT/part$j" "$0" "$n" $((SEED + j * per)) "$BACKENDS" > "$OUT/part$j.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  cat "$OUT"/part*.txt
  exit $status
fi
LOG="$OUT/log-$SEED-$N.txt"
: > "$LOG"
declare -A shrunk=()
pass=0 invalid=0 failed=0 failures=""
start=$(date +%s)
for ((s = SEED; s < SEED + N; s++)); do
  line=$(timeout "$TIMEOUT" "$TCRUN" tests/fuzz/check.lua --seed "$s" --backends "$BACKENDS" 2>"$OUT/stderr.txt")
  rc=$?
  first=${line%%$'\n'*}
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then cat=hang
  elif [[ $first == PASS* ]]; then pass=$((pass + 1)); continue
  elif [[ $first == INVALID* ]]; then invalid=$((invalid + 1)); echo "$first" >> "$LOG"; continue
  elif [[ $first == FAIL* ]]; then cat=$(echo "$first" | awk '{print $3}'); cat=${cat%:}
  else cat=crash; line="rc=$rc: $(tail -c 600 "$OUT/stderr.txt")"
  fi
  failed=$((failed + 1))
  prog="$OUT/seed-$s.lua"
  "$TCRUN" -e "package.path = 'tests/fuzz/?.lua;' .. package.path local g = require 'gen' io.write(g.render(g.generate($s)))" > "$prog"
  { echo "seed $s: $cat"; echo "$line" | head -c 2000; echo; } >> "$LOG"
  where="$prog"
  n=${shrunk[$cat]:-0}
  if [ "$SHRINK" != 0 ] && [ "$n" -lt "$SHRINK_MAX" ]; then
    shrunk[$cat]=$((n + 1))
    "$TCRUN" tests/fuzz/shrink.lua --seed "$s" --category "$cat" --out "$OUT/seed-$s.min.lua" \
      --backends "$BACKENDS" --timeout "$((TIMEOUT < 5 ? TIMEOUT : 5))" --budget "$SHRINK_BUDGET" >> "$LOG" 2>&1 \
      && where="$OUT/seed-$s.min.lua"
  fi
  failures+="  seed $s: $cat -> $where"$'\n'
  echo "FAIL seed $s: $cat -> $where"
done
echo "fuzz: $N programs (seeds $SEED..$((SEED + N - 1)), backends $BACKENDS) in $(( $(date +%s) - start ))s:" \
  "$pass passed, $failed failed, $invalid invalid (generator rejects)"
[ -n "$failures" ] && printf "failures:\n%s" "$failures"
echo "log: $LOG"
[ $failed -eq 0 ]
