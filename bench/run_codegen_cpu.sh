#!/usr/bin/env bash
# Issue 11's Measure section in one run: a backend's compiled code next to tc's eager and PyTorch's
# eager CPU (Debian's python3-torch), same machine, same thread count, ratios from the same run.
# Usage: bench/run_codegen_cpu.sh BACKEND [THREADS [MODEL...]]   (e.g. cpu; eager gives ratios ~1)
#   kernels: 10-op pointwise chains on 16M floats (bench_common.chain, arithmetic-bound on a CPU, and
#            cheap_chain, memory-bound; their GB/s as shares of copy_'s and clone's), softmax and
#            layer_norm over [4096, 1024];
#   the 64-layer seed model: cold compile whole and regional (fresh disk caches), warm start of the
#            whole model from the disk cache (a fresh process), per call;
#   the models of scripts/models (bench/models_cpu.lua): per call, and the first call (compile).
# Times are best of N in ms; "x eager" = eager / compiled, "x torch" = torch / compiled (> 1: compiled
# is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND=${1:?usage: bench/run_codegen_cpu.sh BACKEND [THREADS [MODEL...]]}
THREADS=${2:-$(nproc)}
shift $(( $# < 2 ? $# : 2 ))
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(seed_64_layers my_module resnet18 resnet50 densenet121 gpt2_small)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TCRUN=./build/tcrun
torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && torch=1

val() { awk -v k="$1" '$1==k {print $2}' "$2"; }
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; else echo "-"; fi; }
num() { if [ -n "$1" ]; then printf "%.3f" "$1"; else echo "-"; fi; }

$TCRUN bench/codegen_cpu.lua "$BACKEND" kernels "$THREADS" > "$tmp/k"
TC_CACHE_DIR="$tmp/cache_whole" $TCRUN bench/codegen_cpu.lua "$BACKEND" seed_whole "$THREADS" > "$tmp/cold"
TC_CACHE_DIR="$tmp/cache_whole" $TCRUN bench/codegen_cpu.lua "$BACKEND" seed_whole "$THREADS" > "$tmp/warm"
TC_CACHE_DIR="$tmp/cache_regional" $TCRUN bench/codegen_cpu.lua "$BACKEND" seed_regional "$THREADS" > "$tmp/regional"
TC_CACHE_DIR="$tmp/cache_models" TC_BENCH_BACKEND="$BACKEND" $TCRUN bench/models_cpu.lua "$THREADS" "${MODELS[@]}" > "$tmp/mc"
$TCRUN bench/models_cpu.lua "$THREADS" "${MODELS[@]}" > "$tmp/me"
touch "$tmp/kt" "$tmp/mt"
if [ $torch = 1 ]; then
  /usr/bin/python3 bench/peer_torch_codegen.py "$THREADS" > "$tmp/kt"
  # resnet, densenet and inception need torchvision: without it their PyTorch column stays empty
  /usr/bin/python3 bench/peer_torch_models.py "$THREADS" "${MODELS[@]}" > "$tmp/mt"
fi

echo "backend \"$BACKEND\" vs tc eager vs PyTorch $( [ $torch = 1 ] && /usr/bin/python3 -c 'import torch; print(torch.__version__)' || echo '(not installed)') CPU, $THREADS threads, $(uname -m), $(nproc) cores"
echo
printf "%-28s %12s %12s %12s %9s %9s\n" "kernel" "compiled ms" "eager ms" "torch ms" "x eager" "x torch"
for k in chain softmax layer_norm; do
  c=$(val ${k}_compiled_ms "$tmp/k"); e=$(val ${k}_eager_ms "$tmp/k"); t=$(val ${k}_torch_ms "$tmp/kt")
  case $k in chain) label="pointwise chain 10 ops, 16M";; softmax) label="softmax [4096, 1024]";; *) label="layer_norm [4096, 1024]";; esac
  printf "%-28s %12s %12s %12s %9s %9s\n" "$label" "$(num "$c")" "$(num "$e")" "$(num "$t")" "$(ratio "$e" "$c")" "$(ratio "$t" "$c")"
