// tc backends: what turns a captured graph into something that runs.
//
//   #include <tc/backends.h>
//   const tc::backends::Backend& b = tc::backends::find("eager");
//   tc::capture::CompiledGraph run = b.compile(graph, {});
//   std::vector<tc::Tensor> outs = run(inputs);          // inputs in graph.inputs order
//
// Each backend is one folder behind this interface, listed in one explicit registry
// (backends/registry.cpp). Backends never see a lua_State: a graph arrives as plain C++ data.
#pragma once
#include <string>
#include <vector>

#include "tc/capture/graph.h"

namespace tc::backends {

struct CompileOptions {
  std::string mode = "default";  // default | reduce-overhead | max-autotune
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Capabilities as data: whether this backend can run the node.
  virtual bool supports(const capture::Node& n) const = 0;
  virtual capture::CompiledGraph compile(const capture::Graph& g,
                                         const CompileOptions& o) const = 0;
};

// The registry: every backend by name ("eager"; "tc", "cpu" and "cuda" run on eager until their
// code generators land). Throws tc::Error (ValueError) naming the known backends otherwise.
const Backend& find(const std::string& name);
std::vector<std::string> names();

// The capture::GraphCompiler that tcrun installs into capture: find(name).compile(g, {}).
capture::CompiledGraph compile_graph(const capture::Graph& g, const std::string& backend);

}  // namespace tc::backends
