#!/usr/bin/env bash
# Issue 12's table on the GPU machine: tc (eager, tc.compile default, mode="reduce-overhead") next
# to PyTorch (eager, torch.compile default and reduce-overhead) in one run, float32 with TF32
# allowed in both, each number the median of N calls synchronized per call
# (bench/compare_torch_cuda.lua and bench/peer_torch_compare_cuda.py, same sections and keys).
# Usage: bench/compare_torch_cuda.sh [-b BUILD_DIR] [-k BACKEND] [-p PYTHON] [SECTION...]
#   SECTION: seed_whole seed_regional resnet50 densenet121 gpt2 kernels (default: all of them).
#   torch.compile's cold compiles take tens of seconds per model: within the device's 600 s per
#   call, run "seed_whole seed_regional kernels gpt2" (about 180 s on an H100) and
#   "resnet50 densenet121" as two calls.
#   -o DIR: also keep the raw "key value" files there (tc.SECTION, torch.SECTION).
# Compiles are cold: a fresh TC_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR per section.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build BACKEND=tc PY=python3 KEEP=
while getopts "b:k:p:o:" o; do
  case $o in b) B=$OPTARG ;; k) BACKEND=$OPTARG ;; p) PY=$OPTARG ;; o) KEEP=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
SECTIONS=("$@")
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(seed_whole seed_regional resnet50 densenet121 gpt2 kernels)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for s in "${SECTIONS[@]}"; do
  TC_CACHE_DIR="$tmp/tc_cache_$s" "$B/tcrun" bench/compare_torch_cuda.lua "$s" "$BACKEND" > "$tmp/tc.$s" 2> "$tmp/tc.$s.err" ||
    { echo "tc $s failed:" >&2; tail -5 "$tmp/tc.$s.err" >&2; }
  grep -h "warning" "$tmp/tc.$s.err" | sort -u | sed "s/^/[tc $s] /" >&2
  TORCHINDUCTOR_CACHE_DIR="$tmp/inductor_$s" $PY bench/peer_torch_compare_cuda.py "$s" > "$tmp/torch.$s" 2> "$tmp/torch.$s.err" ||
    { echo "torch $s failed:" >&2; tail -5 "$tmp/torch.$s.err" >&2; }
done
if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$tmp"/tc.* "$tmp"/torch.* "$KEEP"/; fi
for who in tc torch; do
  for s in "${SECTIONS[@]}"; do cat "$tmp/$who.$s"; done 2>/dev/null | awk 'NF == 2' > "$tmp/all_$who"
done
v() { awk -v k="$1" '$1 == k {print $2}' "$2" | tail -1; }
cell() { if [ -n "$1" ]; then printf "%12.3f" "$1"; else printf "%12s" "-"; fi; }
gbs() { [ -n "$2" ] && awk -v b="$1" -v ms="$2" 'BEGIN {printf "%.0f", b / ms / 1e6}'; }
row() {  # label, then the tc keys eager default ro, then the torch keys likewise
  printf "%-44s" "$1"
  for k in "$2" "$3" "$4"; do cell "$( [ "$k" = - ] || v "$k" "$tmp/all_tc")"; done
  for k in "$5" "$6" "$7"; do cell "$( [ "$k" = - ] || v "$k" "$tmp/all_torch")"; done
  echo
}
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed 's/^/device: /'
printf "%-44s%12s%12s%12s%12s%12s%12s\n" "workload (ms, medians)" "tc eager" "tc default" "tc r-o" "pt eager" "pt compile" "pt r-o"
row "seed 64x10x10: cold compile whole" - seed_default_first_call_ms seed_ro_first_call_ms - seed_default_first_call_ms seed_ro_first_call_ms
row "seed: cold compile regional" - seed_regional_default_first_call_ms seed_regional_ro_first_call_ms - seed_regional_default_first_call_ms seed_regional_ro_first_call_ms
row "seed: per call (whole)" seed_eager_ms seed_default_ms seed_ro_ms seed_eager_ms seed_default_ms seed_ro_ms
row "seed: per call (regional)" - seed_regional_default_ms seed_regional_ro_ms - seed_regional_default_ms seed_regional_ro_ms
for m in resnet50 densenet121 gpt2; do
  row "$m: per call" ${m}_eager_ms ${m}_default_ms ${m}_ro_ms ${m}_eager_ms ${m}_default_ms ${m}_ro_ms
  row "$m: cold compile (first call)" - ${m}_default_first_call_ms ${m}_ro_first_call_ms - ${m}_default_first_call_ms ${m}_ro_first_call_ms
  t=$(v ${m}_tune_ms "$tmp/all_tc")
  [ -n "$t" ] && printf "  tc %s max-autotune: per call %.3f ms; first call %.0f ms (%.0f launches tuned in %.0f ms); again with the choices cached %.0f ms\n" \
    "$m" "$t" "$(v ${m}_tune_first_call_ms "$tmp/all_tc")" "$(v ${m}_tune_tuned_launches "$tmp/all_tc")" \
    "$(v ${m}_tune_tune_only_ms "$tmp/all_tc")" "$(v ${m}_tune_warm_first_call_ms "$tmp/all_tc")"
