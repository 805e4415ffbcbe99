// CudaGraph (tc/cuda_graph.h): stream capture of a function's work into a CUDA graph with a
// private memory pool (allocator.cpp), abandoned when the function does something that cannot be
// recorded (forbid_in_capture, or the driver invalidating the capture), its replays, and the pool
// memory it hands out (moved out of the pool before a replay while still referenced).
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>

#include "cuda/runtime.h"
#include "tc/cuda_graph.h"
#include "tc/tensor.h"

namespace tc::cuda {
namespace {

CudaGraphStats& stats() {
  static CudaGraphStats s;
  return s;
}

std::string error_name(CUresult r) {
  const char* name = "?";
  drv().GetErrorName(r, &name);
  return name;
}

}  // namespace

CudaGraphStats cuda_graph_stats() { return stats(); }

CudaGraph::~CudaGraph() {
  if (device_ < 0) return;
  try {
    dev(device_);
    if (exec_) drv().GraphExecDestroy((CUgraphExec)exec_);
    if (graph_) drv().GraphDestroy((CUgraph)graph_);
  } catch (const Error&) {  // the device is unusable: nothing to free on it
  }
  graph_pool_release(pool_);
}

bool CudaGraph::capture(int device, const std::function<void()>& fn, std::string* why) {
  TC_CHECK(device_ < 0, DeviceError, "internal: a CudaGraph captures once");
  TC_CHECK(!capturing(), DeviceError, "a CUDA graph cannot be captured while another one is");
  dev(device);
  device_ = device;
  CUstream s = current(device);
  pool_ = graph_pool_create(device);
  clear_capture_broken();
  check(drv().StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "beginning a CUDA graph capture");
  set_capture_pool(pool_);
  std::exception_ptr err;
  std::string err_text;
  try {
    fn();
  } catch (const std::exception& e) {
    err = std::current_exception();
    err_text = e.what();
  } catch (...) {
    err = std::current_exception();
  }
  set_capture_pool(nullptr);
  CUgraph g = nullptr;
  const CUresult end = drv().StreamEndCapture(s, &g);
  const char* broken = capture_broken_by();
  clear_capture_broken();
  if (broken || end != CUDA_SUCCESS || !g) {
    if (g) drv().GraphDestroy(g);
    stats().abandoned++;
    if (why) {
      *why = broken ? std::string(broken)
                    : "the driver invalidated the capture (" + error_name(end) + ")" +
                          (err_text.empty() ? "" : ": " + err_text);
    }
    return false;
  }
  if (err) {  // an error of fn itself: the caller reports it as the op's error
    drv().GraphDestroy(g);
    std::rethrow_exception(err);
  }
  graph_ = g;
  size_t n = 0;
  drv().GraphGetNodes(g, nullptr, &n);
  nodes_ = (int64_t)n;
  CUgraphExec exec = nullptr;
  const CUresult r = drv().GraphInstantiateWithFlags(&exec, g, 0);
  if (r != CUDA_SUCCESS) {
    stats().abandoned++;
    if (why) *why = "the driver could not instantiate the graph (" + error_name(r) + ")";
    return false;
  }
  exec_ = exec;
  device_checks_ = graph_pool_has_device_checks(pool_);
  decoder_ = graph_pool_check_decoder(pool_);
  stats().captures++;
  return true;
}

bool CudaGraph::device_error() const {
  if (!device_checks_) return false;
  stats().check_waits++;
  return take_device_error(device_, nullptr) != 0;
}

namespace {

// The snapshots of the device error word that replays queued (check_later), per device: a ring
// of kLaterChecks slots, each a pinned pair of words and an event; full, the host waits for the
// oldest (a rare case: hundreds of replays queued ahead of the device).
constexpr int kLaterChecks = 64;
struct LaterCheck {
  CUevent done = nullptr;
  int64_t* word = nullptr;  // pinned: the error word after the replay
  DeviceCheckDecoder raise;
};
struct LaterChecks {
  std::vector<LaterCheck> slots;
  std::deque<int> queued;  // in replay order
  std::vector<int> free;
};
std::mutex& later_mu() {
  static std::mutex m;
  return m;
}
std::map<int, LaterChecks>& later_checks() {
  static std::map<int, LaterChecks> m;
  return m;
}

LaterChecks& later_checks_of(int device) {
  LaterChecks& lc = later_checks()[device];
  if (!lc.slots.empty()) return lc;
  void* host = nullptr;
  check(drv().MemHostAlloc(&host, kLaterChecks * 2 * sizeof(int64_t), 0), "pinned memory for device checks");
  lc.slots.resize(kLaterChecks);
  for (int i = 0; i < kLaterChecks; i++) {
    check(drv().EventCreate(&lc.slots[size_t(i)].done, CU_EVENT_DISABLE_TIMING), "an event for device checks");
    lc.slots[size_t(i)].word = static_cast<int64_t*>(host) + 2 * i;
    lc.free.push_back(kLaterChecks - 1 - i);
  }
  return lc;
}

}  // namespace

void CudaGraph::check_later(DeviceCheckDecoder raise) {
  TC_ASSERT(decoder_, "check_later of a CUDA graph whose checks have no decoder");
  dev(device_);
  bool full;
  {
    std::lock_guard<std::mutex> lock(later_mu());
    full = later_checks_of(device_).free.empty();
  }
  if (full) {
    stats().check_waits++;
    raise_replay_errors(device_, true);
  }
  CUstream s = current(device_);
  std::lock_guard<std::mutex> lock(later_mu());
  LaterChecks& lc = later_checks_of(device_);
  const int k = lc.free.back();
  lc.free.pop_back();
  LaterCheck& c = lc.slots[size_t(k)];
  check(drv().MemcpyDtoHAsync(c.word, dev(device_).error_word, 2 * sizeof(int64_t), s), "a snapshot of the device error word");
  check(drv().EventRecord(c.done, s), "a snapshot of the device error word");
  c.raise = std::move(raise);
  lc.queued.push_back(k);
  stats().checks_later++;
}

void raise_replay_errors(int device, bool wait) {
  if (capturing()) return;
  DeviceCheckDecoder raise;
  int64_t code = 0, detail = 0;
  {
    std::lock_guard<std::mutex> lock(later_mu());
    auto it = later_checks().find(device);
    if (it == later_checks().end() || it->second.queued.empty()) return;
    LaterChecks& lc = it->second;
    dev(device);
    while (!lc.queued.empty()) {
      LaterCheck& c = lc.slots[size_t(lc.queued.front())];
      if (wait) {
        check(drv().EventSynchronize(c.done), "reading a snapshot of the device error word");
      } else {
        const CUresult r = drv().EventQuery(c.done);
        if (r == CUDA_ERROR_NOT_READY) break;
        check(r, "reading a snapshot of the device error word");
      }
      lc.free.push_back(lc.queued.front());
      lc.queued.pop_front();
      if (c.word[0]) {  // this replay flagged first: the later ones saw its flag (and maybe their own)
        code = c.word[0], detail = c.word[1];
        raise = std::move(c.raise);
        for (int k : lc.queued) lc.slots[size_t(k)].raise = nullptr, lc.free.push_back(k);
        lc.queued.clear();
        break;
      }
      c.raise = nullptr;
    }
  }
  if (!raise) return;
  check(drv().MemsetD8Async(dev(device).error_word, 0, 16, current(device)), "clearing the device error word");
  raise(code, detail);
  TC_FAIL(DeviceError, "a device-side check of a CUDA graph failed (code %lld, value %lld)", (long long)code,
          (long long)detail);
}

namespace {

// A handed-out storage's deleter: lets go of the pool's storage it reads.
void release_pool_storage(void*, void* ctx) { delete static_cast<std::shared_ptr<Storage>*>(ctx); }

// Before a replay moves earlier results out of the pool, a full collection finds which of them
// are garbage when that is cheaper than moving them: at least kCollectFirstBytes (GPT-2's logits)
// or at least collect_first_storages() storages (a training step's gradients, dropped by
// zero_grad and not yet collected: DenseNet-121's 364 each took an allocation and a share of a
// move; TC_CUDA_COLLECT_FIRST_STORAGES=0 turns the count off). A graph whose collection freed none
// of them backs off (CudaGraph::move_out).
constexpr int64_t kCollectFirstBytes = int64_t(64) << 20;
int collect_first_storages() {
  static const int n = [] {
    const char* e = std::getenv("TC_CUDA_COLLECT_FIRST_STORAGES");
    return e && *e ? std::atoi(e) : 32;
  }();
  return n;
}

// The copies that move handed-out storages out of a pool, up to kMoves per launch of one kernel
// (a small cuMemcpyDtoDAsync costs the host several times a kernel launch).
constexpr int kMoves = 16;  // as TcMoves in kMoveSource
struct Moves {
  struct {
    const void* src;
    void* dst;
    uint64_t n;
  } m[kMoves];
  int count = 0;
};
const char* kMoveSource = R"(
struct TcMove { const unsigned char* src; unsigned char* dst; unsigned long long n; };
struct TcMoves { TcMove m[16]; int count; };
extern "C" __global__ void tc_graph_move(TcMoves ms) {
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < ms.count; k++) {
    const TcMove mv = ms.m[k];
    unsigned long long done = 0;
    if ((((unsigned long long)mv.src | (unsigned long long)mv.dst) & 15) == 0) {
      const unsigned long long n16 = mv.n / 16;
      for (unsigned long long i = first; i < n16; i += step) ((uint4*)mv.dst)[i] = ((const uint4*)mv.src)[i];
      done = n16 * 16;
    }
    for (unsigned long long i = done + first; i < mv.n; i += step) mv.dst[i] = mv.src[i];
  }
}
)";

