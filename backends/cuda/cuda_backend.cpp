// The "cuda" backend (cuda_backend.h): lower, generate, compile with NVRTC, run; eager on failure.
#include "cuda_backend.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

#include "cuda_fuse.h"
#include "cuda_layout.h"
#include "cuda_program.h"
#include "eager/eager.h"
#include "lower/launch_list.h"
#include "lower/lower.h"
#include "tc/error.h"

namespace tc::backends {
namespace {

// One warning per distinct reason: 64 identical layers falling back say it once.
void warn_once(const std::string& what) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(what).second) std::fprintf(stderr, "tc: cuda backend: running a graph on the eager backend: %s\n", what.c_str());
}

// The device of every tensor a node makes (-1: none; -2: not one CUDA device).
int node_device(const capture::Node& n, int dev) {
  auto see = [&](const Tensor& t) {
    if (!t.defined() || dev == -2) return;
    if (!t.device().is_cuda()) dev = -2;
    else if (dev == -1) dev = t.device().index;
    else if (dev != t.device().index) dev = -2;
  };
  for (const Value& v : n.fakes) {
    if (v.is_tensor()) see(v.tensor());
    if (v.is_tensor_list())
      for (const Tensor& t : v.tensors()) see(t);
  }
  return dev;
}

}  // namespace

int cuda_device_of(const capture::Graph& g) {
  int dev = -1;
  for (const capture::Node& n : g.nodes) dev = node_device(n, dev);
  return dev < 0 ? -1 : dev;
}

lower::LoweredGraph lower_for_cuda(const capture::Graph& g) {
  for (const capture::Node& n : g.nodes)  // (the partitioner keeps them out of the backend's graphs)
    TC_CHECK(n.kind != capture::NodeKind::External, NotImplementedError,
             "'%s' is a function kept in the graph (allow_in_graph): generated CUDA code cannot call it", n.ext->name.c_str());
  lower::LowerOptions lo;
  lo.device = DeviceType::CUDA;
  lo.externals = false;  // functions kept in the graph are cut out (the partitioner runs them on eager)
  lo.device_checks = true;  // index values checked in the kernels (cuda_program.cpp raise_flagged_index)
  lo.library_externals = true;  // the cuBLASLt calls fuse_library_epilogues makes
  lo.channels_last_call = cuda::channels_last_calls(g);  // convolutions' layout (cuda_layout.h)
  int fused = 0;
  return lower::lower(cuda::fuse_library_epilogues(g, &fused), lo);
}

bool CudaBackend::supports(const capture::Node& n) const { return n.kind != capture::NodeKind::External; }

Compiled CudaBackend::compile(const capture::Graph& g, const CompileOptions& o) const {
  auto t0 = std::chrono::steady_clock::now();
  Compiled c;
  try {
    const int device = cuda_device_of(g);
    if (device < 0) {  // CPU tensors (or several devices): nothing to generate CUDA code for
      c = EagerBackend().compile(g, o);
      c.report.perf_hints.push_back("cuda backend: the graph's tensors are not on one CUDA device: it runs on eager");
      return c;
    }
    lower::LoweredGraph lg = lower_for_cuda(g);
    c.report.lower_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool tune = o.mode == "max-autotune" || o.mode == "max-autotune-no-cudagraphs";
    auto program = std::make_shared<const cuda::Program>(cuda::compile_lowered(lg, device, &c.report, tune));
    for (const lower::Step& s : lg.steps) c.report.fallback_nodes += s.kind == lower::Step::Kind::Extern && s.ext.fallback;
    c.report.perf_hints.insert(c.report.perf_hints.end(), lg.perf_hints.begin(), lg.perf_hints.end());
    // A kernel the driver refuses to launch: this graph runs on eager from then on.
    struct Fallback {
      std::mutex mu;
      capture::CompiledGraph eager;
      capture::CompiledGraph tied_eager;  // for calls where tied dims differ (the program stays)
    };
    auto fb = std::make_shared<Fallback>();
    auto graph = std::make_shared<const capture::Graph>(g);
    CompileOptions eo = o;
    c.run = [program, fb, graph, eo](capture::GraphInputs inputs) {
      capture::CompiledGraph eager;
      {
        std::lock_guard<std::mutex> lock(fb->mu);
        eager = fb->eager;
      }
      if (eager) return eager(inputs);
      if (!lower::ties_hold(program->graph, inputs)) {  // dims that shared a size when lowered differ now
        std::lock_guard<std::mutex> lock(fb->mu);
        if (!fb->tied_eager) fb->tied_eager = EagerBackend().compile(*graph, eo).run;
        eager = fb->tied_eager;
      }
      if (eager) return eager(inputs);
      try {
        return program->run(inputs);
      } catch (const cuda::LaunchFailed& e) {
        warn_once(std::string("a generated kernel did not launch: ") + e.what());
        std::lock_guard<std::mutex> lock(fb->mu);
        if (!fb->eager) fb->eager = EagerBackend().compile(*graph, eo).run;
        eager = fb->eager;
      }
      return eager(inputs);
    };
    return c;
  } catch (const std::exception& e) {  // tc::Error, and anything else a bug in lowering throws
    if (o.fullgraph)
      TC_FAIL(CompileError, "the cuda backend cannot compile this graph (fullgraph=true): %s", e.what());
    warn_once(e.what());
    std::string hint = std::string("cuda backend: ") + e.what() + ": the graph runs on eager";
    c = EagerBackend().compile(g, o);
    c.report.fallback_nodes += g.num_ops();
    c.report.perf_hints.push_back(hint);
    return c;
  }
}

}  // namespace tc::backends
