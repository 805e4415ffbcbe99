#!/usr/bin/env bash
# The CPU code generator's benchmarks: the 10-op pointwise chain and softmax against eager and
# memcpy (bench_cpu_codegen), then the 64-layer seed model: regional and whole compiled from a
# cold disk cache (one process each), whole again from the warm cache, per-call against eager.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/bench/bench_cpu_codegen "$@"
echo
cold_r=$(mktemp -d) cold_w=$(mktemp -d)
TC_CACHE_DIR=$cold_r ./build/tcrun bench/cpu_codegen_models.lua regional | sed 's/^/cold /'
TC_CACHE_DIR=$cold_w ./build/tcrun bench/cpu_codegen_models.lua whole | sed 's/^/cold /'
TC_CACHE_DIR=$cold_w ./build/tcrun bench/cpu_codegen_models.lua whole | sed 's/^/warm /'
rm -rf "$cold_r" "$cold_w"
