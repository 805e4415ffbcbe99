// The CUDA device runtime: driver loading, per-device context and stream, the caching allocator
// and its statistics. Nothing here links CUDA: libcuda, NVRTC and cuBLAS are dlopen'ed on first
// use, so the same binary runs on machines without a GPU (there is_available() is false and any
// use of a "cuda" device is a DeviceError naming the reason).
//
//   std::string why;
//   if (!tc::cuda::is_available(&why)) printf("no GPU: %s\n", why.c_str());
//   tc::Tensor x = tc::call1(tc::Op::randn, {1024}, {{"device", tc::Device::parse("cuda")}});
//   tc::cuda::synchronize();
//   printf("%lld bytes on the GPU\n", (long long)tc::cuda::memory_allocated());
#pragma once
#include <cstdint>
#include <string>

#include "tc/device.h"

namespace tc {
class Tensor;
}

namespace tc::cuda {

// True if the driver loads, initializes and reports at least one device. Never throws; `why`
// gets the reason when false. The first call initializes (tries) the driver.
bool is_available(std::string* why = nullptr);
int device_count();  // 0 without a usable driver
// Initializes the driver, the devices and installs the CUDA DeviceAllocator; DeviceError with
// the reason if CUDA cannot be used. Called by the core on first use of a cuda device.
void ensure_initialized();

void synchronize(int device = -1);  // -1: every initialized device

// Caching allocator statistics, in bytes (blocks handed out, rounded to their size class).
int64_t memory_allocated(int device = 0);
int64_t max_memory_allocated(int device = 0);
int64_t memory_reserved(int device = 0);  // allocated + cached
void reset_peak_memory_stats(int device = 0);
void empty_cache();
// The driver's free and total device memory (cuMemGetInfo).
void mem_get_info(int64_t* free_bytes, int64_t* total_bytes, int device = 0);
// Ops that ran on native CUDA kernels vs through the host fallback since the process started.
int64_t native_op_count();
int64_t fallback_op_count();  // frees the cached (unused) blocks back to the driver

// "cc 9.0, 132 SMs, NVIDIA H100 80GB HBM3" (initializes the device).
std::string device_name(int device = 0);

// Tensor::copy_from when dst or src is a CUDA tensor (any strides, dtypes, broadcasting).
void copy_tensor(const Tensor& dst, const Tensor& src);

// Testing without a GPU: in compile-only mode (needs only NVRTC) "cuda" tensors live in host
// memory, every CUDA kernel an op needs is generated and compiled for sm_90 but not launched, and
// results are garbage. Lets CI check that code generation works for every op.
void set_compile_only(bool on);
bool compile_only();
int64_t programs_compiled();  // NVRTC programs compiled by this process

// Which conv2d implementation ran last ("cudnn" or "im2col+cublas"), for tests and reports.
const char* last_conv_impl();
// cuDNN execution plans cached so far (one per convolution problem cuDNN runs), for tests.
int64_t cudnn_plan_count();

}  // namespace tc::cuda
