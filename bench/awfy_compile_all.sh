#!/usr/bin/env bash
# The Are-We-Fast-Yet Lua benchmarks (github.com/smarr/are-we-fast-yet, unmodified) under stock
# lua5.4, plain tcrun and tcrun --compile-all: wall time and peak RSS of each run, whether it
# passed (the harness checks every result), and compile-all against lua5.4 (issue 32's goal: never
# more than 10x the time or 100 MB more memory, never an error).
# Usage: bench/awfy_compile_all.sh [-b BUILD_DIR] [-v CAP_MB] [-r RUNNERS] AWFY_CHECKOUT [BENCH:SIZES ...]
#   AWFY_CHECKOUT: a checkout of are-we-fast-yet (its benchmarks/Lua is used) or that Lua folder.
#   BENCH:SIZES: a harness class name and inner iterations, e.g. DeltaBlue:10,100 CD:250
#     (default: DeltaBlue at chain lengths 10..200 and 5000, CD at the aircraft counts it verifies,
#     one small size of each other benchmark). CD verifies only 2, 10, 100, 200, 250, 500, 1000.
#     tcrun starts in ~20 ms, so below ~0.1 s under lua5.4 the time ratio measures that start
#     (plain tcrun's ratio shows it); DeltaBlue 5000 runs ~0.35 s under lua5.4.
#   -v CAP_MB: run under that address-space cap (ulimit -v), as a memory-starved machine would.
#   -r RUNNERS: a comma list of lua, tcrun, compile_all (default: all three).
# The benchmarks' code stays in their checkout: nothing is copied into this repository.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
B=$repo/build CAP= RUNNERS=lua,tcrun,compile_all
while getopts "b:v:r:" o; do
  case $o in b) B=$(cd "$OPTARG" && pwd) ;; v) CAP=$OPTARG ;; r) RUNNERS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
dir=$1
shift
[ -f "$dir/harness.lua" ] || dir=$dir/benchmarks/Lua
[ -f "$dir/harness.lua" ] || { echo "no harness.lua in $1 or $1/benchmarks/Lua" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time) for peak RSS" >&2; exit 2; }
command -v lua5.4 > /dev/null || RUNNERS=${RUNNERS//lua,/}
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(DeltaBlue:10,25,50,100,200,5000 CD:10,100,200,250 Bounce:1 List:1
  Mandelbrot:100 NBody:1000 Permute:1 Queens:1 Richards:1 Sieve:1 Storage:1 Towers:1 Json:1
  Havlak:1)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run NAME SIZE RUNNER: prints "seconds harness_ms peak_kb status" (harness_ms: what the harness
# measured around the benchmark's loop, without the runtime's start)
run() {
  local cmd
  case $3 in
    lua) cmd=(lua5.4) ;;
    tcrun) cmd=("$B/tcrun") ;;
    compile_all) cmd=("$B/tcrun" --compile-all) ;;
  esac
  (
    cd "$dir" || exit 1
    [ -z "$CAP" ] || ulimit -v $((CAP * 1024))
    /usr/bin/time -f "%e %M" -o "$tmp/time" "${cmd[@]}" harness.lua "$1" 1 "$2" > "$tmp/out" 2>&1
  )
  local rc=$? status=ok
  [ $rc -eq 0 ] || status="exit $rc"
  grep -q "^$1: iterations=1 average" "$tmp/out" || status="failed: $(grep -v '^tc: ' "$tmp/out" | grep -m1 -iE 'error|fail|assert' | cut -c1-80)"
  local t m us
  read -r t m < <(tail -1 "$tmp/time")
  us=$(sed -n 's/^Total Runtime: \([0-9]*\)us/\1/p' "$tmp/out")
  echo "$t $(awk -v us="${us:-0}" 'BEGIN { printf "%.0f", us / 1000 }') $m $status"
}

printf "| %-10s | %5s | %-12s | %8s | %10s | %9s | %-6s | %s\n" bench size runner "time s" "harness ms" \
  "peak MB" status "vs lua5.4 (time, harness time, memory)"
printf "|%s\n" "------------|-------|--------------|----------|------------|-----------|--------|----------"
for c in "${CASES[@]}"; do
  name=${c%%:*}
  IFS=, read -ra sizes <<< "${c#*:}"
  for size in "${sizes[@]}"; do
    base_t= base_h= base_m=
    IFS=, read -ra rs <<< "$RUNNERS"
    for r in "${rs[@]}"; do
      read -r t h m status < <(run "$name" "$size" "$r")
      vs=
      if [ "$r" = lua ]; then
        base_t=$t base_h=$h base_m=$m
      elif [ -n "$base_t" ]; then
        vs=$(awk -v t="$t" -v h="$h" -v m="$m" -v bt="$base_t" -v bh="$base_h" -v bm="$base_m" \
          'BEGIN { printf "%.1fx, %.1fx, %+.0f MB", t / (bt > 0.005 ? bt : 0.005),
                   h / (bh > 1 ? bh : 1), (m - bm) / 1024 }')
      fi
      printf "| %-10s | %5s | %-12s | %8s | %10s | %9.1f | %-6s | %s\n" "$name" "$size" "$r" "$t" "$h" \
        "$(awk -v m="$m" 'BEGIN { print m / 1024 }')" "$status" "$vs"
    done
  done
done
