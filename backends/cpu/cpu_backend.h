// The "cpu" backend: lowers a captured graph to the loop IR and runs it as LLVM-generated kernels
// (compile.h); what lowering does not generate (external functions, ops without a lowering) runs
// as extern steps on eager kernels inside the compiled graph, counted as fallback nodes. A graph
// that lowering or LLVM refuses runs on the eager backend instead, after one warning naming the
// reason (the op), or raises under fullgraph.
#pragma once
#include "tc/backends.h"

namespace tc::backends {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(const capture::Node&) const override { return true; }
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override;
};

// Whether every tensor a node makes (or every tensor of the graph) is on the CPU.
bool on_cpu(const capture::Node& n);
bool all_on_cpu(const capture::Graph& g);

}  // namespace tc::backends
