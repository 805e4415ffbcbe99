// CudaGraph (tc/cuda_graph.h): stream capture of a function's work into a CUDA graph with a
// private memory pool (allocator.cpp), abandoned when the function does something that cannot be
// recorded (forbid_in_capture, or the driver invalidating the capture), and its replays.
#include <exception>

#include "cuda/runtime.h"
#include "tc/cuda_graph.h"

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

void CudaGraph::replay() const {
  TC_CHECK(exec_, DeviceError, "internal: replay of a CUDA graph that was not captured");
  check(drv().GraphLaunch((CUgraphExec)exec_, current(device_)), "launching a CUDA graph");
  stats().replays++;
}

}  // namespace tc::cuda
