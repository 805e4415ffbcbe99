// Library calls with what follows them folded in (cuda_fuse.h): linear + activation + residual
// chains as one cuBLASLt call, attention + head merge as one fused-attention call.
#include "cuda_fuse.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

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

// Whether a node strictly between `first` and `last` may write memory (a call placed at `last`
// must read what `first` would have read).
bool writes_between(const Graph& g, int first, int last) {
  bool writes = false;
  for (int k = first + 1; k < last; k++) {
    const Node& m = g.nodes[k];
    writes |= m.kind == NodeKind::External;
    if (m.kind == NodeKind::Op)
      for (const auto& a : schema(m.op).args) writes |= a.mutated;
  }
  return writes;
}

// An absorbed node: an unread lazy zeros of its shape (node indices stay as they were).
void absorb(Graph& out, const Graph& g, int n) {
  Node& dead = out.nodes[n];
  const Tensor& f = g.nodes[n].fakes[0].tensor();
  Stack args = bind(Op::zeros, {Value(IntList(f.sizes().begin(), f.sizes().end()))},
                    {{"dtype", Value(f.dtype())}, {"device", Value(f.device())}});
  dead.kind = NodeKind::Op;
  dead.op = Op::zeros;
  dead.ext = nullptr;
  dead.args.clear();
  for (const Value& v : args) dead.args.push_back(NodeArg::constant_of(v));
  dead.fakes = lower::fake_call(Op::zeros, args);
}

// The call replacing chain's last node (its fakes, name and line).
Node call_at(const Node& last, std::shared_ptr<const capture::ExternalFn> fn, std::vector<NodeArg> args) {
  Node call;
  call.kind = NodeKind::External;
  call.ext = std::move(fn);
  call.args = std::move(args);
  call.fakes = last.fakes;
  call.name = last.name;
  call.line = last.line;
  call.file = last.file;
  return call;
}

// sdpa(q, k, v) [B, H, L, E] -> transpose(1, 2) -> reshape / view [B, L, H * E] (the head merge
// before GPT-2's c_proj, a copy kernel) as one call writing the merged layout. The chain's nodes
// (0, 1, 2 in `chain`) as found by `sole_user`; false when the pattern does not match.
bool merged_heads_chain(const Graph& g, int i, const std::function<int(int)>& sole_user, std::vector<int>* chain) {
  const Node& at = g.nodes[i];
  if (at.kind != NodeKind::Op || at.op != Op::scaled_dot_product_attention || at.args.size() != 7 || at.fakes.size() != 1)
    return false;
  for (int a = 0; a < 3; a++)
    if (!is_ref(at.args[a])) return false;
  Stack args;
  for (int a = 0; a < 7; a++) args.push_back(a < 3 ? Value(g.fake(at.args[a].refs[0])) : at.args[a].constant);
  if (at.args[3].kind != NodeArg::Kind::Const || !lower::attention_is_library_call(args, DeviceType::CUDA)) return false;
  const Tensor& y = at.fakes[0].tensor();
  if (y.dim() != 4) return false;
  const int t = sole_user(i);
  if (t < 0 || g.nodes[t].kind != NodeKind::Op || g.nodes[t].op != Op::transpose) return false;
  const Node& tr = g.nodes[t];
  if (tr.args.size() != 3 || tr.args[1].kind != NodeArg::Kind::Const || tr.args[2].kind != NodeArg::Kind::Const) return false;
  const int64_t d0 = wrap_dim(tr.args[1].constant.to_int(), 4), d1 = wrap_dim(tr.args[2].constant.to_int(), 4);
  if (std::min(d0, d1) != 1 || std::max(d0, d1) != 2) return false;
  const int r = sole_user(t);
  if (r < 0 || g.nodes[r].kind != NodeKind::Op || (g.nodes[r].op != Op::reshape && g.nodes[r].op != Op::view)) return false;
  const Shape merged = {y.sizes()[0], y.sizes()[2], y.sizes()[1] * y.sizes()[3]};
  if (g.nodes[r].fakes.size() != 1 || g.nodes[r].fakes[0].tensor().sizes() != merged) return false;
  if (writes_between(g, i, r)) return false;
  *chain = {i, t, r};
  return true;
}