void launch_moves(int device, Moves& ms, int64_t bytes) {
  CUfunction f = kernels(device, "tc_graph_move", [] { return std::string(kMoveSource); }, {"tc_graph_move"})[0];
  void* args[] = {&ms};
  launch(device, f, grid_for(bytes / 16 + 1, device), 256, args);
  ms.count = 0;
}

}  // namespace

void count_input_copy(int64_t bytes) {
  stats().inputs_copied++;
  stats().bytes_copied += bytes;
}

void copy_inputs(int device, const std::vector<InputCopy>& copies) {
  if (copies.empty()) return;
  dev(device);
  Moves moves;
  int64_t batch = 0;
  for (const InputCopy& c : copies) {
    count_input_copy((int64_t)c.nbytes);
    if (!c.nbytes) continue;
    moves.m[moves.count++] = {c.src, c.dst, c.nbytes};
    batch += (int64_t)c.nbytes;
    if (moves.count == kMoves) launch_moves(device, moves, batch), batch = 0;
  }
  if (moves.count) launch_moves(device, moves, batch);
}

std::shared_ptr<Storage> CudaGraph::hand_out(const std::shared_ptr<Storage>& s, size_t offset, size_t nbytes) {
  TC_ASSERT(offset + nbytes <= s->nbytes(), "hand_out past the end of a storage");
  for (const Handed& h : handed_)
    if (h.from == s.get() && h.offset == offset && h.nbytes == nbytes)
      if (std::shared_ptr<Storage> t = h.to.lock()) return t;
  auto t = Storage::wrap(static_cast<char*>(s->data()) + offset, nbytes, s->device(), release_pool_storage,
                         new std::shared_ptr<Storage>(s));
  handed_.push_back({s.get(), offset, nbytes, t});
  stats().outputs_handed++;
  return t;
}

