// The CUDA driver, loaded with dlopen on first use (entry points by version through
// cuGetProcAddress), per-device primary context, the DeviceAllocator hooks (the caching
// allocator of allocator.cpp, host<->device copies), launches and the device error word; all on
// the calling thread's current stream (stream.cpp).
#include "cuda/runtime.h"

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
  std::mutex mu;  // device creation
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
  // the entry point `name`, or null
  auto lookup = [&](const char* name, int version) -> void* {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st{};
    return gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS ? p : nullptr;
  };
  auto get = [&](const char* name, auto& fp, int version = 12000) {
    void* p = lookup(name, version);
    if (!p) {
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
  get("cuStreamQuery", d.StreamQuery);
  get("cuStreamWaitEvent", d.StreamWaitEvent);
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
  get("cuEventQuery", d.EventQuery);
  get("cuEventElapsedTime", d.EventElapsedTime);
  get("cuEventDestroy", d.EventDestroy);
  get("cuGetErrorName", d.GetErrorName);
  get("cuGetErrorString", d.GetErrorString);
  get("cuStreamBeginCapture", d.StreamBeginCapture);
  get("cuStreamEndCapture", d.StreamEndCapture);
  get("cuStreamIsCapturing", d.StreamIsCapturing);
  get("cuThreadExchangeStreamCaptureMode", d.ThreadExchangeStreamCaptureMode);
  get("cuGraphInstantiateWithFlags", d.GraphInstantiateWithFlags);
  get("cuGraphLaunch", d.GraphLaunch);
  get("cuGraphExecDestroy", d.GraphExecDestroy);
  get("cuGraphDestroy", d.GraphDestroy);
  get("cuGraphGetNodes", d.GraphGetNodes);
  get("cuMemHostAlloc", d.MemHostAlloc);
  get("cuMemFreeHost", d.MemFreeHost);
  auto get_optional = [&](const char* name, auto& fp) {
    if (void* p = lookup(name, 12000)) fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(p);
  };
  get_optional("cuProfilerStart", d.ProfilerStart);
  get_optional("cuProfilerStop", d.ProfilerStop);
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

void* alloc_hook(size_t nbytes, Device d) { return raw_alloc(nbytes, d.index); }
void free_hook(void* p, Device d) { raw_free(p, d.index); }
void copy_hook(void* dst, Device dd, const void* src, Device sd, size_t n) {
  if (n == 0) return;
  const Driver& D = G().d;
  if (dd.is_cuda() && sd.is_cpu() && capturing()) src = stage_host_bytes_in_capture(src, n);
  else if (dd.is_cuda() != sd.is_cuda() || dd.index != sd.index)
    forbid_in_capture("a copy from a device to the host, or between devices");
  if (dd.is_cuda() && sd.is_cpu()) {  // from pageable memory: returns once the source was read
    CUstream s = current(dd.index);
    check(D.MemcpyHtoDAsync((CUdeviceptr)dst, src, n, s), "copy host to device");
    if (!capturing()) after_copy_from_host(src, dd.index, s);  // from pinned memory: a DMA to come
  } else if (dd.is_cpu() && sd.is_cuda()) {
    CUstream s = current(sd.index);
    check(D.MemcpyDtoHAsync(dst, (CUdeviceptr)src, n, s), "copy device to host");
    check(D.StreamSynchronize(s), "copy device to host");
    raise_replay_errors(sd.index, false);  // the host met the device: what replays before flagged
  } else if (dd.is_cuda() && sd.is_cuda()) {
    if (dd.index == sd.index) {
      check(D.MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, current(dd.index)), "copy device to device");
    } else {
      CUcontext tctx = dev(dd.index).ctx;
      check(D.StreamSynchronize(current(dd.index)), "copy between devices");
      CUcontext sctx = dev(sd.index).ctx;
      CUstream s = current(sd.index);
      check(D.MemcpyPeerAsync((CUdeviceptr)dst, tctx, (CUdeviceptr)src, sctx, n, s), "copy between devices");
      check(D.StreamSynchronize(s), "copy between devices");
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

void* open_toolkit_library(const std::string& soname, std::string* error) {
  std::vector<std::string> cands;
  for (const char* env : {"TC_CUDA_PATH", "CUDA_PATH", "CUDA_HOME"})
    if (const char* e = std::getenv(env)) cands.push_back(std::string(e) + "/lib64/" + soname);
  cands.push_back("/usr/local/cuda/lib64/" + soname);
  cands.push_back(soname);
  cands.push_back(soname.substr(0, soname.find(".so") + 3));
  std::string errs;
  for (const std::string& n : cands) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    if (errs.empty() && e) errs = e;
  }
  if (error) *error = errs;
  return nullptr;
}

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
      check(d.StreamCreate(&n->streams[0], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      d.DeviceGetAttribute(&n->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, n->dev);
      d.DeviceGetAttribute(&n->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, n->dev);
      d.DeviceGetAttribute(&n->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, n->dev);
      char name[256] = {0};
      d.DeviceGetName(name, sizeof name, n->dev);
      n->name = name;
      check(d.MemAlloc(&n->error_word, 16), "allocating the device error word");
      check(d.MemsetD8Async(n->error_word, 0, 16, n->streams[0]), "clearing the device error word");
      check(d.StreamSynchronize(n->streams[0]), "clearing the device error word");  // before any stream uses it
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

void synchronize(int device) {
  ensure_initialized();
  forbid_in_capture("synchronize()");
  for (int i = 0; i < G().count; i++) {
    if (device >= 0 && i != device) continue;
    if (!G().devices[i] && device < 0) continue;
    dev(i);  // its context current
    check(G().d.CtxSynchronize(), "synchronize");
    raise_replay_errors(i, true);
  }
}

void profiler_range(bool start) {
  ensure_initialized();
  auto fn = start ? G().d.ProfilerStart : G().d.ProfilerStop;
  if (fn) check(fn(), start ? "cuProfilerStart" : "cuProfilerStop");
}

void sync_stream(int device) {
  if (g_compile_only) return;
  forbid_in_capture("waiting for the stream");
  check(G().d.StreamSynchronize(current(device)), "synchronize");
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

unsigned grid_for(int64_t n, int device, int64_t block, int64_t per_sm) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>((n + block - 1) / block, dev(device).sm_count * per_sm));
}

void launch(int device, CUfunction f, unsigned grid, unsigned block, void** args, unsigned smem) {
  launch3(device, f, grid, 1, 1, block, args, smem);
}

void launch3(int device, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, void** args,
             unsigned smem) {
  if (gx == 0 || gy == 0 || gz == 0 || g_compile_only) return;
  g_launches++;
  check(G().d.LaunchKernel(f, gx, gy, gz, block, 1, 1, smem, current(device), args, nullptr), "kernel launch");
}

void spin(int device, double us) {
  CUfunction f = kernels(device, "tc_spin", [] {
    return std::string("extern \"C\" __global__ void tc_spin(long long cycles) {\n"
                       "  const long long t0 = clock64();\n  while (clock64() - t0 < cycles) {}\n}\n");
  }, {"tc_spin"})[0];
  long long cycles = (long long)(2e3 * us);
  void* args[] = {&cycles};
  launch(device, f, 1, 1, args);
}

int64_t take_device_error(int device, int64_t* detail) {
  if (g_compile_only) return 0;
  // under capture the check is the graph's: its replays read the word (graphs.cpp)
  if (note_device_check_in_capture()) return 0;
  raise_replay_errors(device, true);  // a replay's flag is the replay's error, not this caller's
  CUstream st = current(device);
  CUdeviceptr word = dev(device).error_word;
  int64_t w[2] = {0, 0};
  check(G().d.MemcpyDtoHAsync(w, word, 16, st), "reading the device error word");
  check(G().d.StreamSynchronize(st), "reading the device error word");
  if (w[0]) check(G().d.MemsetD8Async(word, 0, 16, st), "clearing the device error word");
  if (detail) *detail = w[1];
  return w[0];
}

size_t fastest_keeping_first(const std::vector<double>& t, size_t n, double slack, bool first_eligible) {
  size_t k = 0;
  for (size_t i = 1; i < n; i++)
    if (t[i] < t[k]) k = i;
  return first_eligible && t[0] <= slack * t[k] ? 0 : k;
}

namespace {
thread_local const DeviceCheckDecoder* g_outer_checks = nullptr;
}  // namespace

OuterDeviceChecks::OuterDeviceChecks(DeviceCheckDecoder decode)
    : decode_(std::move(decode)), previous_(g_outer_checks) {
  g_outer_checks = &decode_;
}

OuterDeviceChecks::~OuterDeviceChecks() { g_outer_checks = previous_; }

void check_device_errors(int device, const DeviceCheckDecoder& raise) {
  if (g_compile_only || note_device_check_in_capture(raise)) return;
  int64_t detail = 0;
  const int64_t code = take_device_error(device, &detail);
  if (!code) return;
  raise(code, detail);
  if (g_outer_checks) (*g_outer_checks)(code, detail);
  TC_FAIL(DeviceError, "a device-side check failed (code %lld, value %lld) that its op does not know", (long long)code,
          (long long)detail);
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
