// The caching allocator behind "cuda" storages: size classes, one pool of free blocks per
// (device, stream), deferred reuse of blocks used on other streams (record_stream), and
// free-all-and-retry on out-of-memory; its statistics.
//
// Sizes round up to a size class: 512-byte steps up to 1 MiB, then four classes per power of two
// (at most 25% slack). A block belongs to the stream that was current when it was allocated.
// Freed, it is cached under (its stream, its class) and handed out again only to allocations of
// that class on that stream: work on one stream runs in order, so the next user of the block
// runs after every earlier use without waiting on the host. A block also used on other streams
// (record_stream) is held back at its free until an event recorded then on each of those
// streams has completed (PyTorch's semantics). On out-of-memory the device is synchronized,
// every cached block released and the allocation retried once.
//
// While a CUDA graph is captured (graphs.cpp), allocations of the capturing thread come from that
// graph's private pool (GraphPool): fresh driver memory or the pool's own freed blocks, never the
// shared cache; the graph's replays write only there. Blocks of the shared cache freed during the
// capture are held by the pool until it is released: the recorded kernels may read them.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/runtime.h"
#include "tc/tensor.h"

namespace tc::cuda {

size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= (1u << 20)) return (n + 511) & ~size_t(511);
  size_t p = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

namespace {

static_assert(1 + Stream::kPoolStreams <= 64, "a block's other streams are a 64-bit mask");

struct Block {
  size_t cls = 0;
  int stream = 0;      // the stream id it was allocated on
  uint64_t uses = 0;   // bit i: also used on stream id i (record_stream)
};

// A freed block waiting for its events (one per stream in `uses`) before it is cached.
struct Pending {
  CUdeviceptr p;
  Block b;
  std::vector<CUevent> events;
};

struct Pool {
  std::unordered_map<uint64_t, std::vector<CUdeviceptr>> cached;  // by key(stream, class)
  std::unordered_map<CUdeviceptr, Block> live;
  std::vector<Pending> pending;
  std::vector<CUevent> spare_events;
  int64_t allocated = 0, peak = 0, reserved = 0;
};

thread_local GraphPool* t_capture = nullptr;  // the calling thread's capture
thread_local const char* t_broken = nullptr;   // what broke it (forbid_in_capture)

uint64_t key(int stream, size_t cls) { return (uint64_t)cls * 64 + (uint64_t)stream; }

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::vector<Pool>& pools() {
  static auto* p = new std::vector<Pool>(64);  // never destroyed: storages may be freed during exit
  return *p;
}

// Moves pending blocks whose events have all completed into the cache (mu() held).
void collect_pending(Pool& pool) {
  for (size_t i = 0; i < pool.pending.size();) {
    Pending& e = pool.pending[i];
    bool done = true;
    for (CUevent ev : e.events) done = done && drv().EventQuery(ev) != CUDA_ERROR_NOT_READY;
    if (!done) {
      i++;
      continue;
    }
    pool.spare_events.insert(pool.spare_events.end(), e.events.begin(), e.events.end());
    pool.cached[key(e.b.stream, e.b.cls)].push_back(e.p);
    pool.pending[i] = std::move(pool.pending.back());
    pool.pending.pop_back();
  }
}

// Waits for every stream of the device and frees every cached block to the driver (mu() held).
void release_all(int device) {
  forbid_in_capture("freeing cached memory to the driver");
  Pool& pool = pools()[device];
  dev(device);  // its context current
  drv().CtxSynchronize();
  collect_pending(pool);
  for (auto& [k, v] : pool.cached) {
    for (CUdeviceptr p : v) {
      drv().MemFree(p);
      pool.reserved -= (int64_t)(k / 64);
    }
  }
  pool.cached.clear();
}

std::string mib(int64_t b) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.2f MiB", (double)b / (1 << 20));
  return buf;
}

// A block's free with other streams' uses: an event on each of them, the block pending.
void defer(Pool& pool, CUdeviceptr p, const Block& b, int device) {
  Pending e{p, b, {}};
  for (int id = 0; id <= Stream::kPoolStreams; id++) {
    if (!(b.uses >> id & 1)) continue;
    CUevent ev = nullptr;
    if (!pool.spare_events.empty()) {
      ev = pool.spare_events.back();
      pool.spare_events.pop_back();
    } else if (drv().EventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      ev = nullptr;
    }
    if (!ev || drv().EventRecord(ev, stream_handle(device, id)) != CUDA_SUCCESS) {
      drv().CtxSynchronize();  // no event: wait for everything instead (rare: a driver failure)
      if (ev) pool.spare_events.push_back(ev);
      continue;
    }
    e.events.push_back(ev);
  }
  pool.pending.push_back(std::move(e));
}

}  // namespace

