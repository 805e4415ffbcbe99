// The CUDA driver, loaded with dlopen on first use (entry points by version through
// cuGetProcAddress), per-device primary context + one stream, the caching allocator installed as
// the core's DeviceAllocator, host<->device copies, launches and the device error word.
#include "cuda/runtime.h"
#include "tc/cuda.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "tc/cuda.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Global {
  std::once_flag once;
  bool ok = false;
  std::string reason;
  Driver d{};
  int count = 0;
  std::mutex mu;  // device creation, allocator
  std::vector<std::unique_ptr<DeviceState>> devices;
};
Global& G() {
  static Global* g = new Global;  // never destroyed: storages may be freed during exit
  return *g;
}

bool load_driver(std::string* why) {
  Global& g = G();
  if (const char* e = std::getenv("TC_CUDA_DISABLE"); e && *e && std::strcmp(e, "0") != 0) {
    *why = "CUDA disabled by TC_CUDA_DISABLE";
    return false;
  }
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    *why = std::string("no CUDA driver: cannot load libcuda.so.1 (") + (err ? err : "?") + ")";
    return false;
  }
  auto gpa = reinterpret_cast<GetProcAddressFn>(dlsym(h, "cuGetProcAddress_v2"));
  if (!gpa) {
    *why = "the CUDA driver is too old (no cuGetProcAddress_v2; CUDA 12 or newer is required)";
    return false;
  }
  bool all = true;
  std::string missing;
  auto get = [&](const char* name, auto& fp, int version = 12000) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st{};
    if (gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) {
      all = false;
      missing += std::string(missing.empty() ? "" : ", ") + name;
      return;
    }
    fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(p);
  };
  Driver& d = g.d;
  get("cuInit", d.Init);
  get("cuDriverGetVersion", d.DriverGetVersion);
  get("cuDeviceGetCount", d.DeviceGetCount);
  get("cuDeviceGet", d.DeviceGet);
  get("cuDeviceGetName", d.DeviceGetName);
  get("cuDeviceGetAttribute", d.DeviceGetAttribute);
  get("cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain);
  get("cuCtxSetCurrent", d.CtxSetCurrent);
  get("cuCtxSynchronize", d.CtxSynchronize);
  get("cuStreamCreate", d.StreamCreate);
  get("cuStreamSynchronize", d.StreamSynchronize);
  get("cuMemAlloc", d.MemAlloc);
  get("cuMemFree", d.MemFree);
  get("cuMemGetInfo", d.MemGetInfo);
  get("cuMemcpyHtoDAsync", d.MemcpyHtoDAsync);
  get("cuMemcpyDtoHAsync", d.MemcpyDtoHAsync);
  get("cuMemcpyDtoDAsync", d.MemcpyDtoDAsync);
  get("cuMemcpyPeerAsync", d.MemcpyPeerAsync);
  get("cuMemsetD8Async", d.MemsetD8Async);
  get("cuModuleLoadData", d.ModuleLoadData);
  get("cuModuleGetFunction", d.ModuleGetFunction);
  get("cuLaunchKernel", d.LaunchKernel);
  get("cuFuncSetAttribute", d.FuncSetAttribute);
  get("cuEventCreate", d.EventCreate);
  get("cuEventRecord", d.EventRecord);
  get("cuEventSynchronize", d.EventSynchronize);
  get("cuEventElapsedTime", d.EventElapsedTime);
  get("cuEventDestroy", d.EventDestroy);
  get("cuGetErrorName", d.GetErrorName);
  get("cuGetErrorString", d.GetErrorString);
  if (!all) {
    *why = "the CUDA driver lacks entry points: " + missing;
    return false;
  }
  CUresult r = d.Init(0);
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    d.GetErrorName(r, &name);
    *why = std::string("cuInit failed (") + name + "): no usable GPU or driver";
    return false;
  }
  r = d.DeviceGetCount(&g.count);
  if (r != CUDA_SUCCESS || g.count <= 0) {
    *why = "the CUDA driver reports no GPU";
    return false;
  }
  g.devices.resize(g.count);
  return true;
}

void init_once() {
  Global& g = G();
  std::call_once(g.once, [&] { g.ok = load_driver(&g.reason); });
}

