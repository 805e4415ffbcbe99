// A lowered graph as CUDA: all its kernels in one NVRTC program (cubins cached on disk under
// $TC_CACHE_DIR/cuda, modules loaded once per process), and the launch list that runs it.
//
//   Program p = compile_lowered(lowered, device, &report);   // codegen + NVRTC (or caches)
//   std::vector<Tensor> outs = p.run(inputs);                 // launches on the current stream
//
// Per call: graph sizes from the inputs' dims, one arena from the CUDA caching allocator for the
// planned buffers (kept across calls for static shapes while nothing views it and the stream is
// the same), then each Step: a Launch is one cuLaunchKernel, an Extern runs the op's eager CUDA
// kernel (cuBLAS, cuDNN, ...) on tensors viewing the step's buffers. In compile-only mode
// (tc::cuda::set_compile_only) nothing is loaded or launched.
#pragma once
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "cuda_codegen.h"
#include "cuda_profile.h"
#include "tc/capture/graph.h"

namespace tc::backends::cuda {

struct Program {
  lower::LoweredGraph graph;
  int device = 0;
  // Per graph.kernels entry, per strategy compiled for it (plan_kernel): the shape and the
  // CUfunction (null in compile-only mode).
  std::vector<std::vector<KernelShape>> shapes;
  std::vector<std::vector<void*>> functions;
  std::string source;                 // the NVRTC program
  // A tiny graph (TC_CUDA_TINY_GRAPH=1: static, no externs, every step small) runs as one kernel
  // of one block that calls each step's __device__ function in turn, __syncthreads() between
  // them; its parameters are the arena, then the graph buffers `tiny_params`.
  bool tiny_graph = false;
  void* tiny = nullptr;  // its CUfunction (null in compile-only mode)
  std::vector<int> tiny_params;
  int64_t tiny_smem = 0;  // its dynamic shared memory (arena and weights), bytes

  std::vector<Tensor> run(capture::GraphInputs inputs) const;

  // Launch geometry per step, evaluated once for graphs without dynamic dims.
  struct StaticLaunch {
    std::vector<int64_t> sizes;
    int64_t n_outer = 0;
    unsigned grid = 0;
    int shape = 0;
  };
  std::vector<StaticLaunch> static_launches;
  void prepare_static_launches();

  struct KeptArena {
    std::mutex mu;
    std::shared_ptr<Storage> storage;
    int stream = -1;
  };
  std::shared_ptr<KeptArena> kept = std::make_shared<KeptArena>();
  std::shared_ptr<ProfileTable> profile;  // TC_CUDA_PROFILE only

 private:
  std::shared_ptr<Storage> arena(int64_t bytes) const;
  unsigned grid(const KernelShape& sh, int64_t n_outer, bool two_level) const;
};

// Thrown by Program::run when the driver refuses a launch (the backend then runs the graph on
// eager): a kernel that cannot launch is a code-generation problem, not the user's.
struct LaunchFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws tc::Error (CompileError) when code generation or NVRTC fails. `report` gets kernel
// counts and codegen / NVRTC times added.
Program compile_lowered(const lower::LoweredGraph& g, int device, capture::CompileReport* report);

}  // namespace tc::backends::cuda
