# Sourced on the GPU machine (see scripts/dev/gpupack.sh): unpacks the carried binaries to /tmp/p.
#   source scripts/dev/gpu_env.sh [PACKDIR]     (PACKDIR defaults to .gpupack)
# When PACKDIR also holds tree.tar.xz (a branch's source tree, from gpupack.sh --out DIR --tree),
# that tree is unpacked to /tmp/tree, /work/main points at it and the shell moves there, so a
# helper's branch runs its own Lua tests and fixtures.
_pk=${1:-.gpupack}
mkdir -p /tmp/p && tar -xJf "$_pk/gpu.tar.xz" -C /tmp/p
if [ -f "$_pk/tree.tar.xz" ]; then
  rm -rf /tmp/tree && mkdir -p /tmp/tree && tar -xJf "$_pk/tree.tar.xz" -C /tmp/tree
  # fixtures are found by absolute path: the checkout the binaries were built in (src_dir) and
  # /work/main point at the tree, unless one is a real directory (the device's copy of main)
  for _d in /work/main $(cat "$_pk/src_dir" 2>/dev/null); do
    [ -d "$_d" ] && [ ! -L "$_d" ] && continue
    mkdir -p "$(dirname "$_d")" && rm -f "$_d" && ln -s /tmp/tree "$_d"
  done
  cd /tmp/tree
else
  [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
fi
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/tmp/p/build:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
