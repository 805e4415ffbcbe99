// The backend registry: one explicit list, no static constructors.
#include <memory>

#include "cpu/cpu_backend.h"
#include "eager/eager.h"
#include "lower/loopir_backend.h"
#include "tc/error.h"

namespace tc::backends {
namespace {

// "tc": the code generator of the graph's device: cpu for graphs whose tensors are all on the CPU,
// eager otherwise (until the CUDA code generator lands).
class TcBackend final : public Backend {
 public:
  TcBackend(const Backend& cpu, const Backend& other) : cpu_(cpu), other_(other) {}
  const char* name() const override { return "tc"; }
  bool supports(const capture::Node&) const override { return true; }
  capture::CompiledGraph compile(const capture::Graph& g, const CompileOptions& o) const override {
    return (all_on_cpu(g) ? cpu_ : other_).compile(g, o);
  }

 private:
  const Backend& cpu_;
  const Backend& other_;
};

struct Entry {
  const char* name;
  const Backend* backend;
};

const std::vector<Entry>& registry() {
  static const EagerBackend eager;
  static const LoopIRBackend loopir;  // debug: lowering + the loop-IR interpreter
  static const CpuBackend cpu;
  static const TcBackend tc(cpu, eager);
  // "inductor" and "cuda" run the graph on the reference backend until the CUDA code generator
  // lands, so that every backend name already gives correct results.
  static const std::vector<Entry> list = {
      {"eager", &eager}, {"tc", &tc},       {"inductor", &eager}, {"cpu", &cpu},
      {"cuda", &eager},  {"loopir", &loopir}};
  return list;
}

}  // namespace

const Backend& find(const std::string& name) {
  for (const Entry& e : registry())
    if (name == e.name) return *e.backend;
  std::string known;
  for (const Entry& e : registry()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  TC_FAIL(ValueError, "unknown backend \"%s\" (backends: %s)", name.c_str(), known.c_str());
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const Entry& e : registry()) out.push_back(e.name);
  return out;
}

capture::CompiledGraph compile_graph(const capture::Graph& g, const std::string& backend) {
  return find(backend).compile(g, {});
}

}  // namespace tc::backends
