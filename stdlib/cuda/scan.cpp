// Device-wide exclusive prefix sums of int64 values: chunks of 2048 values (256 threads x 8)
// are summed, the chunk sums scanned recursively, then every chunk rescanned from its offset.
#include "cuda/scan.h"

namespace tc::cuda {

const std::string& block_exclusive_src() {
  static const std::string s = R"CUDA(
__device__ i64 block_exclusive(i64 v, i64* total) {
  __shared__ i64 warp_sums[9];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  i64 inc = v;
  for (int o = 1; o < 32; o <<= 1) { i64 y = __shfl_up_sync(0xffffffffu, inc, o); if (lane >= o) inc += y; }
  if (lane == 31) warp_sums[w] = inc;
  __syncthreads();
  if (threadIdx.x == 0) { i64 r = 0; for (int k = 0; k < 8; k++) { i64 t = warp_sums[k]; warp_sums[k] = r; r += t; } warp_sums[8] = r; }
  __syncthreads();
  i64 res = warp_sums[w] + inc - v;
  *total = warp_sums[8];
  __syncthreads();
  return res;
}
)CUDA";
  return s;
}

namespace {

constexpr int64_t kChunk = 2048;

std::vector<CUfunction> scan_kernels(int device) {
  return kernels(device, "scan:i64", [] {
    return prelude() + block_exclusive_src() +
           "extern \"C\" __global__ void __launch_bounds__(256) chunk_sums(const i64* __restrict__ x, i64 n, i64* __restrict__ sums) {\n"
           "  i64 base = (i64)blockIdx.x * 2048, s = 0, total;\n"
           "  for (int k = 0; k < 8; k++) { i64 i = base + k * 256 + threadIdx.x; if (i < n) s += x[i]; }\n"
           "  block_exclusive(s, &total);\n"
           "  if (threadIdx.x == 0) sums[blockIdx.x] = total;\n}\n"
           "extern \"C\" __global__ void __launch_bounds__(256) chunk_scan(i64* x, i64 n, const i64* __restrict__ offs) {\n"
           "  i64 base = (i64)blockIdx.x * 2048 + threadIdx.x * 8, v[8], t = 0, total;\n"
           "  for (int k = 0; k < 8; k++) { v[k] = base + k < n ? x[base + k] : 0; t += v[k]; }\n"
           "  i64 ex = block_exclusive(t, &total) + (offs ? offs[blockIdx.x] : 0);\n"
           "  for (int k = 0; k < 8; k++) { if (base + k < n) x[base + k] = ex; ex += v[k]; }\n}\n";
  }, {"chunk_sums", "chunk_scan"});
}

}  // namespace

void exclusive_scan(void* data, int64_t n, int device) {
  if (n == 0) return;
  auto f = scan_kernels(device);
  int64_t chunks = (n + kChunk - 1) / kChunk;
  void* offs = nullptr;
  Tensor sums;
  if (chunks > 1) {
    sums = Tensor::empty({chunks}, DType::Int64, Device{DeviceType::CUDA, device});
    offs = sums.data_ptr();
    void* args[] = {&data, &n, &offs};
    launch(device, f[0], (unsigned)chunks, 256, args);
    exclusive_scan(offs, chunks, device);
  }
  void* args[] = {&data, &n, &offs};
  launch(device, f[1], (unsigned)chunks, 256, args);
}

}  // namespace tc::cuda
