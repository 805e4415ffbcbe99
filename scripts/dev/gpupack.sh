#!/usr/bin/env bash
# Packs what the GPU machine needs to run our CUDA tests and benchmarks (it has no Lua and no
# LLVM, so nothing is built there) into .gpupack/gpu.tar.xz (ignored by git):
#   p/build/{tcrun, tc.so, tests/cuda_*, tests/<more names given>, bench/bench_cuda_eager}, stripped,
#   p/lib/ the OpenBLAS runtime libraries Debian links us against.
# Usage: scripts/dev/gpupack.sh [--out DIR] [--tree] [--only] [EXTRA_TEST_NAME ...]
#   --out DIR: write DIR/gpu.tar.xz instead of .gpupack/gpu.tar.xz. Run from a worktree, give an
#   ignored folder of the main checkout (e.g. /work/main/.gpu-mybranch), since the device tool
#   copies that checkout; carry it and `source scripts/dev/gpu_env.sh .gpu-mybranch` there.
#   --tree: also pack this checkout's tracked files (as modified, not build/) as DIR/tree.tar.xz,
#   which gpu_env.sh unpacks and runs from.
#   --only: pack tcrun and the named tests only (every test binary that links LLVM is ~57 MB
#   stripped: all of tests/cuda_* plus a few of those no longer fit the device tool's 64 MiB carry;
#   bench binaries only when named too, e.g. bench_capture_dispatch)
# On the device (run tool, carry [".gpupack"]), start the command with:
#   source scripts/dev/gpu_env.sh
# which unpacks to /tmp/p, links /work/main to the tree (fixtures are found by absolute path) and
# sets LD_LIBRARY_PATH; then run e.g. /tmp/p/build/tests/cuda_models_match_cpu or
# bench/run_cuda.sh /tmp/p/build.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpupack tree=0
while :; do
  case "${1:-}" in
    --out) out=$2; shift 2 ;;
    --tree) tree=1; shift ;;
    *) break ;;
  esac
done
s=$(mktemp -d)
trap 'rm -rf "$s"' EXIT
mkdir -p "$s/build/tests" "$s/build/bench" "$s/lib" "$out"
cp build/tcrun "$s/build/"
[ -f build/tc.so ] && cp build/tc.so "$s/build/"
only=0
[ "${1:-}" = --only ] && { only=1; shift; }
[ $only = 1 ] || cp build/tests/cuda_* "$s/build/tests/"
for t in "$@"; do [[ $t == bench_* ]] || cp "build/tests/$t" "$s/build/tests/"; done
# (with --only, the bench binaries too only when named: bench_cuda_eager, bench_capture_dispatch, ...)
for b in build/bench/bench_cuda_eager build/bench/bench_capture_dispatch build/bench/bench_cuda_sort; do
  [ -x "$b" ] && { [ $only = 0 ] || [[ " $* " == *" $(basename "$b") "* ]]; } && cp "$b" "$s/build/bench/"
done
find "$s/build" -type f -perm -u+x -exec strip {} + 2>/dev/null || true
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$s/lib/"
done
tar -C "$s" -cJf "$out/gpu.tar.xz" build lib
[ $tree = 1 ] && git ls-files -z | tar --null -T - -cJf "$out/tree.tar.xz" && pwd > "$out/src_dir"
ls -la "$out"
