#!/usr/bin/env bash
# Developer build: one shared build/ folder, serialised with a lock so parallel workers don't
# corrupt it. Usage: scripts/dev/build.sh [--target NAME ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec flock /tmp/tc-build.lock bash -c '
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j2 '"$*"
