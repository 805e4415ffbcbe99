// Pinned (page-locked) host memory for CPU tensors (Tensor:pin_memory(), PyTorch's
// CachingHostAllocator): blocks from cuMemHostAlloc, cached by size class for reuse, and the
// bookkeeping of the host-to-device copies that read them.
//
// A copy from pageable memory returns once the driver has staged the source; a copy from a
// pinned block is a DMA that runs later, on the current stream. So every such copy records an
// event on its stream in the block. A copy made while a NonBlocking scope lives (x:to("cuda",
// {non_blocking = true})) returns at once; any other waits for its event, as PyTorch's blocking
// copy does, so the host may write the source right after. When the storage over a block goes, the
// block is cached for the next pin_memory only once its events have completed (until then it is
// held): the GPU never reads memory that was handed out again. Nothing is freed to the driver
// before empty_cache() or a failed cuMemHostAlloc, and the cache is never destroyed (storages may
// go during exit, copies may still run).
#include <map>
#include <mutex>
#include <vector>

#include "cuda/runtime.h"
#include "tc/ops.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

struct HostBlock {
  char* p = nullptr;
  size_t size = 0;  // its size class: the bytes allocated
  bool live = false;  // a storage holds it
  struct Use {
    int device;
    CUevent done;  // recorded after a copy that reads the block
  };
  std::vector<Use> uses;  // not yet seen complete
};

struct HostCache {
  std::mutex mu;
  std::map<uintptr_t, HostBlock*> blocks;     // every block (live, held, cached) by address
  std::multimap<size_t, HostBlock*> cached;   // no storage, no copy pending: by size class
  std::vector<HostBlock*> held;               // no storage, copies pending
  std::map<int, std::vector<CUevent>> spare;  // events to record again, per device
};
HostCache& cache() {
  static HostCache* c = new HostCache;  // never destroyed: storages may go during exit
  return *c;
}

thread_local bool t_non_blocking = false;

// Drops the uses of b that have completed (a failed query counts as complete: the context is
// broken and runs no copy). True when none is left. Nothing is queried while the calling thread
// captures a CUDA graph (a storage freed then): the uses stay for a later look. Holds cache().mu.
bool settle(HostCache& c, HostBlock* b) {
  if (capturing()) return b->uses.empty();
  std::erase_if(b->uses, [&](const HostBlock::Use& u) {
    if (drv().EventQuery(u.done) == CUDA_ERROR_NOT_READY) return false;
    c.spare[u.device].push_back(u.done);
    return true;
  });
  return b->uses.empty();
}

// Held blocks whose copies have completed go to the cache. Holds cache().mu.
void settle_held(HostCache& c) {
  std::erase_if(c.held, [&](HostBlock* b) {
    if (!settle(c, b)) return false;
    c.cached.emplace(b->size, b);
    return true;
  });
}

// Frees the cached blocks to the driver. Holds cache().mu.
void release_cached(HostCache& c) {
  for (auto& [size, b] : c.cached) {
    drv().MemFreeHost(b->p);
    c.blocks.erase((uintptr_t)b->p);
    delete b;
  }
  c.cached.clear();
}

// The deleter of a pinned storage; never throws.
void host_free(void*, void* ctx) {
  HostCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto* b = static_cast<HostBlock*>(ctx);
  b->live = false;
  if (settle(c, b))
    c.cached.emplace(b->size, b);
  else
    c.held.push_back(b);
  settle_held(c);
}

