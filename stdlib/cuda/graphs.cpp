// CudaGraph (tc/cuda_graph.h): stream capture of a function's work into a CUDA graph with a
// private memory pool (allocator.cpp), abandoned when the function does something that cannot be
// recorded (forbid_in_capture, or the driver invalidating the capture), its replays, and the pool
// memory it hands out (moved out of the pool before a replay while still referenced).
#include <exception>

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
  stats().captures++;
  return true;
}

bool CudaGraph::device_error() const {
  if (!device_checks_) return false;
  return take_device_error(device_, nullptr) != 0;
}

namespace {

// A handed-out storage's deleter: lets go of the pool's storage it reads.
void release_pool_storage(void*, void* ctx) { delete static_cast<std::shared_ptr<Storage>*>(ctx); }

constexpr int64_t kCollectFirstBytes = int64_t(64) << 20;

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
  int64_t bytes = 0;
  for (const Handed& h : handed_)
    if (std::shared_ptr<Storage> t = h.to.lock()) bytes += (int64_t)t->nbytes();
  if (bytes >= kCollectFirstBytes) Storage::collect_garbage();  // (its finalizers may replay this graph)
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
