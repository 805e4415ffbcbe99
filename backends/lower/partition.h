// The partitioner: cuts a captured graph into maximal runs of consecutive op nodes that a backend
// supports and runs that it does not, each run a graph of its own with its own inputs and outputs.
//
//   std::vector<Partition> parts = partition(g, [&](const Node& n) { return cpu.supports(n); });
//   for (const Partition& p : parts)      // in order: running them in order runs g
//     (p.supported ? cpu : eager).compile(p.graph, opts);
//
// Runs keep the graph's node order (writes into inputs and views stay ordered as in eager). A
// run's inputs are the values it reads from outside (graph inputs, earlier runs' results); its
// outputs are the values later runs or the graph's outputs read. A write the backend does not
// support (copy_ into x[i]) takes the views that make its target with it to eager: a backend may
// return a view's result as a new buffer, and the write must reach the tensor itself.
#pragma once
#include <functional>
#include <vector>

#include "tc/capture/graph.h"

namespace tc::lower {

struct Partition {
  bool supported = false;
  capture::Graph graph;               // the run's nodes after one Input node per value it reads
  std::vector<capture::Ref> inputs;   // per graph.inputs: the value of the whole graph it reads
  std::vector<capture::Ref> outputs;  // per graph.outputs: the value of the whole graph it makes
  std::vector<int> nodes;             // the run's node indices in the whole graph
};

std::vector<Partition> partition(const capture::Graph& g,
                                 const std::function<bool(const capture::Node&)>& supported);

}  // namespace tc::lower
