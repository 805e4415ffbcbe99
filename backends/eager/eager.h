// The eager backend: runs a graph op by op through tc::call (the stdlib kernels): the reference.
#pragma once
#include "tc/backends.h"

namespace tc::backends {

class EagerBackend final : public Backend {
 public:
  const char* name() const override { return "eager"; }
  bool supports(const capture::Node&) const override { return true; }
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override;
};

}  // namespace tc::backends
