// The partitioner (partition.h): one walk over the nodes makes the runs, one per run makes its graph.
#include "partition.h"

#include <algorithm>

namespace tc::lower {
namespace {

using capture::Graph;
using capture::Node;
using capture::NodeKind;
using capture::Ref;

template <class F>
void for_each_ref(const Node& n, F&& f) {
  for (const capture::NodeArg& a : n.args)
    for (const Ref& r : a.refs) f(r);
}

// The dims of an intermediate value that must stay symbolic: where the whole graph has dynamic
// dims, every dim whose example size equals a dynamic dim's example size (the same size is taken
// to be the same symbol, as PyTorch's duck sizing does), so a backend never specializes a size that
// the graph's guards let vary.
std::vector<int> dynamic_dims_of(const Graph& g, Ref r) {
  std::vector<int> out;
  for (int i = 0; i < int(g.inputs.size()); i++)
    if (g.inputs[i] == r.node)
      for (auto [input, dim] : g.dynamic_dims)
        if (input == i) out.push_back(dim);
  if (g.nodes[r.node].kind == NodeKind::Input) return out;
  const Tensor& t = g.fake(r);
  for (int d = 0; d < t.dim(); d++)
    for (auto [input, dim] : g.dynamic_dims)
      if (g.fake({g.inputs[input], 0, -1}).sizes()[dim] == t.sizes()[d]) {
        out.push_back(d);
        break;
      }
  return out;
}

Partition make_partition(const Graph& g, int first, int last, bool supported,
                         const std::vector<int>& last_use) {
  Partition p;
  p.supported = supported;
  std::vector<int> local(last - first + 1, -1);  // node index in p.graph of the run's nodes
  auto local_ref = [&](Ref r) -> Ref {
    if (r.node >= first && local[r.node - first] >= 0) return {local[r.node - first], r.out, r.elem};
    for (int i = 0; i < int(p.inputs.size()); i++)
      if (p.inputs[i] == r) return {p.graph.inputs[i], 0, -1};
    const Node& src = g.nodes[r.node];
    Ref in = p.graph.add_input(g.ref_name(r), src.kind == NodeKind::Input ? src.source : "", g.fake(r));
    for (int d : dynamic_dims_of(g, r)) p.graph.dynamic_dims.push_back({int(p.inputs.size()), d});
    p.inputs.push_back(r);
    return in;
  };
  for (int i = first; i <= last; i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) continue;
    Node copy = n;
    for (capture::NodeArg& a : copy.args)
      for (Ref& r : a.refs) r = local_ref(r);
    p.graph.names[copy.name]++;
    p.graph.nodes.push_back(std::move(copy));
    local[i - first] = int(p.graph.nodes.size()) - 1;
    p.nodes.push_back(i);
  }
  // outputs: the graph's outputs the run makes (in the graph's order), then the values of the
  // run that later nodes read
  auto add_output = [&](Ref r) {
    if (std::ranges::find(p.outputs, r) != p.outputs.end()) return;
    p.outputs.push_back(r);
    p.graph.outputs.push_back(local_ref(r));
  };
  for (Ref r : g.outputs)
    if (r.node >= first && r.node <= last && g.nodes[r.node].kind != NodeKind::Input) add_output(r);
  for (int i : p.nodes) {
    if (last_use[i] <= last) continue;
    const Node& n = g.nodes[i];
    for (int o = 0; o < int(n.fakes.size()); o++) {
      if (!n.fakes[o].is_tensor_list()) {
        add_output({i, o, -1});
        continue;
      }
      for (int e = 0; e < int(n.fakes[o].tensors().size()); e++) add_output({i, o, e});
    }
  }
  return p;
}

// Which op nodes go to the backend. A write that runs on eager (copy_ into x[i]) must write into
// the tensor itself and be seen through every view of it: the views of the written tensor's base
// run on eager too, since a backend may give a view's result as a new buffer (the write would be
// lost, or a view taken before it would not see it).
std::vector<char> backend_nodes(const Graph& g, const std::function<bool(const Node&)>& supported) {
  const int n = int(g.nodes.size());
  auto is_view = [&](int i) {
    const Node& x = g.nodes[i];
    return x.kind == NodeKind::Op && schema(x.op).kind == OpKind::View && !x.args.empty() &&
           x.args[0].kind == capture::NodeArg::Kind::Ref;
  };
  std::vector<int> base(n);  // the node whose tensor a view's chain starts from (itself if none)
  for (int i = 0; i < n; i++) base[i] = is_view(i) ? base[g.nodes[i].args[0].refs[0].node] : i;
  std::vector<char> written(n, 0);  // bases written by a node that runs on eager
  std::vector<char> on(n, 0);
  for (int i = 0; i < n; i++) {
    const Node& x = g.nodes[i];
    on[i] = x.kind != NodeKind::Input && supported(x);
    if (x.kind != NodeKind::Op || on[i]) continue;
    const std::vector<ArgSpec>& specs = schema(x.op).args;
    for (size_t a = 0; a < x.args.size() && a < specs.size(); a++)
      if (specs[a].mutated && x.args[a].kind != capture::NodeArg::Kind::Const)
        for (const Ref& r : x.args[a].refs) written[base[r.node]] = 1;  // Tensor[]!: each one
  }
  for (int i = 0; i < n; i++)
    if (is_view(i) && written[base[i]]) on[i] = 0;
  return on;
}

}  // namespace

std::vector<Partition> partition(const Graph& g,
                                 const std::function<bool(const Node&)>& supported) {
  // last_use[i]: the last node reading any value of node i
  std::vector<int> last_use(g.nodes.size(), -1);
  for (int i = 0; i < int(g.nodes.size()); i++)
    for_each_ref(g.nodes[i], [&](const Ref& r) { last_use[r.node] = std::max(last_use[r.node], i); });
  const std::vector<char> on = backend_nodes(g, supported);
  std::vector<Partition> out;
  int start = -1;
  bool run_supported = false;
  for (int i = 0; i <= int(g.nodes.size()); i++) {
    const bool end = i == int(g.nodes.size());
    if (!end && g.nodes[i].kind == NodeKind::Input) continue;
    const bool s = !end && on[i];
    if (start >= 0 && (end || s != run_supported)) {
      out.push_back(make_partition(g, start, i - 1, run_supported, last_use));
      start = -1;
    }
    if (!end && start < 0) start = i, run_supported = s;
  }
  return out;
}

}  // namespace tc::lower
