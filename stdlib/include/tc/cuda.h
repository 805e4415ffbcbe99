// The CUDA device runtime: driver loading, per-device context, streams and events, the caching
// allocator and its statistics. Nothing here links CUDA: libcuda, NVRTC and cuBLAS are dlopen'ed on first
// use, so the same binary runs on machines without a GPU (there is_available() is false and any
// use of a "cuda" device is a DeviceError naming the reason).
//
//   std::string why;
//   if (!tc::cuda::is_available(&why)) printf("no GPU: %s\n", why.c_str());
//   tc::Tensor x = tc::call1(tc::Op::randn, {1024}, {{"device", tc::Device::parse("cuda")}});
//   tc::cuda::synchronize();
//   printf("%lld bytes on the GPU\n", (long long)tc::cuda::memory_allocated());
//
// Streams, as in PyTorch: every launch, copy, cuBLAS/cuDNN call and allocation of tc goes to the
// calling thread's current stream of the device (the default stream until set).
//
//   tc::cuda::Stream side = tc::cuda::Stream::create();
//   tc::cuda::Event done;
//   {
//     tc::cuda::StreamGuard g(side);  // ops here run on `side`
//     y = tc::call1(tc::Op::mm, {a, b});
//     done.record(side);
//   }
//   done.wait(tc::cuda::current_stream());  // the default stream waits for the product
//   tc::cuda::record_stream(y, tc::cuda::current_stream());  // y is used here: defer its reuse
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

void synchronize(int device = -1);  // every stream of the device; -1: every initialized device
// Starts or stops the range an external profiler records (cuProfilerStart/Stop, as
// torch.cuda.profiler.start/stop): `ncu --profile-from-start off` then profiles only what runs
// between the two. Nothing happens under a driver without them.
void profiler_range(bool start);

// ---- streams and events --------------------------------------------------------------------
// Without a usable GPU every function and method below raises DeviceError with the reason.
class Event;

// A stream of one device: its default stream (id 0) or one of a pool of kPoolStreams non-blocking
// streams that Stream::create hands out round-robin, as PyTorch's stream pool does (two streams
// made far apart may be the same one). Streams live as long as the process; a Stream is a value.
struct Stream {
  static constexpr int kPoolStreams = 32;
  int device = 0;
  int id = 0;  // 0: the default stream; 1..kPoolStreams: pool streams
  static Stream create(int device = 0);
  void synchronize() const;
  bool query() const;  // true when all work queued on it has finished
  void wait_event(const Event& e) const;    // later work on this stream waits for e (no host wait)
  void wait_stream(const Stream& s) const;  // later work here waits for work queued on s so far
  void* handle() const;                     // the CUstream
  bool operator==(const Stream&) const = default;
};
Stream default_stream(int device = 0);
Stream current_stream(int device = 0);  // the calling thread's current stream of `device`
void set_current_stream(Stream s);       // for the calling thread, on s.device

// Makes `s` current on its device for a scope; restores the previous stream on exit.
class StreamGuard {
 public:
  explicit StreamGuard(Stream s) : prev_(current_stream(s.device)) { set_current_stream(s); }
  ~StreamGuard() { set_current_stream(prev_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// A CUDA event (created on the first record, on that stream's device). An event never recorded
// counts as complete. elapsed_time needs enable_timing on both events.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(Stream s);
  void synchronize() const;  // waits on the host until the recorded work finished
  bool query() const;        // true when complete (or never recorded)
  void wait(Stream s) const { s.wait_event(*this); }
  // Milliseconds from this event to `end` (both recorded, with timing); waits for both.
  float elapsed_time(const Event& end) const;
  bool recorded() const { return ev_ != nullptr; }
  bool timing() const { return timing_; }
  int device() const { return device_; }
  void* handle() const { return ev_; }  // the CUevent (null before the first record)

 private:
  bool timing_;
  int device_ = -1;
  void* ev_ = nullptr;
};

// Marks t's storage as used on stream s (PyTorch's Tensor.record_stream): when the storage is
// freed, its block is not handed out again until the work queued on s by then has finished. A
// no-op for s = the stream the storage was allocated on, and for storages not from the allocator.
void record_stream(const Tensor& t, Stream s);

// Caching allocator statistics, in bytes. Each block belongs to the stream it was allocated on; a
// freed block is handed out again only to allocations on that stream (see record_stream). (blocks handed out, rounded to their size class).
int64_t memory_allocated(int device = 0);
int64_t max_memory_allocated(int device = 0);
int64_t memory_reserved(int device = 0);  // allocated + cached
void reset_peak_memory_stats(int device = 0);
void empty_cache();  // waits for the device, frees the cached (unused) blocks back to the driver (pinned too)
// The driver's free and total device memory (cuMemGetInfo).
void mem_get_info(int64_t* free_bytes, int64_t* total_bytes, int device = 0);
// Ops that ran on native CUDA kernels vs through the host fallback since the process started.
int64_t native_op_count();
int64_t fallback_op_count();
// Launches of tc's own kernels since the process started (not cuDNN's or cuBLAS's).
int64_t launch_count();

// ---- pinned host memory (stdlib/cuda/pinned.cpp) --------------------------------------------
// A contiguous copy of CPU tensor t in page-locked host memory (t itself if it is pinned
// already), PyTorch's Tensor.pin_memory(): a host-to-device copy from it is a DMA on the current
// stream. DeviceError for a non-CPU tensor and without a usable GPU. The blocks are cached for
// reuse once their storage is gone and every copy from them has completed (empty_cache frees them).
Tensor pin_memory(const Tensor& t);
bool is_pinned(const Tensor& t);  // t's memory is pinned by pin_memory (false without CUDA)
// While one lives on the calling thread, a host-to-device copy from pinned memory returns without
// waiting for the copy (PyTorch's non_blocking=True): the host must not write the source until the
// stream has run it. Without one, such a copy waits for its completion. Copies from pageable
// memory are the same either way (the driver returns once it has staged the source).
class NonBlocking {
 public:
  explicit NonBlocking(bool on = true);
  ~NonBlocking();
  NonBlocking(const NonBlocking&) = delete;
  NonBlocking& operator=(const NonBlocking&) = delete;

 private:
  bool prev_;
};

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
