// The "cpu" backend (cpu_backend.h): lower, generate, and fall back to eager on failure.
#include "cpu_backend.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

#include "compile.h"
#include "eager/eager.h"
#include "lower/lower.h"
#include "tc/error.h"

namespace tc::backends {

bool all_on_cpu(const capture::Graph& g) {
  for (const capture::Node& n : g.nodes)
    for (const Value& v : n.fakes) {
      if (v.is_tensor() && !v.tensor().device().is_cpu()) return false;
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors())
          if (!t.device().is_cpu()) return false;
    }
  return true;
}

capture::CompiledGraph CpuBackend::compile(const capture::Graph& g, const CompileOptions& o) const {
  auto t0 = std::chrono::steady_clock::now();
  double lower_s = 0;
  try {
    TC_CHECK(all_on_cpu(g), DeviceError, "the graph has tensors on another device than the CPU");
    lower::LoweredGraph lg = lower::lower(g);
    lower_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto program = std::make_shared<const cpu::Program>(cpu::compile_lowered(lg));
    cpu::count_graph(false, lower_s);
    return [program](capture::GraphInputs inputs) { return program->run(inputs); };
  } catch (const std::exception& e) {  // tc::Error, and anything else a bug in lowering throws
    cpu::count_graph(true, lower_s);
    // One warning per distinct reason: 64 identical layers falling back say it once.
    static std::mutex mu;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mu);
    if (said.insert(e.what()).second)
      std::fprintf(stderr, "tc: cpu backend: running a graph on the eager backend: %s\n", e.what());
  }
  return EagerBackend().compile(g, o);
}

}  // namespace tc::backends
