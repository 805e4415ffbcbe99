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
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/runtime.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

static_assert(1 + Stream::kPoolStreams <= 64, "a block's other streams are a 64-bit mask");

size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= (1u << 20)) return (n + 511) & ~size_t(511);
  size_t p = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

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

void* raw_alloc(size_t nbytes, int device) {
  int stream = current_stream_id(device);
  stream_handle(device, stream);  // the device's context current, the stream made
  size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu());
  Pool& pool = pools()[device];
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
  if (it == pool.live.end()) return;
  Block b = it->second;
  pool.live.erase(it);
  pool.allocated -= (int64_t)b.cls;
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
  std::lock_guard<std::mutex> lock(mu());
  for (int i = 0; i < device_count(); i++)
    if (pools()[i].reserved > 0) release_all(i);
}

}  // namespace tc::cuda