// ---- caching allocator ---------------------------------------------------------------------
// Sizes round up to a size class: 512-byte steps up to 1 MiB, then four classes per power of
// two (at most 25% slack). Freed blocks stay cached per (device, class) and are handed out again
// for the same class; the device's single stream orders every use, so a block freed on the host
// can be reused by the next kernel without waiting. On out-of-memory every cached block is
// released and the allocation retried once.
size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= (1u << 20)) return (n + 511) & ~size_t(511);
  size_t p = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

struct Pool {
  std::unordered_map<size_t, std::vector<CUdeviceptr>> cached;
  std::unordered_map<CUdeviceptr, size_t> live;
  int64_t allocated = 0, peak = 0, reserved = 0;
};
std::vector<Pool>& pools() {
  static auto* p = new std::vector<Pool>(64);
  return *p;
}

void release_cached(int device) {
  Pool& pool = pools()[device];
  DeviceState& ds = dev(device);
  G().d.StreamSynchronize(ds.stream);
  for (auto& [cls, v] : pool.cached) {
    for (CUdeviceptr p : v) {
      G().d.MemFree(p);
      pool.reserved -= (int64_t)cls;
    }
  }
  pool.cached.clear();
}

std::string mib(int64_t b) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.2f MiB", (double)b / (1 << 20));
  return buf;
}

void* alloc_hook(size_t nbytes, Device d) { return raw_alloc(nbytes, d.index); }
void free_hook(void* p, Device d) { raw_free(p, d.index); }
void copy_hook(void* dst, Device dd, const void* src, Device sd, size_t n) {
  if (n == 0) return;
  const Driver& D = G().d;
  if (dd.is_cuda() && sd.is_cpu()) {
    DeviceState& s = dev(dd.index);
    check(D.MemcpyHtoDAsync((CUdeviceptr)dst, src, n, s.stream), "copy host to device");
  } else if (dd.is_cpu() && sd.is_cuda()) {
    DeviceState& s = dev(sd.index);
    check(D.MemcpyDtoHAsync(dst, (CUdeviceptr)src, n, s.stream), "copy device to host");
    check(D.StreamSynchronize(s.stream), "copy device to host");
  } else if (dd.is_cuda() && sd.is_cuda()) {
    if (dd.index == sd.index) {
      DeviceState& s = dev(dd.index);
      check(D.MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s.stream), "copy device to device");
    } else {
      DeviceState& s = dev(sd.index);
      DeviceState& t = dev(dd.index);
      check(D.StreamSynchronize(t.stream), "copy between devices");
      dev(sd.index);
      check(D.MemcpyPeerAsync((CUdeviceptr)dst, t.ctx, (CUdeviceptr)src, s.ctx, n, s.stream), "copy between devices");
      check(D.StreamSynchronize(s.stream), "copy between devices");
    }
  } else {
    std::memcpy(dst, src, n);
  }
}

const DeviceAllocator kAllocator{alloc_hook, free_hook, copy_hook};

thread_local CUcontext t_current = nullptr;

bool g_compile_only = false;
int64_t g_launches = 0;  // kernel launches so far (TC_CUDA_PROFILE)
void* fake_alloc(size_t n, Device) { return std::calloc(1, n ? n : 1); }
void fake_free(void* p, Device) { std::free(p); }
void fake_copy(void* dst, Device, const void* src, Device, size_t n) { std::memmove(dst, src, n); }
const DeviceAllocator kFakeAllocator{fake_alloc, fake_free, fake_copy};
DeviceState& fake_state() {
  static DeviceState* s = [] {
    auto* s = new DeviceState;
    s->cc_major = 9;
    s->sm_count = 132;
    s->name = "compile-only";
    return s;
  }();
  return *s;
}

}  // namespace

const Driver& drv() { return G().d; }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char *name = "?", *text = "?";
  if (G().d.GetErrorName) G().d.GetErrorName(r, &name);
  if (G().d.GetErrorString) G().d.GetErrorString(r, &text);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) TC_FAIL(OutOfMemoryError, "CUDA out of memory during %s (%s)", what, text);
  TC_FAIL(DeviceError, "CUDA error during %s: %s (%s)", what, name, text);
}

bool is_available(std::string* why) {
  init_once();
  if (!G().ok && why) *why = G().reason;
  return G().ok;
}

int device_count() {
  init_once();
  return G().ok ? G().count : 0;
}

void set_compile_only(bool on) {
  g_compile_only = on;
  set_device_allocator(DeviceType::CUDA, on ? &kFakeAllocator : (G().ok ? &kAllocator : nullptr));
}
bool compile_only() { return g_compile_only; }

