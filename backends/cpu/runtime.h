// Running a lowered graph whose kernels are compiled: a flat launch list in C++, no interpreter.
//
//   Program p{lowered, {{fn, info}, ...}};   // one CompiledKernel per lowered.kernels entry
//   std::vector<Tensor> outs = p.run(inputs);
//
// Per call: graph-level sizes from the inputs' dims, one arena for the planned buffers (outputs
// are views of it or of the inputs, as the plan says), then each Step in order: a Launch calls
// the kernel over its outer range (split over the thread pool when the work is large), an Extern
// runs the op's eager kernel (OpenBLAS for matmul) on tensors that wrap the step's buffers.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen.h"
#include "tc/capture/graph.h"

namespace tc::backends::cpu {

struct CompiledKernel {
  KernelFn fn = nullptr;
  KernelInfoFn info = nullptr;
  // A two-level kernel's (codegen.h): its _final, buffer parameters and outer reductions.
  KernelFinalFn final = nullptr;
  int num_buffers = 0, outer_reductions = 0;
};

// The functions of kernel `k` compiled under `symbol` (codegen.h), found by `lookup(name)`.
template <typename Lookup>
CompiledKernel find_kernel(const lower::Kernel& k, const std::string& symbol, Lookup&& lookup) {
  CompiledKernel c{(KernelFn)lookup(symbol), (KernelInfoFn)lookup(symbol + "_info")};
  if (k.two_level()) {
    c.final = (KernelFinalFn)lookup(symbol + "_final");
    c.num_buffers = (int)k.buffers.size();
    c.outer_reductions = (int)k.outer_reductions.size();
  }
  return c;
}

// Below this many inner iterations a launch runs on the calling thread.
constexpr int64_t kParallelWork = 1 << 15;

struct Program {
  lower::LoweredGraph graph;
  std::vector<CompiledKernel> kernels;  // per graph.kernels
  std::vector<Tensor> run(capture::GraphInputs inputs) const;

  // Per step of a graph without symbols (static shapes): a launch's sizes and outer range,
  // evaluated once (prepare_static_launches, after `kernels` is set) instead of on every call.
  struct StaticLaunch {
    std::vector<int64_t> sizes;
    int64_t outer = 0, work = 1;
  };
  std::vector<StaticLaunch> static_launches;  // empty: evaluated per call
  void prepare_static_launches();

  // The arena of static-shape graphs, kept across calls; a call that finds it in use (another
  // thread, or a tensor still viewing it) allocates its own.
  struct KeptArena {
    std::mutex mu;
    std::shared_ptr<Storage> storage;
  };
  std::shared_ptr<KeptArena> kept = std::make_shared<KeptArena>();

 private:
  std::shared_ptr<Storage> arena(int64_t bytes) const;
};

// Calls a kernel over [0, outer elements), in parallel chunks when the work is large enough.
void launch(const CompiledKernel& k, void* const* buffers, const int64_t* sizes);

}  // namespace tc::backends::cpu