// cat(pieces, dim 2) [N, C, H, W] float32 -> batch_norm(eval, with weight, bias and running
// statistics) -> relu, the concatenation and the normalization read by nothing else: DenseNet's
// layers, transitions and final norm. The chain's nodes (cat, batch_norm, relu) in `chain`.
// Concatenations of at most 4 pieces are left to lowering, whose kernels read such a cat lazily.
bool cat_norm_relu_chain(const Graph& g, int i, const std::function<int(int)>& sole_user, std::vector<int>* chain) {
  const Node& cat = g.nodes[i];
  if (cat.kind != NodeKind::Op || cat.op != Op::cat || cat.args.size() != 2 || cat.fakes.size() != 1 ||
      cat.args[0].kind != NodeArg::Kind::RefList || cat.args[0].refs.size() <= 4 || cat.args[1].kind != NodeArg::Kind::Const)
    return false;
  const Tensor& y = cat.fakes[0].tensor();
  if (y.dim() != 4 || y.dtype() != DType::Float32 || wrap_dim(cat.args[1].constant.to_int(), 4) != 1) return false;
  for (Ref r : cat.args[0].refs)
    if (r.elem >= 0 || r.out != 0 || g.fake(r).dim() != 4 || g.fake(r).dtype() != DType::Float32) return false;
  const int bn = sole_user(i);
  if (bn < 0 || g.nodes[bn].kind != NodeKind::Op || g.nodes[bn].op != Op::batch_norm) return false;
  const Node& b = g.nodes[bn];
  if (b.args.size() < 8 || !is_ref(b.args[0]) || b.args[0].refs[0].node != i) return false;
  for (int a = 1; a <= 4; a++)
    if (!is_ref(b.args[a]) || g.fake(b.args[a].refs[0]).dtype() != DType::Float32) return false;
  if (b.args[5].kind != NodeArg::Kind::Const || b.args[5].constant.to_bool() || b.args[7].kind != NodeArg::Kind::Const)
    return false;
  const int r = sole_user(bn);
  if (r < 0 || g.nodes[r].kind != NodeKind::Op || g.nodes[r].op != Op::relu || g.nodes[r].fakes.size() != 1) return false;
  // (batch_norm's schema marks the running statistics written: in eval mode they are only read)
  if (writes_between(g, i, bn) || writes_between(g, bn, r)) return false;
  *chain = {i, bn, r};
  return true;
}

// batch_norm with batch statistics (training = true) [N, C, ...] -> relu, the normalization read
// by nothing else: a training step's BatchNorm + ReLU (relu's derivative reads its result, so the
// normalization is not saved). The call runs where the relu was: no other node may read or write
// the running statistics or the batch counter that batch_norm updates. The chain's nodes
// (batch_norm, relu) in `chain`.
bool norm_relu_chain(const Graph& g, int i, const std::function<int(int)>& sole_user, std::vector<int>* chain) {
  const Node& b = g.nodes[i];
  if (b.kind != NodeKind::Op || b.op != Op::batch_norm || b.args.size() != 9 || b.fakes.size() != 1 || !is_ref(b.args[0]))
    return false;
  if (b.args[5].kind != NodeArg::Kind::Const || !b.args[5].constant.to_bool()) return false;
  const Tensor& y = b.fakes[0].tensor();
  if (y.dim() < 2 || !float_dtype(y.dtype())) return false;
  const int r = sole_user(i);
  if (r < 0 || g.nodes[r].kind != NodeKind::Op || g.nodes[r].op != Op::relu || g.nodes[r].fakes.size() != 1) return false;
  if (writes_between(g, i, r)) return false;
  // (an External call is not ordered after earlier readers of what it writes, as a mutating op is)
  std::vector<int> updated;  // the view roots of running_mean, running_var, num_batches_tracked
  for (int a : {3, 4, 8})
    for (Ref ref : b.args[a].refs) updated.push_back(g.view_root(ref));
  for (int k = 0; k < (int)g.nodes.size(); k++)
    for (const NodeArg& a : g.nodes[k].args)
      for (Ref ref : a.refs)
        if (k != i && std::find(updated.begin(), updated.end(), g.view_root(ref)) != updated.end()) return false;
  *chain = {i, r};
  return true;
}

// A constant zero: the number, or the one-element host tensor that binding a number to a Tensor
// argument makes (derivative formulas' gt(result, 0)).
bool is_zero(const NodeArg& a) {
  if (a.kind != NodeArg::Kind::Const) return false;
  const Value& v = a.constant;
  if (v.is_number()) return v.to_double() == 0;
  return v.is_tensor() && v.tensor().numel() == 1 && !v.tensor().device().is_cuda() && v.tensor().item_double() == 0;
}

