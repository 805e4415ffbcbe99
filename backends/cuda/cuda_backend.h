// The "cuda" backend: lowers a captured graph whose tensors are all on one CUDA device to the loop
// IR and runs it as NVRTC-compiled kernels (cuda_codegen.h, cuda_program.h); matmuls,
// convolutions and the ops lowering does not generate run as extern steps on eager CUDA (cuBLAS,
// cuDNN, tc's own kernels) inside the compiled graph. A graph that lowering, code generation or
// NVRTC refuses, or whose kernel the driver will not launch, runs on the eager backend after one
// warning naming the reason (under fullgraph a compile failure raises). Functions kept in the
// graph (allow_in_graph) are not supported nodes: the partitioner runs them on eager.
#pragma once
#include "lower/loop_ir.h"
#include "tc/backends.h"

namespace tc::backends {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool supports(const capture::Node& n) const override;
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override;
};

// The CUDA device index every tensor of the graph is on, or -1 when some tensor is elsewhere (or
// they are on several devices, or there is no tensor).
int cuda_device_of(const capture::Graph& g);

// How the cuda backend lowers a graph: linear chains as cuBLASLt calls with epilogues
// (cuda_fuse.h, library externals), index checks as eager CUDA externs; External nodes other than
// those calls are refused (NotImplementedError) by lowering. AOT packages (aot/compile.cpp) lower
// with it too, so that they hold what tc.compile runs.
lower::LoweredGraph lower_for_cuda(const capture::Graph& g);

}  // namespace tc::backends
