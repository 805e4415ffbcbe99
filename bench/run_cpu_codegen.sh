#!/usr/bin/env bash
# The CPU code generator's kernel-level benchmarks on hand-built loop IR (no capture): the 10-op
# pointwise chain and softmax against eager and memcpy (bench_cpu_codegen). The 64-layer seed model
# (cold and warm compiles, per call) and the model zoo are measured through tc.compile by
# bench/run_codegen_cpu.sh BACKEND.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/bench/bench_cpu_codegen "$@"
