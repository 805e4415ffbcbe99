// The "cpu" backend: lowers a captured graph to the loop IR and runs it as LLVM-generated kernels
// (compile.h). External functions are not supported (the partitioner runs them on eager); a graph
// that lowering or LLVM cannot handle runs on the eager backend instead, after one warning naming
// the reason (the op), or raises under fullgraph.
#pragma once
#include "tc/backends.h"

namespace tc::backends {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(const capture::Node& n) const override;
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override;
};

// Whether every tensor a node makes (or every tensor of the graph) is on the CPU.
bool on_cpu(const capture::Node& n);
bool all_on_cpu(const capture::Graph& g);

}  // namespace tc::backends
