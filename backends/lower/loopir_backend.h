// The "loopir" debug backend: lowers a graph and runs it on the loop-IR interpreter (slow), so
// every capture test exercises lowering end to end. Graphs lowering refuses run on eager.
#pragma once
#include "tc/backends.h"

namespace tc::backends {

class LoopIRBackend final : public Backend {
 public:
  const char* name() const override { return "loopir"; }
  bool supports(const capture::Node&) const override { return true; }
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override;
};

}  // namespace tc::backends
