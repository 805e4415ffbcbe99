#!/usr/bin/env bash
# Installs what tc needs to build and test on Debian 12 (run as root); does nothing when all is
# there. The CUDA toolkit at /usr/local/cuda is optional and never installed here.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config lua5.4 liblua5.4-dev llvm-19-dev libgtest-dev
      libopenblas-dev nlohmann-json3-dev zlib1g-dev libzstd-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
