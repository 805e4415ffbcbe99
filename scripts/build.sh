#!/usr/bin/env bash
# Configures (once) and builds tc into build/ (Release with debug info). Extra args go to cmake --build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)" "$@"
