// The "loopir" debug backend (see loopir_backend.h).
#include "loopir_backend.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "eager/eager.h"
#include "lower.h"

namespace tc::backends {

capture::CompiledGraph LoopIRBackend::compile(const capture::Graph& g, const CompileOptions& o) const {
  std::shared_ptr<const lower::LoweredGraph> lg;
  try {
    lower::LowerOptions lo;
    lo.externals = true;
    lg = std::make_shared<lower::LoweredGraph>(lower::lower(g, lo));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotImplementedError && e.kind() != ErrorKind::CompileError) throw;
    const char* d = std::getenv("TC_DEBUG");
    if (d && std::atoi(d) >= 1) std::fprintf(stderr, "[tc] loopir: graph runs on eager: %s\n", e.what());
    return EagerBackend().compile(g, o);
  }
  return [lg](capture::GraphInputs inputs) {
    std::vector<Tensor> in;
    in.reserve(inputs.size());
    for (const Tensor* t : inputs) in.push_back(*t);
    return lower::run(*lg, in);
  };
}

}  // namespace tc::backends
