// tc backends: what turns a captured graph into something that runs.
//
//   #include <tc/backends.h>
//   const tc::backends::Backend& b = tc::backends::find("eager");
//   tc::backends::Compiled c = b.compile(graph, {});
//   std::vector<tc::Tensor> outs = c.run(tc::capture::borrow(inputs));  // graph.inputs order
//   printf("%d kernels, %.1f ms in LLVM\n", c.report.kernels, c.report.compile_ms);
//
//   // what capture calls: nodes b.supports() go to b, the rest to eager (partitioned.cpp)
//   tc::backends::Compiled d = tc::backends::compile_graph(graph, "cpu", {.mode = "default"});
//
// Each backend is one folder behind this interface, listed in one explicit registry
// (backends/registry.cpp), which is also the only list of backend and mode names: tcrun, capture
// and the Lua side ask it. Backends never see a lua_State: a graph arrives as plain C++ data and
// the report goes back as plain data (capture prints it; a backend never logs by itself).
#pragma once
#include <string>
#include <vector>

#include "tc/capture/graph.h"

namespace tc::backends {

// tc.compile's options, whole (mode, fullgraph, dynamic, the backend's `options = {...}`).
using CompileOptions = capture::CompileOptions;
// What the backend fills per compile: lower/codegen/compile times, kernel counts, fallbacks.
using CompileReport = capture::CompileReport;
// The compiled graph and its report.
using Compiled = capture::Compiled;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Capabilities as data: whether this backend can run the node. Nodes it cannot run are cut out
  // by the partitioner (lower/partition.h) and run on eager, one perf hint each.
  virtual bool supports(const capture::Node& n) const = 0;
  // The keys tc.compile's `options = {...}` may use with this backend (others are an error at the
  // user's line).
  virtual std::vector<std::string> option_names() const { return {}; }
  // Compiles a graph whose every op node supports() accepted.
  virtual Compiled compile(const capture::Graph& g, const CompileOptions& o) const = 0;
};

// The registry: every backend by name ("eager"; "cpu" the LLVM code generator; "cuda" the NVRTC
// code generator; "tc" cpu for CPU graphs, cuda for graphs on one CUDA device, eager otherwise;
// "inductor" = "tc"; "loopir" the loop-IR interpreter). Throws tc::Error (ValueError) naming the known ones otherwise.
const Backend& find(const std::string& name);
std::vector<std::string> names();
// The modes tc.compile and tcrun --mode accept ("default", "reduce-overhead", ...).
const std::vector<std::string>& modes();

// Compiles `g` with the named backend: whole when it supports every node, else by partitions
// (the unsupported runs on eager; report.fallback_nodes counts their nodes).
Compiled compile_graph(const capture::Graph& g, const std::string& backend,
                       const CompileOptions& o = {});
// compile_graph and the registry's lists, as capture::install takes them.
capture::GraphCompiler graph_compiler();

}  // namespace tc::backends
