// The backend registry: one explicit list, no static constructors.
#include <memory>

#include "eager/eager.h"
#include "lower/loopir_backend.h"
#include "tc/error.h"

namespace tc::backends {
namespace {

struct Entry {
  const char* name;
  const Backend* backend;
};

const std::vector<Entry>& registry() {
  static const EagerBackend eager;
  static const LoopIRBackend loopir;  // debug: lowering + the loop-IR interpreter
  // "tc", "cpu" and "cuda" are the code generators' names; until they land they run the graph
  // on the reference backend so that every backend name already gives correct results.
  static const std::vector<Entry> list = {
      {"eager", &eager}, {"tc", &eager}, {"inductor", &eager}, {"cpu", &eager}, {"cuda", &eager},
      {"loopir", &loopir}};
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