struct GraphPool {
  int device = 0;
  bool released = false;
  std::unordered_map<size_t, std::vector<CUdeviceptr>> free;  // by class
  std::unordered_map<CUdeviceptr, size_t> live;                // class of each block handed out
  std::vector<std::pair<CUdeviceptr, size_t>> held;            // shared blocks freed while capturing
  int64_t bytes = 0;                                           // driver memory of the pool
  bool device_checks = false;  // kernels recorded in it flag errors in the device error word
  std::vector<DeviceCheckDecoder> checks;  // per check noted, its decoder (empty: none)
  std::vector<void*> host;     // pinned copies of the host data its recorded copies upload
};

namespace {

std::unordered_map<CUdeviceptr, GraphPool*>& pool_blocks() {  // every pool's blocks (mu() held)
  static auto* m = new std::unordered_map<CUdeviceptr, GraphPool*>;
  return *m;
}

// A block of the capturing pool: its own freed block of that class, else new driver memory. The
// driver call runs in relaxed capture mode (cuMemAlloc is no stream work; the thread's capture
// mode would refuse it).
CUdeviceptr pool_alloc(GraphPool& gp, size_t cls, size_t nbytes) {
  CUdeviceptr p = 0;
  auto it = gp.free.find(cls);
  if (it != gp.free.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    drv().ThreadExchangeStreamCaptureMode(&m);
    CUresult r = drv().MemAlloc(&p, cls);
    drv().ThreadExchangeStreamCaptureMode(&m);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      t_broken = "out of memory in the graph's private pool";
      TC_FAIL(OutOfMemoryError, "CUDA out of memory: tried to allocate %s on cuda:%d for a CUDA graph being captured",
              mib((int64_t)nbytes).c_str(), gp.device);
    }
    check(r, "cuMemAlloc (graph pool)");
    pool_blocks()[p] = &gp;
    gp.bytes += (int64_t)cls;
    pools()[gp.device].reserved += (int64_t)cls;
  }
  gp.live[p] = cls;
  return p;
}

// Frees a released pool's memory once none of it is live (mu() held).
void pool_collect(GraphPool* gp) {
  if (!gp->released || !gp->live.empty()) return;
  Pool& pool = pools()[gp->device];
  for (auto& [cls, v] : gp->free) {
    for (CUdeviceptr p : v) {
      drv().MemFree(p);
      pool_blocks().erase(p);
      pool.reserved -= (int64_t)cls;
    }
  }
  for (auto& [p, cls] : gp->held) pool.cached[key(0, cls)].push_back(p);  // stream 0 after a full sync
  for (void* h : gp->host) drv().MemFreeHost(h);
  delete gp;
}

}  // namespace

GraphPool* graph_pool_create(int device) {
  auto* gp = new GraphPool;
  gp->device = device;
  return gp;
}

void graph_pool_release(GraphPool* gp) {
  if (!gp) return;
  std::lock_guard<std::mutex> lock(mu());
  try {
    dev(gp->device);
    drv().CtxSynchronize();  // replays may still run
  } catch (const Error&) {
  }
  gp->released = true;
  pool_collect(gp);
}

void set_capture_pool(GraphPool* gp) { t_capture = gp; }
bool capturing() { return t_capture != nullptr; }
bool note_device_check_in_capture(DeviceCheckDecoder decode) {
  if (!t_capture) return false;
  t_capture->device_checks = true;
  t_capture->checks.push_back(std::move(decode));
  return true;
}
bool graph_pool_has_device_checks(const GraphPool* p) { return p && p->device_checks; }
DeviceCheckDecoder graph_pool_check_decoder(const GraphPool* p) {
  if (!p || p->checks.empty()) return {};
  for (const DeviceCheckDecoder& d : p->checks)
    if (!d) return {};
  if (p->checks.size() == 1) return p->checks[0];
  return [checks = p->checks](int64_t code, int64_t detail) {
    for (const DeviceCheckDecoder& d : checks) d(code, detail);
  };
}
int capture_device_checks() { return t_capture ? int(t_capture->checks.size()) : 0; }
void wrap_capture_device_checks(int first, const std::function<DeviceCheckDecoder(DeviceCheckDecoder)>& wrap) {
  if (!t_capture) return;
  for (size_t i = size_t(first); i < t_capture->checks.size(); i++)
    if (t_capture->checks[i]) t_capture->checks[i] = wrap(t_capture->checks[i]);
}

const void* stage_host_bytes_in_capture(const void* src, size_t n) {
  TC_CHECK(t_capture, DeviceError, "internal: staging host bytes outside a capture");
  void* h = nullptr;
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  drv().ThreadExchangeStreamCaptureMode(&m);
  CUresult r = drv().MemHostAlloc(&h, n, 0);
  drv().ThreadExchangeStreamCaptureMode(&m);
  if (r != CUDA_SUCCESS) forbid_in_capture("pinned host memory for a copy to the device");
  std::memcpy(h, src, n);
  std::lock_guard<std::mutex> lock(mu());
  t_capture->host.push_back(h);
  return h;
}
const char* capture_broken_by() { return t_broken; }
void clear_capture_broken() { t_broken = nullptr; }

