// dynamic = true marks every dim (of size >= 2) of every input tensor dynamic. Some of them are
// tied by an op to a fixed size: the feature dim of a Linear's input must equal its weight's.
// torch specializes such a dim (a guard on its size); without that the lowering, which fits each
// size of the graph as a polynomial of the dynamic dims, refuses the whole graph and it runs op by
// op. Here each dynamic dim is tried alone at another size through the graph's meta rules; a dim
// some rule refuses becomes static again, in the graph and in its input's guard. Static is always
// safe (a different size misses the guard and retraces).
#include "tied_dims.h"

#include "tc/autograd.h"
#include "tc/error.h"

namespace tc::capture {
namespace {

// The node whose meta rule refuses input `input`'s dim `dim` at another size, every dynamic dim of
// the same size changing with it (they share a size symbol in lowering: duck sizing); -1 when every
// rule accepts it (or it is not tried).
int refusing_node(const Graph& g, int input, int dim) {
  const int64_t size = g.nodes[size_t(g.inputs[size_t(input)])].fakes[0].tensor().sizes()[size_t(dim)];
  auto varies = [&](int j, int d) {
    if (j == input && d == dim) return true;
    for (auto [i, dd] : g.dynamic_dims)
      if (i == j && dd == d && g.nodes[size_t(g.inputs[size_t(j)])].fakes[0].tensor().sizes()[size_t(d)] == size)
        return true;
    return false;
  };
  std::vector<Stack> vals(g.nodes.size());
  for (size_t j = 0; j < g.inputs.size(); j++) {
    const Tensor& t = g.nodes[size_t(g.inputs[j])].fakes[0].tensor();
    Shape sizes = t.sizes();
    for (int d = 0; d < int(t.dim()); d++)
      if (varies(int(j), d)) {
        if (!t.is_contiguous()) return -1;  // not tried: the lowering decides
        sizes[size_t(d)] += 3;
      }
    vals[size_t(g.inputs[j])] = {Value(Tensor::fake(sizes, contiguous_strides(sizes), t.dtype(), t.device()))};
  }
  auto tensor = [&](Ref r) -> const Tensor& {
    const Value& v = vals[size_t(r.node)][size_t(r.out)];
    return r.elem >= 0 ? v.tensors()[size_t(r.elem)] : v.tensor();
  };
  GradModeGuard no_grad(false);
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) continue;
    if (n.kind != NodeKind::Op) return -1;  // an external function: not tried
    Stack args;
    bool tensors = false;
    for (const NodeArg& a : n.args) {
      if (a.kind == NodeArg::Kind::Const) {
        args.push_back(a.constant);
      } else if (a.kind == NodeArg::Kind::Ref) {
        args.push_back(Value(tensor(a.refs[0])));
        tensors = true;
      } else {
        TensorList l;
        for (Ref r : a.refs) l.push_back(tensor(r));
        args.push_back(Value(l));
        tensors = true;
      }
    }
    try {
      vals[i] = tensors ? call(n.op, args) : n.fakes;  // fake inputs: the meta rule only
    } catch (const Error&) {
      return int(i);
    }
  }
  return -1;
}

}  // namespace

void check_marked_dims(const Entry& e, const std::vector<std::pair<int, int>>& marked,
                       const std::vector<std::string>& names) {
  const Graph& g = e.graph;
  for (size_t k = 0; k < marked.size(); k++) {
    auto [input, dim] = marked[k];
    const int n = refusing_node(g, input, dim);
    if (n < 0) continue;
    const Node& node = g.nodes[size_t(n)];
    const int64_t size = g.nodes[size_t(g.inputs[size_t(input)])].fakes[0].tensor().sizes()[size_t(dim)];
    std::string at = node.line >= 0 ? (node.file.empty() ? "" : node.file + ":") + std::to_string(node.line) : "the graph";
    TC_FAIL(CompileError,
            "%s: tc.compiler.mark_dynamic made dim %d of %s dynamic, but %s at %s needs it to be %lld (the trace "
            "would specialize it); remove the mark, or change that line so the size may vary",
            at.c_str(), dim + 1, names[k].c_str(), node.target(), at.c_str(), (long long)size);
  }
}

void specialize_tied_dims(Entry& e) {
  Graph& g = e.graph;
  for (size_t k = 0; k < g.dynamic_dims.size();) {
    auto [input, dim] = g.dynamic_dims[k];
    if (refusing_node(g, input, dim) < 0) {
      k++;
      continue;
    }
    g.dynamic_dims.erase(g.dynamic_dims.begin() + long(k));
    for (Guard& guard : e.guards.guards)
      if (guard.kind == GuardKind::Tensor && guard.src == e.input_sources[size_t(input)]) {
        guard.tensor.dynamic &= ~(uint64_t(1) << dim);
        guard.expected = tensor_spec_string(guard.tensor);
      }
  }
}

}  // namespace tc::capture