void ensure_initialized() {
  if (g_compile_only) return;
  init_once();
  TC_CHECK(G().ok, DeviceError, "CUDA is not available: %s", G().reason.c_str());
  if (!device_allocator(DeviceType::CUDA)) set_device_allocator(DeviceType::CUDA, &kAllocator);
}

DeviceState& dev(int index) {
  if (g_compile_only) return fake_state();
  ensure_initialized();
  Global& g = G();
  TC_CHECK(index >= 0 && index < g.count, DeviceError, "CUDA device %d does not exist (this machine has %d)", index,
           g.count);
  DeviceState* s = g.devices[index].get();
  if (!s) {
    std::lock_guard<std::mutex> lock(g.mu);
    if (!g.devices[index]) {
      auto n = std::make_unique<DeviceState>();
      n->index = index;
      const Driver& d = g.d;
      check(d.DeviceGet(&n->dev, index), "cuDeviceGet");
      check(d.DevicePrimaryCtxRetain(&n->ctx, n->dev), "retaining the primary context");
      check(d.CtxSetCurrent(n->ctx), "cuCtxSetCurrent");
      t_current = n->ctx;
      check(d.StreamCreate(&n->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      d.DeviceGetAttribute(&n->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, n->dev);
      d.DeviceGetAttribute(&n->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, n->dev);
      d.DeviceGetAttribute(&n->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, n->dev);
      char name[256] = {0};
      d.DeviceGetName(name, sizeof name, n->dev);
      n->name = name;
      check(d.MemAlloc(&n->error_word, 16), "allocating the device error word");
      check(d.MemsetD8Async(n->error_word, 0, 16, n->stream), "clearing the device error word");
      g.devices[index] = std::move(n);
    }
    s = g.devices[index].get();
  }
  if (t_current != s->ctx) {
    check(g.d.CtxSetCurrent(s->ctx), "cuCtxSetCurrent");
    t_current = s->ctx;
  }
  return *s;
}

void* raw_alloc(size_t nbytes, int device) {
  DeviceState& ds = dev(device);
  const Driver& d = G().d;
  size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(G().mu);
  Pool& pool = pools()[device];
  CUdeviceptr p = 0;
  auto it = pool.cached.find(cls);
  if (it != pool.cached.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    CUresult r = d.MemAlloc(&p, cls);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_cached(device);
      r = d.MemAlloc(&p, cls);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_b = 0, total_b = 0;
      d.MemGetInfo(&free_b, &total_b);
      TC_FAIL(OutOfMemoryError,
              "CUDA out of memory: tried to allocate %s on cuda:%d (%s total; %s allocated by tc, %s reserved by "
              "tc, %s free)",
              mib((int64_t)nbytes).c_str(), device, mib((int64_t)total_b).c_str(), mib(pool.allocated).c_str(),
              mib(pool.reserved).c_str(), mib((int64_t)free_b).c_str());
    }
    check(r, "cuMemAlloc");
    pool.reserved += (int64_t)cls;
  }
  (void)ds;
  pool.live[p] = cls;
  pool.allocated += (int64_t)cls;
  if (pool.allocated > pool.peak) pool.peak = pool.allocated;
  return reinterpret_cast<void*>(p);
}

void raw_free(void* ptr, int device) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(G().mu);
  Pool& pool = pools()[device];
  auto it = pool.live.find((CUdeviceptr)ptr);
  if (it == pool.live.end()) return;
  size_t cls = it->second;
  pool.live.erase(it);
  pool.allocated -= (int64_t)cls;
  pool.cached[cls].push_back((CUdeviceptr)ptr);
}

void synchronize(int device) {
  ensure_initialized();
  for (int i = 0; i < G().count; i++) {
    if (device >= 0 && i != device) continue;
    if (!G().devices[i] && device < 0) continue;
    DeviceState& s = dev(i);
    check(G().d.StreamSynchronize(s.stream), "synchronize");
  }
}

void sync_stream(int device) {
  if (g_compile_only) return;
  check(G().d.StreamSynchronize(dev(device).stream), "synchronize"); }

int64_t memory_allocated(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(G().mu);
  return pools()[device].allocated;
}
int64_t max_memory_allocated(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(G().mu);
  return pools()[device].peak;
}
int64_t memory_reserved(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(G().mu);
  return pools()[device].reserved;
}
void reset_peak_memory_stats(int device) {
  if (!is_available()) return;
  std::lock_guard<std::mutex> lock(G().mu);
  pools()[device].peak = pools()[device].allocated;
}
void empty_cache() {
  if (!is_available()) return;
  std::lock_guard<std::mutex> lock(G().mu);
  for (int i = 0; i < G().count; i++)
    if (G().devices[i]) release_cached(i);
}

