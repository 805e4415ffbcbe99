// compile_partitioned (partitioned.h): the pieces of a partitioned graph, run in order over one
// table of values (the graph's inputs, then each piece's outputs).
#include "partitioned.h"

#include <algorithm>
#include <memory>

#include "lower/partition.h"

namespace tc::backends {
namespace {

struct Piece {
  capture::CompiledGraph run;
  std::vector<int> in, out;  // slots read and written
  std::vector<int> node;     // per node of the piece's graph: the whole graph's node (-1: an input)
};

struct Plan {
  int num_inputs = 0, num_slots = 0;
  std::vector<Piece> pieces;
  std::vector<int> outputs;  // slot of each graph output
};

std::string hint(const Backend& b, const capture::Node& n) {
  std::string s = b.supports(n) ? std::string(n.target()) + " is a view written by a node that runs on eager"
                                : "backend \"" + std::string(b.name()) + "\" does not support " + n.target();
  s += " (node " + n.name;
  if (n.line >= 0) s += ", line " + std::to_string(n.line);
  return s + "): it runs on eager";
}

}  // namespace

Compiled compile_partitioned(const Backend& b, const Backend& fallback, const capture::Graph& g,
                             const CompileOptions& o) {
  auto supported = [&](const capture::Node& n) { return b.supports(n); };
  const bool all = std::ranges::all_of(g.nodes, [&](const capture::Node& n) {
    return n.kind == capture::NodeKind::Input || supported(n);
  });
  if (all) return b.compile(g, o);

  Compiled c;
  auto plan = std::make_shared<Plan>();
  std::vector<capture::Ref> slots;  // the whole graph's value in each slot
  for (int node : g.inputs) slots.push_back({node, 0, -1});
  plan->num_inputs = int(slots.size());
  auto slot_of = [&](capture::Ref r) {
    auto it = std::ranges::find(slots, r);
    if (it != slots.end()) return int(it - slots.begin());
    slots.push_back(r);
    return int(slots.size()) - 1;
  };
  for (const lower::Partition& p : lower::partition(g, supported)) {
    Compiled piece = (p.supported ? b : fallback).compile(p.graph, o);
    c.report.add(piece.report);
    if (!p.supported) {
      c.report.fallback_nodes += int(p.nodes.size());
      for (int i : p.nodes) c.report.perf_hints.push_back(hint(b, g.nodes[i]));
    }
    Piece x{std::move(piece.run), {}, {}, {}};
    size_t k = 0;
    for (const capture::Node& n : p.graph.nodes)
      x.node.push_back(n.kind == capture::NodeKind::Input ? -1 : p.nodes[k++]);
    for (capture::Ref r : p.inputs) x.in.push_back(slot_of(r));
    for (capture::Ref r : p.outputs) x.out.push_back(slot_of(r));
    plan->pieces.push_back(std::move(x));
  }
  for (capture::Ref r : g.outputs) plan->outputs.push_back(slot_of(r));
  plan->num_slots = int(slots.size());
  c.run = [plan](capture::GraphInputs inputs) {
    std::vector<Tensor> made(plan->num_slots);  // values the pieces make (inputs: borrowed)
    std::vector<const Tensor*> at(plan->num_slots, nullptr);
    for (int i = 0; i < plan->num_inputs; i++) at[i] = inputs[i];
    std::vector<const Tensor*> args;
    for (const Piece& p : plan->pieces) {
      args.clear();
      for (int s : p.in) args.push_back(at[s]);
      std::vector<Tensor> outs;
      try {
        outs = p.run(args);
      } catch (const capture::NodeError& e) {  // a node of the piece: name it in the whole graph
        if (e.node < 0 || e.node >= int(p.node.size()) || p.node[e.node] < 0) throw;
        throw capture::NodeError(e, p.node[e.node]);
      }
      for (size_t k = 0; k < p.out.size(); k++) {
        made[p.out[k]] = std::move(outs[k]);
        at[p.out[k]] = &made[p.out[k]];
      }
    }
    std::vector<Tensor> out;
    out.reserve(plan->outputs.size());
    for (int s : plan->outputs) out.push_back(*at[s]);
    return out;
  };
  return c;
}

}  // namespace tc::backends