// A block of at least n bytes, marked live: a cached one of n's class, else a new one.
HostBlock* take_block(size_t n) {
  forbid_in_capture("pin_memory()");  // cuMemHostAlloc
  HostCache& c = cache();
  size_t cls = size_class(n);
  void* p = nullptr;
  CUresult r;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    settle_held(c);
    if (auto it = c.cached.find(cls); it != c.cached.end()) {
      HostBlock* b = it->second;
      c.cached.erase(it);
      b->live = true;
      return b;
    }
    r = drv().MemHostAlloc(&p, cls, CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // the cache's other sizes go back first
      release_cached(c);
      r = drv().MemHostAlloc(&p, cls, CU_MEMHOSTALLOC_PORTABLE);
    }
  }
  // pinned tensors that only a Lua collector knows are garbage: collect (outside the lock: their
  // deleters take it), take what they gave back, and try once more
  if (r == CUDA_ERROR_OUT_OF_MEMORY && Storage::collect_garbage()) {
    std::lock_guard<std::mutex> lock(c.mu);
    settle_held(c);
    release_cached(c);
    r = drv().MemHostAlloc(&p, cls, CU_MEMHOSTALLOC_PORTABLE);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    TC_FAIL(OutOfMemoryError, "pin_memory(): out of pinned host memory: tried to allocate %zu bytes", cls);
  check(r, "allocating pinned host memory (cuMemHostAlloc)");
  auto* b = new HostBlock;
  b->p = static_cast<char*>(p);
  b->size = cls;
  b->live = true;
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.emplace((uintptr_t)p, b);
  return b;
}

// The live block holding address p, or null. Holds cache().mu.
HostBlock* find_live(HostCache& c, const void* p) {
  auto it = c.blocks.upper_bound((uintptr_t)p);
  if (it == c.blocks.begin()) return nullptr;
  HostBlock* b = std::prev(it)->second;
  return b->live && (const char*)p < b->p + b->size ? b : nullptr;
}

}  // namespace

Tensor pin_memory(const Tensor& t) {
  TC_CHECK(t.defined() && !t.is_fake(), ValueError, "pin_memory(): expected a tensor with data");
  TC_CHECK(t.device().is_cpu(), DeviceError, "pin_memory(): cannot pin a tensor on %s: only CPU tensors can be pinned",
           t.device().str().c_str());
  if (is_pinned(t)) return t;
  TC_CHECK(!compile_only(), DeviceError,
           "pin_memory(): CUDA runs compile-only (no GPU), so there is no pinned host memory");
  std::string why;
  TC_CHECK(is_available(&why), DeviceError, "pin_memory(): pinned host memory needs CUDA, which is not available: %s",
           why.c_str());
  Device d = default_device();
  dev(d.is_cuda() ? d.index : 0);  // a context current for cuMemHostAlloc
  size_t n = (size_t)t.numel() * t.itemsize();
  HostBlock* b = take_block(n);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(b->p, n, Device{}, host_free, b, /*counted=*/true);
  impl->sizes = t.sizes();
  impl->strides = contiguous_strides(t.sizes());
  impl->dtype = t.dtype();
  Tensor out(std::move(impl));
  out.copy_from(t);
  return out;
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || t.is_fake() || !t.device().is_cpu()) return false;
  HostCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return find_live(c, t.storage()->data()) != nullptr;
}

NonBlocking::NonBlocking(bool on) : prev_(t_non_blocking) { t_non_blocking = on; }
NonBlocking::~NonBlocking() { t_non_blocking = prev_; }

void after_copy_from_host(const void* src, int device, CUstream s) {
  HostCache& c = cache();
  CUevent e = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    HostBlock* b = find_live(c, src);
    if (!b) return;  // pageable: the driver returned once it had staged the source
    settle(c, b);
    settle_held(c);
    std::vector<CUevent>& spare = c.spare[device];
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
    } else {
      check(drv().EventCreate(&e, CU_EVENT_DISABLE_TIMING), "creating an event for a copy from pinned memory");
    }
    check(drv().EventRecord(e, s), "recording an event after a copy from pinned memory");
    b->uses.push_back({device, e});
  }
  if (!t_non_blocking) check(drv().EventSynchronize(e), "waiting for a copy from pinned memory");
}

void empty_host_cache() {
  if (!is_available() || compile_only()) return;
  HostCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  settle_held(c);
  release_cached(c);
}

}  // namespace tc::cuda