void mem_get_info(int64_t* free_bytes, int64_t* total_bytes, int device) {
  dev(device);
  size_t f = 0, t = 0;
  check(G().d.MemGetInfo(&f, &t), "cuMemGetInfo");
  *free_bytes = (int64_t)f;
  *total_bytes = (int64_t)t;
}
int64_t native_op_count() { return dispatch_stats().native; }
int64_t fallback_op_count() { return dispatch_stats().fallback; }

std::string device_name(int device) {
  DeviceState& s = dev(device);
  return "cc " + std::to_string(s.cc_major) + "." + std::to_string(s.cc_minor) + ", " + std::to_string(s.sm_count) +
         " SMs, " + s.name;
}

namespace {
struct Profile {
  int level = [] {
    const char* e = std::getenv("TC_CUDA_PROFILE");
    return e && *e ? std::atoi(e) : 0;
  }();
  struct Row {
    std::vector<double> us;  // per call: the median keeps first calls (NVRTC, autotuning) out
    int64_t launches = 0;
  };
  std::unordered_map<int, Row> rows;
  ~Profile() {
    if (!level || rows.empty()) return;
    struct Line {
      const char* name;
      int64_t calls, launches;
      double median;
    };
    std::vector<Line> v;
    double total = 0;
    for (auto& [op, r] : rows) {
      std::vector<double> u = r.us;
      std::nth_element(u.begin(), u.begin() + u.size() / 2, u.end());
      v.push_back({op_name((Op)op), (int64_t)u.size(), r.launches, u[u.size() / 2]});
      total += v.back().median * (double)u.size();
    }
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.median * a.calls > b.median * b.calls; });
    std::fprintf(stderr, "tc cuda profile (%s): %.0f us = sum of calls x median\n%-28s %8s %10s %9s %9s\n",
                 level >= 2 ? "host + GPU, synchronized per op" : "host time in cuda_dispatch", total, "op", "calls",
                 "median us", "x calls", "launches");
    for (auto& l : v)
      std::fprintf(stderr, "%-28s %8lld %10.1f %9.0f %9lld\n", l.name, (long long)l.calls, l.median,
                   l.median * (double)l.calls, (long long)l.launches);
  }
};
Profile& profile() {
  static Profile p;
  return p;
}
}  // namespace

int profile_level() { return profile().level; }
void profile_op(Op op, double us, int64_t launches) {
  Profile::Row& r = profile().rows[(int)op];
  r.us.push_back(us);
  r.launches += launches;
}
int64_t launch_count() { return g_launches; }

void launch(int device, CUfunction f, unsigned grid, unsigned block, void** args, unsigned smem) {
  launch3(device, f, grid, 1, 1, block, args, smem);
}

void launch3(int device, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, void** args,
             unsigned smem) {
  if (gx == 0 || gy == 0 || gz == 0 || g_compile_only) return;
  g_launches++;
  DeviceState& s = dev(device);
  check(G().d.LaunchKernel(f, gx, gy, gz, block, 1, 1, smem, s.stream, args, nullptr), "kernel launch");
}

int64_t take_device_error(int device, int64_t* detail) {
  if (g_compile_only) return 0;
  DeviceState& s = dev(device);
  int64_t w[2] = {0, 0};
  check(G().d.MemcpyDtoHAsync(w, s.error_word, 16, s.stream), "reading the device error word");
  check(G().d.StreamSynchronize(s.stream), "reading the device error word");
  if (w[0]) check(G().d.MemsetD8Async(s.error_word, 0, 16, s.stream), "clearing the device error word");
  if (detail) *detail = w[1];
  return w[0];
}

DispatchStats& dispatch_stats() {
  static DispatchStats s;
  return s;
}
const char*& last_conv_impl_slot() {
  static const char* s = "none";
  return s;
}
const char* last_conv_impl() { return last_conv_impl_slot(); }

const char* ctype(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Int64: return "i64";
    case DType::Int32: return "int";
    case DType::UInt8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}
const char* mtype(DType t) {
  switch (t) {
    case DType::Float16: case DType::BFloat16: return "float";
    default: return ctype(t);
  }
}

}  // namespace tc::cuda
