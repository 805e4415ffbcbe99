// tc.aot.compile's C++ side: an exported graph to a package file (docs/aot.md).
#pragma once
#include <string>
#include <vector>

#include "plan.h"
#include "tc/capture/graph.h"

namespace tc::aot {

// What tc.export decided about the graph's inputs: per graph input, a user input or a named
// constant (parameter / buffer), and the constants' values (packaged when asked).
struct ExportSpec {
  std::vector<GraphInput> graph_inputs;  // per Graph::inputs entry
  std::vector<std::string> input_names, constant_names;
  // The example inputs' specs: an input the graph never reads is described by these.
  std::vector<TensorSpec> input_specs;
  std::vector<Tensor> constant_values;  // per constant (only read with package_constants)
  std::string code;                     // the listing for the manifest ("": the graph's own)
};

struct AotOptions {
  std::string path;
  std::string device = "cpu";  // "cpu" or "cuda"
  int arch = 0;  // cuda: sm_<arch> (90: sm_90); 0: device 0's, or 90 without a GPU
  bool package_constants = false;
};

struct AotReport {
  double lower_ms = 0, codegen_ms = 0, compile_ms = 0, write_ms = 0;
  int kernels = 0, distinct_kernels = 0, externs = 0;
  size_t bytes = 0;
};

// Lowers `g`, compiles every kernel into the package's object code (CPU) and writes the package
// atomically. Throws tc::Error: NotImplementedError for graphs a package cannot hold (functions
// kept in the graph, ops lowering refuses), ValueError for bad options, DeviceError for tensors
// on another device than `device`.
AotReport compile_package(const capture::Graph& g, const ExportSpec& spec, const AotOptions& o);

}  // namespace tc::aot