void CudaGraph::replay() {
  TC_CHECK(exec_, DeviceError, "internal: replay of a CUDA graph that was not captured");
  move_out();  // what earlier results still hold of the pool, before this replay overwrites it
  dev(device_);
  check(drv().GraphLaunch((CUgraphExec)exec_, current(device_)), "launching a CUDA graph");
  stats().replays++;
}

void CudaGraph::move_out() {
  auto alive = [&](int64_t* bytes) {
    int n = 0;
    for (const Handed& h : handed_)
      if (std::shared_ptr<Storage> t = h.to.lock()) *bytes += (int64_t)t->nbytes(), n++;
    return n;
  };
  int64_t bytes = 0;
  const int before = alive(&bytes);
  const int storages = collect_first_storages();
  if (bytes >= kCollectFirstBytes || (storages > 0 && before >= storages)) {
    if (collect_skip_ > 0) {
      collect_skip_--;
    } else {
      Storage::collect_garbage();  // (its finalizers may replay this graph)
      stats().collections++;
      int64_t unused = 0;
      const bool freed_none = !handed_.empty() && alive(&unused) == before;
      collect_backoff_ = freed_none ? std::min(64, std::max(1, 2 * collect_backoff_)) : 0;
      collect_skip_ = collect_backoff_;
    }
  }
  std::vector<Handed> handed;
  handed.swap(handed_);
  dev(device_);
  Moves moves;
  std::vector<std::shared_ptr<Storage>> pool_views;  // what the moves read, alive until launched
  int64_t batch = 0;
  for (const Handed& h : handed) {
    std::shared_ptr<Storage> t = h.to.lock();
    if (!t) continue;
    std::shared_ptr<Storage> fresh = Storage::allocate(t->nbytes(), t->device());
    moves.m[moves.count++] = {t->data(), fresh->data(), t->nbytes()};
    batch += (int64_t)t->nbytes();
    t->swap_memory(*fresh);  // fresh reads the pool now; freed, it lets go of the pool's storage
    pool_views.push_back(std::move(fresh));
    stats().outputs_moved++;
    stats().bytes_moved += (int64_t)t->nbytes();
    if (moves.count == kMoves) launch_moves(device_, moves, batch), batch = 0;
  }
  if (moves.count) launch_moves(device_, moves, batch);
  pool_views.clear();  // (the graph holds the pool: its memory stays until the graph goes)
}

}  // namespace tc::cuda
