# Sourced on the GPU machine (see scripts/dev/gpupack.sh): unpacks the carried binaries to /tmp/p.
mkdir -p /tmp/p && tar -xJf .gpupack/gpu.tar.xz -C /tmp/p
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/tmp/p/build:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