// relu's derivative feeding batch_norm's: _batch_norm_backward(mul(g, gt(y, 0)), x, ...) with the
// product and the comparison read by nothing else and g, y, x of one shape and dtype (the
// backward of a training step's BatchNorm + ReLU). The chain's nodes (gt, mul,
// _batch_norm_backward) in `chain`, g's and y's arguments in *g_arg, *y_arg.
bool relu_norm_backward_chain(const Graph& g, int i, const std::function<int(int)>& sole_user, std::vector<int>* chain,
                              NodeArg* g_arg, NodeArg* y_arg) {
  const Node& gt = g.nodes[i];
  if (gt.kind != NodeKind::Op || gt.op != Op::gt || gt.args.size() != 2 || !is_ref(gt.args[0]) || !is_zero(gt.args[1]))
    return false;
  const int m = sole_user(i);
  if (m < 0 || g.nodes[m].kind != NodeKind::Op || g.nodes[m].op != Op::mul || g.nodes[m].args.size() != 2) return false;
  const Node& mul = g.nodes[m];
  if (!is_ref(mul.args[0]) || !is_ref(mul.args[1])) return false;
  const int other = mul.args[0].refs[0].node == i ? 1 : 0;
  if (mul.args[1 - other].refs[0].node != i || mul.args[other].refs[0].node == i) return false;
  const int bb = sole_user(m);
  if (bb < 0 || g.nodes[bb].kind != NodeKind::Op || g.nodes[bb].op != Op::_batch_norm_backward) return false;
  const Node& b = g.nodes[bb];
  if (b.args.size() != 7 || !is_ref(b.args[0]) || b.args[0].refs[0].node != m || !is_ref(b.args[1])) return false;
  const Tensor &gv = g.fake(mul.args[other].refs[0]), &yv = g.fake(gt.args[0].refs[0]), &xv = g.fake(b.args[1].refs[0]);
  if (!float_dtype(xv.dtype()) || gv.dtype() != xv.dtype() || yv.dtype() != xv.dtype() || gv.sizes() != xv.sizes() ||
      yv.sizes() != xv.sizes() || mul.fakes[0].tensor().dtype() != xv.dtype())
    return false;
  if (writes_between(g, i, bb)) return false;
  *chain = {i, m, bb};
  *g_arg = mul.args[other];
  *y_arg = gt.args[0];
  return true;
}

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
  const std::function<int(int)> sole_user = [&](int producer) -> int {  // the one later node reading `producer`, or -1
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
    if (writes_between(g, i, last)) continue;
    std::vector<NodeArg> args = {lin.args[0], lin.args[1]};
    if (bias) args.push_back(lin.args[2]);
    if (residual_arg >= 0) args.push_back(g.nodes[last].args[residual_arg]);
    for (size_t c = 0; c + 1 < chain.size(); c++) absorb(out, g, chain[c]);
    out.nodes[last] = call_at(g.nodes[last], linear_act_call(act, bias, residual_arg >= 0), std::move(args));
    (*fused)++;
  }
  for (int i = 0; i < n; i++) {
    std::vector<int> chain;
    if (!cat_norm_relu_chain(g, i, sole_user, &chain)) continue;
    const Node& cat = g.nodes[chain[0]];
    const Node& bn = g.nodes[chain[1]];
    std::vector<NodeArg> args;
    for (Ref r : cat.args[0].refs) args.push_back(NodeArg::ref(r));
    for (int a = 1; a <= 4; a++) args.push_back(bn.args[a]);  // weight, bias, running mean, running variance
    args.push_back(bn.args[7]);                               // eps
    absorb(out, g, chain[0]);
    absorb(out, g, chain[1]);
    out.nodes[chain[2]] = call_at(g.nodes[chain[2]], cat_norm_relu_call((int)cat.args[0].refs.size()), std::move(args));
    (*fused)++;
  }
  for (int i = 0; i < n; i++) {
    std::vector<int> chain;
    if (!norm_relu_chain(g, i, sole_user, &chain)) continue;
    absorb(out, g, chain[0]);
    out.nodes[chain[1]] = call_at(g.nodes[chain[1]], norm_relu_call(), g.nodes[chain[0]].args);
    (*fused)++;
  }
  for (int i = 0; i < n; i++) {
    std::vector<int> chain;
    NodeArg grad, result;
    if (!relu_norm_backward_chain(g, i, sole_user, &chain, &grad, &result)) continue;
    const Node& b = g.nodes[chain[2]];
    std::vector<NodeArg> args = {grad, result};
    args.insert(args.end(), b.args.begin() + 1, b.args.end());  // input, weight, running stats, training, eps
    absorb(out, g, chain[0]);
    absorb(out, g, chain[1]);
    out.nodes[chain[2]] = call_at(b, relu_norm_backward_call(), std::move(args));
    (*fused)++;
  }
  for (int i = 0; i < n; i++) {
    std::vector<int> chain;
    if (!merged_heads_chain(g, i, sole_user, &chain)) continue;
    const Node& at = g.nodes[i];
    // q, k, v, is_causal, scale
    std::vector<NodeArg> args = {at.args[0], at.args[1], at.args[2], at.args[5], at.args[6]};
    absorb(out, g, chain[0]);
    absorb(out, g, chain[1]);
    out.nodes[chain[2]] = call_at(g.nodes[chain[2]], attention_merged_heads_call(), std::move(args));
    (*fused)++;
  }
  return out;
}

}  // namespace tc::backends::cuda