done
# The machine's copy rate: the best of copy_ (memcpy into a tensor), clone and a compiled one-op
# kernel (-v), timed in the same rounds as the chains (bench/codegen_cpu.lua).
copy=$(val copy_ms "$tmp/k"); clone=$(val clone_ms "$tmp/k"); ccopy=$(val compiled_copy_ms "$tmp/k")
echo "copy rate (64 MiB in + 64 MiB out, same rounds as the chains): $(awk -v a="$copy" -v b="$clone" -v c="$ccopy" 'BEGIN{mb = 2 * 64 * 1.048576e6 / 1e9;
  printf "copy_ %.3f ms %.1f GB/s, clone %.3f ms %.1f GB/s, compiled -v %.3f ms %.1f GB/s", a, mb / (a / 1e3), b, mb / (b / 1e3), c, mb / (c / 1e3)}')"
for k in chain cheap_chain; do
  t=$(val ${k}_compiled_ms "$tmp/k")
  awk -v a="$copy" -v b="$clone" -v c="$ccopy" -v t="$t" -v k="$k" 'BEGIN{mb = 2 * 64 * 1.048576e6 / 1e9;
    best = a; if (b < best) best = b; if (c < best) best = c;
    printf "%s compiled: %.3f ms, %.1f GB/s, %.0f%% of the copy rate (best of the three: %.1f GB/s)\n", k, t, mb / (t / 1e3), 100 * best / t, mb / (best / 1e3)}'
done
printf "%-28s %12s %12s %12s %9s\n" "cheap chain 10 ops, 16M" "$(num "$(val cheap_chain_compiled_ms "$tmp/k")")" \
  "$(num "$(val cheap_chain_eager_ms "$tmp/k")")" "-" "$(ratio "$(val cheap_chain_eager_ms "$tmp/k")" "$(val cheap_chain_compiled_ms "$tmp/k")")"
echo "chain fallback nodes: $(val chain_fallback_nodes "$tmp/k")"
echo
echo "seed model (64 layers, [10, 10] input)"
for run in cold regional warm; do
  p=seed_whole; label="cold compile, whole"
  [ $run = regional ] && p=seed_regional && label="cold compile, regional"
  [ $run = warm ] && label="warm start, whole (disk cache, fresh process)"
  printf "  %-46s first call %9.2f ms (trace %.2f, backend %.2f); kernels %d, distinct %d, from cache %d, fallback nodes %d\n" "$label" \
    "$(val ${p}_first_call_ms "$tmp/$run")" "$(val ${p}_trace_ms "$tmp/$run")" "$(val ${p}_backend_compile_ms "$tmp/$run")" \
    "$(val ${p}_kernels "$tmp/$run")" "$(val ${p}_distinct_kernels "$tmp/$run")" "$(val ${p}_cached_kernels "$tmp/$run")" \
    "$(val ${p}_fallback_nodes "$tmp/$run")"
done
t=$(awk '$1=="seed_64_layers" {print $2}' "$tmp/mt")
for run in cold regional; do
  p=seed_whole; [ $run = regional ] && p=seed_regional
  c=$(val ${p}_compiled_ms "$tmp/$run"); e=$(val ${p}_eager_ms "$tmp/$run")
  printf "  per call, %-8s compiled %s ms, eager %s ms, torch %s ms: x eager %s, x torch %s\n" "${run/cold/whole}" \
    "$(num "$c")" "$(num "$e")" "$(num "$t")" "$(ratio "$e" "$c")" "$(ratio "$t" "$c")"
done
echo
echo "models (bench/models_cpu.lua inputs)"
printf "%-16s %12s %12s %12s %9s %9s %14s\n" "model" "compiled ms" "eager ms" "torch ms" "x eager" "x torch" "first call ms"
while read -r name c _ _ first; do
  e=$(awk -v n="$name" '$1==n {print $2}' "$tmp/me"); t=$(awk -v n="$name" '$1==n {print $2}' "$tmp/mt")
  printf "%-16s %12s %12s %12s %9s %9s %14s\n" "$name" "$(num "$c")" "$(num "$e")" "$(num "$t")" "$(ratio "$e" "$c")" "$(ratio "$t" "$c")" "$first"
done < "$tmp/mc"
