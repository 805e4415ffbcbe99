// linear + activation + residual chains as one cuBLASLt call (cuda_fuse.h).
#include "cuda_fuse.h"

#include <cstdlib>

#include "cuda_library_calls.h"
#include "lower/lower_internal.h"

namespace tc::backends::cuda {
namespace {

using capture::Graph;
using capture::Node;
using capture::NodeArg;
using capture::NodeKind;
using capture::Ref;
using tc::cuda::Act;

bool float_dtype(DType d) { return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16; }

bool is_ref(const NodeArg& a) { return a.kind == NodeArg::Kind::Ref && a.refs[0].elem < 0 && a.refs[0].out == 0; }

}  // namespace

Graph fuse_library_epilogues(const Graph& g, int* fused) {
  static const bool off = [] {
    const char* e = std::getenv("TC_CUDA_EPILOGUES");
    return e && *e == '0';
  }();
  *fused = 0;
  if (off || !g.dynamic_dims.empty()) return g;
  const int n = (int)g.nodes.size();
  std::vector<int> uses(n, 0);
  for (const Node& node : g.nodes)
    for (const NodeArg& a : node.args)
      for (Ref r : a.refs) uses[r.node]++;
  for (Ref r : g.outputs) uses[r.node] += 2;  // a graph output is never absorbed
  auto sole_user = [&](int producer) -> int {  // the one later node reading `producer`, or -1
    if (uses[producer] != 1) return -1;
    for (int j = producer + 1; j < n; j++)
      for (const NodeArg& a : g.nodes[j].args)
        for (Ref r : a.refs)
          if (r.node == producer) return j;
    return -1;
  };
  Graph out = g;
  for (int i = 0; i < n; i++) {
    const Node& lin = g.nodes[i];
    if (lin.kind != NodeKind::Op || lin.op != Op::linear || lin.args.size() != 3 || !is_ref(lin.args[0]) ||
        !is_ref(lin.args[1]) || lin.fakes.size() != 1)
      continue;
    const Tensor& x = g.fake(lin.args[0].refs[0]);
    const Tensor& w = g.fake(lin.args[1].refs[0]);
    const Tensor& y = lin.fakes[0].tensor();
    const bool bias = lin.args[2].kind != NodeArg::Kind::Const;
    if (bias && !is_ref(lin.args[2])) continue;
    if (x.dim() < 2 || w.dim() != 2 || !float_dtype(y.dtype()) || x.dtype() != y.dtype() || w.dtype() != y.dtype() ||
        (bias && (g.fake(lin.args[2].refs[0]).dtype() != y.dtype() || g.fake(lin.args[2].refs[0]).dim() != 1)))
      continue;
    bool tiny = true;  // lowering generates these (lower::LowerOptions::tiny_matmul)
    for (int64_t s : x.sizes()) tiny = tiny && s <= 16;
    for (int64_t s : w.sizes()) tiny = tiny && s <= 16;
    if (tiny) continue;
    std::vector<int> chain = {i};
    Act act = Act::None;
    int j = sole_user(i);
    if (j >= 0 && g.nodes[j].kind == NodeKind::Op) {
      const Node& a = g.nodes[j];
      if (a.op == Op::relu) act = Act::Relu;
      if (a.op == Op::gelu && a.args.size() == 2 && a.args[1].kind == NodeArg::Kind::Const &&
          a.args[1].constant.is_string() && a.args[1].constant.str() == "tanh")
        act = Act::GeluTanh;
      if (act != Act::None) chain.push_back(j);
    }
    int residual_arg = -1;
    j = sole_user(chain.back());
    if (act == Act::None && j >= 0 && g.nodes[j].kind == NodeKind::Op && g.nodes[j].op == Op::add) {
      const Node& a = g.nodes[j];
      if (a.args.size() == 3 && is_ref(a.args[0]) && is_ref(a.args[1]) && a.args[2].kind == NodeArg::Kind::Const &&
          a.args[2].constant.to_double() == 1) {
        const int other = a.args[0].refs[0].node == chain.back() ? 1 : 0;
        const Tensor& r = g.fake(a.args[other].refs[0]);
        if (a.args[1 - other].refs[0].node == chain.back() && a.args[other].refs[0].node != chain.back() &&
            r.sizes() == y.sizes() && r.dtype() == y.dtype() && a.fakes[0].tensor().sizes() == y.sizes()) {
          residual_arg = other;
          chain.push_back(j);
        }
      }
    }
    if (chain.size() == 1 && !bias) continue;  // a plain product: lowering's extern already is one call
    const int last = chain.back();
    // The call reads x, w, b where the chain ends: nothing in between may write memory.
    bool writes = false;
    for (int k = i + 1; k < last; k++) {
      const Node& m = g.nodes[k];
      writes |= m.kind == NodeKind::External;
      if (m.kind == NodeKind::Op)
        for (const auto& a : schema(m.op).args) writes |= a.mutated;
    }
    if (writes) continue;
    Node call;
    call.kind = NodeKind::External;
    call.ext = linear_act_call(act, bias, residual_arg >= 0);
    call.args = {lin.args[0], lin.args[1]};
    if (bias) call.args.push_back(lin.args[2]);
    if (residual_arg >= 0) call.args.push_back(g.nodes[last].args[residual_arg]);
    call.fakes = g.nodes[last].fakes;
    call.name = g.nodes[last].name;
    call.line = g.nodes[last].line;
    call.file = g.nodes[last].file;
    for (size_t c = 0; c + 1 < chain.size(); c++) {  // absorbed: an unread lazy zeros of its shape
      Node& dead = out.nodes[chain[c]];
      const Tensor& f = g.nodes[chain[c]].fakes[0].tensor();
      Stack args = bind(Op::zeros, {Value(IntList(f.sizes().begin(), f.sizes().end()))},
                        {{"dtype", Value(f.dtype())}, {"device", Value(f.device())}});
      dead.kind = NodeKind::Op;
      dead.op = Op::zeros;
      dead.ext = nullptr;
      dead.args.clear();
      for (const Value& v : args) dead.args.push_back(NodeArg::constant_of(v));
      dead.fakes = lower::fake_call(Op::zeros, args);
    }
    out.nodes[last] = std::move(call);
    (*fused)++;
  }
  return out;
}

}  // namespace tc::backends::cuda
