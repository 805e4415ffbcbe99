// A lowered graph as CUDA: all its kernels in NVRTC programs (cubins cached on disk under
// $TC_CACHE_DIR/cuda, modules loaded once per process), and the launch list that runs it.
//
//   Program p = compile_lowered(lowered, device, &report);   // codegen + NVRTC (or caches)
//   std::vector<Tensor> outs = p.run(inputs);                 // launches on the current stream
//
// compile_lowered is generate_code (codegen + NVRTC, no GPU needed) then load_code (modules and
// the launch list); an AOT package stores the CudaCode between the two (cuda_package.h), so a
// loaded package runs exactly the kernels and launches tc.compile runs.
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

// What code generation makes of a lowered graph for one architecture, before anything is loaded.
struct CudaCode {
  int arch = 0;  // sm_<arch>: 90 for sm_90
  // Per graph.kernels entry, per strategy compiled for it (plan_kernel): its shape and function
  // name (in a tiny graph, a __device__ function the tiny kernel calls: no entry point).
  std::vector<std::vector<KernelShape>> shapes;
  std::vector<std::vector<std::string>> names;
  // A tiny graph (tiny_eligible: static, no externs, every step small) runs as ONE kernel of one
  // block of `tiny_block` threads that calls each step's function in turn, __syncthreads() between
  // them (__syncwarp() under TC_CUDA_TINY_ROWS=1 when its steps are row-local: KernelShape::warp_row;
  // runs of repeated steps as a loop); its parameters are the arena, then the graph buffers
  // `tiny_params`. "": launched step by step.
  std::string tiny;
  std::vector<int> tiny_params;
  int64_t tiny_smem = 0;  // its dynamic shared memory (arena and weights), bytes
  int tiny_block = 256;
  std::string key;        // names the programs' source and arch: modules load once per device and key
  std::vector<std::string> cubins;  // one per NVRTC program (compiled side by side)
};

struct Program {
  lower::LoweredGraph graph;
  int device = 0;
  // Per graph.kernels entry, per strategy: the shape and the CUfunction (null in compile-only
  // mode and for a tiny graph's steps).
  std::vector<std::vector<KernelShape>> shapes;
  std::vector<std::vector<void*>> functions;
  bool tiny_graph = false;  // CudaCode::tiny
  void* tiny = nullptr;     // its CUfunction (null in compile-only mode)
  std::vector<int> tiny_params;
  int64_t tiny_smem = 0;
  int tiny_block = 256;

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

  // Blocks for a launch of `sh` over n_outer outer iterations.
  unsigned grid(const KernelShape& sh, int64_t n_outer, bool two_level) const;

 private:
  std::shared_ptr<Storage> arena(int64_t bytes) const;
};

// Thrown by Program::run when the driver refuses a launch (the backend then runs the graph on
// eager): a kernel that cannot launch is a code-generation problem, not the user's.
struct LaunchFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws tc::Error (CompileError) when code generation or NVRTC fails. `report` gets kernel
// counts and codegen / NVRTC times added.
// `autotune`: mode = "max-autotune": each kernel's launch variants compiled too, and timed
// (cuda_autotune.h).
Program compile_lowered(const lower::LoweredGraph& g, int device, capture::CompileReport* report, bool autotune = false);

// Code generation and NVRTC for sm_<arch> (through the disk cache); needs NVRTC, not a GPU.
// Throws CompileError (codegen, NVRTC) or DeviceError (no NVRTC).
CudaCode generate_code(const lower::LoweredGraph& g, int arch, capture::CompileReport* report);

// The Program running `code` on `device`: its modules loaded (once per process, device and
// code.key), its functions found, launch geometry evaluated. Nothing is generated or compiled.
// Throws tc::Error when a cubin does not load or lacks a function it names.
Program load_code(lower::LoweredGraph g, int device, const CudaCode& code);

}  // namespace tc::backends::cuda
