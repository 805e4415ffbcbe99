// 0-dim CPU tensors among the inputs of a GPU graph (a Lua number that became a graph input, an
// optimizer's learning rate, a 0-dim CPU tensor the user passes): PyTorch takes them next to CUDA
// tensors as scalars, but the CUDA code generator and CUDA graphs want every tensor on the
// device. compile_graph (registry.cpp) compiles such a graph with those inputs on its GPU and
// wraps the result:
//
//   HostScalars hs = host_scalar_inputs(g);   // none: compile g as it is
//   Compiled c = compile_partitioned(backend, eager, hs.graph, o);  (and with_cuda_graphs)
//   c = with_host_scalars(std::move(c), hs, cuda_graphs);
//
// Each call copies the inputs' values to the device before the run: into a fresh 0-dim device
// tensor per call, or, under CUDA graphs, into one device scalar per input kept with the compiled
// graph (a fixed address the recorded graph reads in place; the copy is ordered before the replay
// on the current stream, as the CUDA-graph wrapper's own static inputs are).
#pragma once
#include <vector>

#include "tc/backends.h"

namespace tc::backends {

struct HostScalars {
  std::vector<int> inputs;  // the 0-dim CPU inputs moved to the device (input indices); empty: none
  capture::Graph graph;     // the graph with those inputs on `device`
  Device device;
};

// The 0-dim CPU inputs of g when every other tensor of g is on one CUDA device and no op writes,
// returns or hands to a Lua function one of them; otherwise none (g runs as before: on eager).
HostScalars host_scalar_inputs(const capture::Graph& g);
// `c` (compiled from hs.graph) called with hs.inputs copied to the device; `fixed`: one device
// scalar per input, written before each call (CUDA graphs), else a new one per call.
Compiled with_host_scalars(Compiled c, const HostScalars& hs, bool fixed);

}  // namespace tc::backends