void forbid_in_capture(const char* what) {
  if (!t_capture) return;
  if (!t_broken) t_broken = what;
  TC_FAIL(DeviceError, "%s cannot be recorded in a CUDA graph", what);
}

void* raw_alloc(size_t nbytes, int device) {
  int stream = current_stream_id(device);
  stream_handle(device, stream);  // the device's context current, the stream made
  size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu());
  Pool& pool = pools()[device];
  if (t_capture) {
    if (t_capture->device != device) forbid_in_capture("an allocation on another device");
    CUdeviceptr p = pool_alloc(*t_capture, cls, nbytes);
    pool.allocated += (int64_t)cls;
    if (pool.allocated > pool.peak) pool.peak = pool.allocated;
    return reinterpret_cast<void*>(p);
  }
  if (!pool.pending.empty()) collect_pending(pool);
  CUdeviceptr p = 0;
  auto it = pool.cached.find(key(stream, cls));
  if (it != pool.cached.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    CUresult r = drv().MemAlloc(&p, cls);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_all(device);
      r = drv().MemAlloc(&p, cls);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_b = 0, total_b = 0;
      drv().MemGetInfo(&free_b, &total_b);
      TC_FAIL(OutOfMemoryError,
              "CUDA out of memory: tried to allocate %s on cuda:%d (%s total; %s allocated by tc, %s reserved by "
              "tc, %s free)",
              mib((int64_t)nbytes).c_str(), device, mib((int64_t)total_b).c_str(), mib(pool.allocated).c_str(),
              mib(pool.reserved).c_str(), mib((int64_t)free_b).c_str());
    }
    check(r, "cuMemAlloc");
    pool.reserved += (int64_t)cls;
  }
  pool.live[p] = Block{cls, stream, 0};
  pool.allocated += (int64_t)cls;
  if (pool.allocated > pool.peak) pool.peak = pool.allocated;
  return reinterpret_cast<void*>(p);
}

void raw_free(void* ptr, int device) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu());
  Pool& pool = pools()[device];
  auto it = pool.live.find((CUdeviceptr)ptr);
  if (it == pool.live.end()) {
    auto pb = pool_blocks().find((CUdeviceptr)ptr);
    if (pb == pool_blocks().end()) return;
    GraphPool* gp = pb->second;
    auto l = gp->live.find((CUdeviceptr)ptr);
    if (l == gp->live.end()) return;
    gp->free[l->second].push_back((CUdeviceptr)ptr);
    pool.allocated -= (int64_t)l->second;
    gp->live.erase(l);
    pool_collect(gp);
    return;
  }
  Block b = it->second;
  pool.live.erase(it);
  pool.allocated -= (int64_t)b.cls;
  if (t_capture && t_capture->device == device) {  // the graph may read it: held until the pool goes
    t_capture->held.emplace_back((CUdeviceptr)ptr, b.cls);
    return;
  }
  if (!b.uses) {
    pool.cached[key(b.stream, b.cls)].push_back((CUdeviceptr)ptr);
    return;
  }
  try {
    dev(device);  // its context current on this thread
    defer(pool, (CUdeviceptr)ptr, b, device);
  } catch (const Error&) {  // the device is unusable: keep the block out of circulation
  }
}

void record_stream(const Tensor& t, Stream s) {
  TC_CHECK(t.device().is_cuda(), DeviceError, "record_stream: the tensor is on %s, not on a CUDA device",
           t.device().str().c_str());
  TC_CHECK(t.device().index == s.device, DeviceError, "record_stream: the tensor is on %s, the stream on cuda:%d",
           t.device().str().c_str(), s.device);
  s.handle();  // checks the stream (DeviceError without a GPU)
  if (!t.storage()) return;
  std::lock_guard<std::mutex> lock(mu());
  Pool& pool = pools()[s.device];
  auto it = pool.live.find((CUdeviceptr)t.storage()->data());
  if (it == pool.live.end() || it->second.stream == s.id) return;
  it->second.uses |= uint64_t(1) << s.id;
}

int64_t memory_allocated(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(mu());
  return pools()[device].allocated;
}
int64_t max_memory_allocated(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(mu());
  return pools()[device].peak;
}
int64_t memory_reserved(int device) {
  if (!is_available()) return 0;
  std::lock_guard<std::mutex> lock(mu());
  return pools()[device].reserved;
}
void reset_peak_memory_stats(int device) {
  if (!is_available()) return;
  std::lock_guard<std::mutex> lock(mu());
  pools()[device].peak = pools()[device].allocated;
}
void empty_cache() {
  if (!is_available() || compile_only()) return;
  {
    std::lock_guard<std::mutex> lock(mu());
    for (int i = 0; i < device_count(); i++)
      if (pools()[i].reserved > 0) release_all(i);
  }
  empty_host_cache();
}

}  // namespace tc::cuda
