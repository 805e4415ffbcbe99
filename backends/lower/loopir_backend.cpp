// The "loopir" debug backend (see loopir_backend.h).
#include "loopir_backend.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "eager/eager.h"
#include "lower.h"
#include "tc/config.h"

namespace tc::backends {

Compiled LoopIRBackend::compile(const capture::Graph& g, const CompileOptions& o) const {
  std::shared_ptr<const lower::LoweredGraph> lg;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    lower::LowerOptions lo;
    lo.externals = true;
    lg = std::make_shared<lower::LoweredGraph>(lower::lower(g, lo));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotImplementedError && e.kind() != ErrorKind::CompileError) throw;
    if (tc::debug_level() >= 1) std::fprintf(stderr, "[tc] loopir: graph runs on eager: %s\n", e.what());
    Compiled c = EagerBackend().compile(g, o);
    c.report.fallback_nodes = g.num_ops();
    c.report.perf_hints.push_back(std::string("loopir: the graph runs on eager: ") + e.what());
    return c;
  }
  Compiled c;
  c.report.lower_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  c.report.distinct_kernels = int(lg->kernels.size());
  for (const lower::Step& s : lg->steps) {
    if (s.kind == lower::Step::Kind::Launch) c.report.kernels++;
    if (s.kind == lower::Step::Kind::Extern && s.ext.fallback) c.report.fallback_nodes++;
  }
  for (const std::string& h : lg->perf_hints) c.report.perf_hints.push_back("loopir: " + h);
  c.run = [lg](capture::GraphInputs inputs) {
    std::vector<Tensor> in;
    in.reserve(inputs.size());
    for (const Tensor* t : inputs) in.push_back(*t);
    return lower::run(*lg, in);
  };
  return c;
}

}  // namespace tc::backends