done
for m in seed resnet50 densenet121 gpt2; do
  r=$(v ${m}_ro_graphs_recorded "$tmp/all_tc"); a=$(v ${m}_ro_graphs_abandoned "$tmp/all_tc")
  [ -n "$r" ] && printf "  tc %s reduce-overhead: %.0f CUDA graphs recorded, %.0f recordings abandoned\n" "$m" "$r" "$a"
done
# bandwidths: the chain reads and writes 64M floats once when fused; softmax and layer_norm read
# and write [16384, 1024] once; the sums read 64M and 16M floats
n=$((64 * 1024 * 1024)); chain_b=$((8 * n)); rows_b=$((8 * 16384 * 1024)); sum_all_b=$((4 * n)); sum_dim0_b=$((4 * 16 * 1024 * 1024))
if [ -s "$tmp/all_tc" ] && [ -n "$(v copy_ms "$tmp/all_tc")" ]; then
  echo "GB/s (bytes read + written once), % of a device copy's"
  printf "%-44s%12s%12s%12s%12s%12s%12s\n" "" "tc eager" "tc default" "tc r-o" "pt eager" "pt compile" "pt r-o"
  for who in tc torch; do
    c=$(v copy_ms "$tmp/all_$who"); [ -n "$c" ] && printf "%-44s%s copy %s GB/s\n" "device copy ($who)" "" "$(gbs $chain_b "$c")"
  done
  for k in chain softmax layer_norm sum_all sum_dim0; do
    b=$rows_b; [ $k = chain ] && b=$chain_b; [ $k = sum_all ] && b=$sum_all_b; [ $k = sum_dim0 ] && b=$sum_dim0_b
    printf "%-44s" "$k GB/s"
    for who in tc torch; do
      for mode in eager default ro; do
        t=$(v ${k}_${mode}_ms "$tmp/all_$who"); g=$(gbs $b "$t")
        if [ -n "$g" ]; then printf "%12s" "$g"; else printf "%12s" "-"; fi
      done
    done
    echo
    t=$(v ${k}_tune_nocg_ms "$tmp/all_tc")
    [ -n "$t" ] && printf "%-44s%12s\n" "  tc max-autotune-no-cudagraphs" "$(gbs $b "$t")"
    if [ $k = chain ]; then
      printf "%-44s" "  chain, % of copy"
      for who in tc torch; do
        c=$(v copy_ms "$tmp/all_$who")
        for mode in eager default ro; do
          t=$(v chain_${mode}_ms "$tmp/all_$who")
          if [ -n "$t" ] && [ -n "$c" ]; then awk -v c="$c" -v t="$t" 'BEGIN {printf "%11.0f%%", 100 * c / t}'; else printf "%12s" "-"; fi
        done
      done
      echo
    fi
  done
fi
