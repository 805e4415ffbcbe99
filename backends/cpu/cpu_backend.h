// The "cpu" backend: lowers a captured graph to the loop IR and runs it as LLVM-generated kernels
// (compile.h); a graph that lowering or LLVM cannot handle runs on the eager backend instead,
// after one warning naming the reason (the op).
#pragma once
#include "tc/backends.h"

namespace tc::backends {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(const capture::Node&) const override { return true; }  // anything else falls back
  capture::CompiledGraph compile(const capture::Graph& g, const CompileOptions& o) const override;
};

// Whether every tensor of the graph (inputs and every node's outputs) is on the CPU.
bool all_on_cpu(const capture::Graph& g);

}  // namespace tc::backends
