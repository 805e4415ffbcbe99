// Decompositions: composite ops rewritten into simpler ops of ops.def, one row per op (STYLE 14).
// A rule reads like eager code on fake tensors (`d.op(Op::amax, {x, dims, true})`); the engine
// binds each op it emits, runs its meta rule and appends it to the new graph, applying the rules
// again to what it emits. A rule that returns nothing keeps the node as it is (an Extern later).
// Pointwise composites (gelu, silu ...) are decomposed into scalar primitives instead
// (pointwise.cpp); reductions that need the reduced size (mean, var) are lowered directly.
#include <cmath>
#include <limits>
#include <unordered_map>

#include "lower_internal.h"
#include "tc/error.h"

namespace tc::lower {
namespace {

using KW = std::vector<std::pair<std::string, Value>>;

struct D;
using RuleFn = Stack (*)(D& d, const Stack& a);
struct Rule {
  Op op;
  RuleFn fn;
};
const std::vector<Rule>& rules();

struct D {
  capture::Graph& g;
  int line = -1;
  std::unordered_map<const TensorImpl*, capture::Ref> refs;
  DeviceType device = DeviceType::CPU;

  void note(const Stack& fakes, const std::vector<capture::Ref>& rs) {
    size_t k = 0;
    for (const Value& v : fakes) {
      if (v.is_tensor()) refs[v.tensor().impl()] = rs[k++];
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors()) refs[t.impl()] = rs[k++];
    }
  }
  capture::NodeArg arg(const Value& v) const {
    if (v.is_tensor()) {
      auto it = refs.find(v.tensor().impl());
      if (it != refs.end()) return capture::NodeArg::ref(it->second);
    }
    if (v.is_tensor_list() && !v.tensors().empty()) {
      std::vector<capture::Ref> rs;
      for (const Tensor& t : v.tensors()) {
        auto it = refs.find(t.impl());
        TC_LOWER_CHECK(it != refs.end(), "decompose: a tensor list of unknown tensors");
        rs.push_back(it->second);
      }
      return capture::NodeArg::list(std::move(rs));
    }
    return capture::NodeArg::constant_of(v);
  }
  // Emits `op` on bound arguments (rules first); returns its outputs as fakes.
  Stack emit(Op op, const Stack& args) {
    for (const Rule& r : rules())
      if (r.op == op) {
        Stack out = r.fn(*this, args);
        if (!out.empty()) return out;
      }
    std::vector<capture::NodeArg> nargs;
    for (const Value& v : args) nargs.push_back(arg(v));
    Stack fakes = fake_call(op, args);
    note(fakes, g.add_op(op, std::move(nargs), fakes, line));
    return fakes;
  }
  Tensor op(Op o, Stack positional, KW kw = {}) { return emit(o, bind(o, std::move(positional), std::move(kw)))[0].tensor(); }
};

Value none() { return Value(); }
bool is_none(const Value& v) { return v.is_none(); }

Tensor reduce_loss(D& d, const Tensor& loss, const std::string& reduction) {
  if (reduction == "sum") return d.op(Op::sum, {loss});
  if (reduction == "mean") return d.op(Op::mean, {loss});
  return loss;
}

IntList last_dims(size_t k) {
  IntList dims;
  for (int64_t i = -int64_t(k); i < 0; i++) dims.push_back(i);
  return dims;
}

// Shape [C, 1, 1 ...] of a per-channel vector against an input of rank r (channel dim 2).
Tensor per_channel(D& d, const Tensor& v, int64_t r) {
  Stack sizes = {v, v.sizes()[0]};
  for (int64_t i = 2; i < r; i++) sizes.push_back(int64_t(1));
  return d.op(Op::reshape, sizes);
}

double eps_of(DType t) {
  switch (t) {
    case DType::Float64: return std::numeric_limits<double>::epsilon();
    case DType::Float16: return 0.0009765625;
    case DType::BFloat16: return 0.0078125;
    default: return std::numeric_limits<float>::epsilon();
  }
}

// The max subtracted for stability over `dims`: 0 for an empty x (amax raises on an empty dim; any
// shift gives eager's empty result, or log(0) = -inf for logsumexp over an empty dim).
Value stable_max(D& d, const Tensor& x, const Value& dims) {
  if (x.numel() == 0) return 0.0;
  return d.op(Op::amax, {x, dims, true});
}

Stack softmax(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  if (!is_none(a[2])) x = d.op(Op::to_dtype, {x, a[2]});
  Value m = stable_max(d, x, IntList{a[1].to_int()});
  Tensor e = d.op(Op::exp, {d.op(Op::sub, {x, m})});
  return {d.op(Op::div, {e, d.op(Op::sum, {e, IntList{a[1].to_int()}, true})})};
}

Stack log_softmax(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  if (!is_none(a[2])) x = d.op(Op::to_dtype, {x, a[2]});
  Value m = stable_max(d, x, IntList{a[1].to_int()});
  Tensor xm = d.op(Op::sub, {x, m});
  Tensor s = d.op(Op::sum, {d.op(Op::exp, {xm}), IntList{a[1].to_int()}, true});
  return {d.op(Op::sub, {xm, d.op(Op::log, {s})})};
}

Stack layer_norm(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  IntList dims = last_dims(a[1].ints().size());
  Tensor xc = d.op(Op::sub, {x, d.op(Op::mean, {x, dims, true})});
  Tensor var = d.op(Op::mean, {d.op(Op::mul, {xc, xc}), dims, true});
  Tensor y = d.op(Op::mul, {xc, d.op(Op::rsqrt, {d.op(Op::add, {var, a[4].to_double()})})});
  if (!is_none(a[2])) y = d.op(Op::mul, {y, a[2]});
  if (!is_none(a[3])) y = d.op(Op::add, {y, a[3]});
  return {y};
}

Stack rms_norm(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  double eps = is_none(a[3]) ? eps_of(x.dtype()) : a[3].to_double();
  Tensor ms = d.op(Op::mean, {d.op(Op::mul, {x, x}), last_dims(a[1].ints().size()), true});
  Tensor y = d.op(Op::mul, {x, d.op(Op::rsqrt, {d.op(Op::add, {ms, eps})})});
  if (!is_none(a[2])) y = d.op(Op::mul, {y, a[2]});
  return {y};
}

// Normalised as [N, G, C/G, rest] (one row kernel), the affine applied there, then viewed back.
Stack group_norm(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  int64_t groups = a[1].to_int(), r = x.dim();
  if (r < 2 || x.numel() == 0) return {};
  int64_t C = x.sizes()[1];
  Tensor xr = d.op(Op::reshape, {x, x.sizes()[0], groups, C / groups, int64_t(-1)});
  IntList dims = {3, 4};
  Tensor xc = d.op(Op::sub, {xr, d.op(Op::mean, {xr, dims, true})});
  Tensor var = d.op(Op::mean, {d.op(Op::mul, {xc, xc}), dims, true});
  Tensor y = d.op(Op::mul, {xc, d.op(Op::rsqrt, {d.op(Op::add, {var, a[4].to_double()})})});
  if (!is_none(a[2])) y = d.op(Op::mul, {y, d.op(Op::reshape, {a[2], groups, C / groups, int64_t(1)})});
  if (!is_none(a[3])) y = d.op(Op::add, {y, d.op(Op::reshape, {a[3], groups, C / groups, int64_t(1)})});
  return {d.op(Op::reshape, {y, IntList(x.sizes())})};
}

Stack batch_norm(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  if (a[5].to_bool() || is_none(a[3]) || is_none(a[4]) || x.dim() < 2) return {};  // training
  int64_t r = x.dim();
  Tensor inv = d.op(Op::rsqrt, {d.op(Op::add, {per_channel(d, a[4].tensor(), r), a[7].to_double()})});
  Tensor y = d.op(Op::mul, {d.op(Op::sub, {x, per_channel(d, a[3].tensor(), r)}), inv});
  if (!is_none(a[1])) y = d.op(Op::mul, {y, per_channel(d, a[1].tensor(), r)});
  if (!is_none(a[2])) y = d.op(Op::add, {y, per_channel(d, a[2].tensor(), r)});
  return {y};
}

Stack logsumexp(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  if (!is_floating(x.dtype())) x = d.op(Op::to_dtype, {x, default_dtype()});
  Value m = stable_max(d, x, a[1]);
  if (m.is_tensor()) m = d.op(Op::masked_fill, {m, d.op(Op::isinf, {m.tensor()}), 0.0});
  Tensor s = d.op(Op::sum, {d.op(Op::exp, {d.op(Op::sub, {x, m})}), a[1], true});
  Tensor r = d.op(Op::add, {d.op(Op::log, {s}), m});
  if (!a[2].to_bool()) r = d.op(Op::squeeze, {r, a[1]});
  return {r};
}

Stack norm(D& d, const Stack& a) {
  Tensor x = a[0].tensor();
  if (!is_floating(x.dtype())) return {};
  double p = a[1].to_double();
  Tensor ax = d.op(Op::abs, {x});
  if (p == 2) {
    // squares summed in float64, as eager does: a float32 norm of values near 1e38 is finite
    Tensor w = x.dtype() == DType::Float64 ? x : d.op(Op::to_dtype, {x, DType::Float64});
    Tensor r = d.op(Op::sqrt, {d.op(Op::sum, {d.op(Op::mul, {w, w}), a[2], a[3]})});
    return {x.dtype() == DType::Float64 ? r : d.op(Op::to_dtype, {r, x.dtype()})};
  }
  if (p == 1) return {d.op(Op::sum, {ax, a[2], a[3]})};
  if (std::isinf(p)) return {d.op(p > 0 ? Op::amax : Op::amin, {ax, a[2], a[3]})};
  if (p == 0) return {d.op(Op::sum, {d.op(Op::to_dtype, {d.op(Op::ne, {x, 0.0}), x.dtype()}), a[2], a[3]})};
  Tensor s = d.op(Op::sum, {d.op(Op::pow, {ax, p}), a[2], a[3]});
  return {d.op(Op::pow, {s, 1.0 / p})};
}

// Class dim of a loss input: 2 (1-based) when it has a batch dim.
int64_t class_dim(const Tensor& x) { return x.dim() >= 2 ? 2 : 1; }

// The loss at class-index targets `t` of log-probabilities `x`: -w[t] * x[t] where the target is
// not ignored, else 0 (nll's "none"); `wt` gets w[t] (1 without weights) there, 0 elsewhere.
Tensor picked_loss(D& d, const Tensor& x, const Tensor& t, const Value& weight, int64_t ignore, Tensor* wt) {
  int64_t cd = class_dim(x);
  Tensor valid = d.op(Op::ne, {t, ignore});
  // gathers at the targets themselves: lowering checks them with nll_loss's rule (ignore_index
  // passes) and the kernel clamps, so an ignored target reads a class that `valid` then drops
  Tensor picked = d.op(Op::squeeze, {d.op(Op::gather, {x, cd, d.op(Op::unsqueeze, {t, cd})}), IntList{cd}});
  if (is_none(weight)) {
    *wt = d.op(Op::to_dtype, {valid, x.dtype()});
    return d.op(Op::where, {valid, d.op(Op::neg, {picked}), 0.0});
  }
  Tensor w = d.op(Op::to_dtype, {weight, x.dtype()});
  Tensor flat = d.op(Op::reshape, {t, IntList{-1}});
  Tensor wk = d.op(Op::reshape, {d.op(Op::index_select, {w, int64_t(1), flat}), IntList(t.sizes())});
  *wt = d.op(Op::where, {valid, wk, 0.0});
  return d.op(Op::where, {valid, d.op(Op::neg, {d.op(Op::mul, {picked, wk})}), 0.0});
}

// Class-index targets, optional class weights: mean = sum(-w[t] x[t]) / sum(w[t]) over the
// targets not ignored (eager's nll_loss).
Stack nll_loss(D& d, const Stack& a) {
  Tensor x = a[0].tensor(), t = a[1].tensor();
  if (is_floating(t.dtype())) return {};
  Tensor wt;
  Tensor loss = picked_loss(d, x, t, a[2], a[4].to_int(), &wt);
  const std::string& red = a[3].str();
  if (red != "mean") return {reduce_loss(d, loss, red)};
  return {d.op(Op::div, {d.op(Op::sum, {loss}), d.op(Op::sum, {wt})})};
}

// log_softmax then nll_loss; with label smoothing eps the loss is (1 - eps) nll + eps / C smooth,
// smooth = -sum_c w[c] log p[c] (0 where ignored), whose mean divides by sum(w[t]) with weights and
// by the number of positions without (eager's kernel); class probabilities p' (a target shaped
// like the input): -sum_c w[c] (p'[c] (1 - eps) + eps / C) log p[c], mean over positions.
Stack cross_entropy(D& d, const Stack& a) {
  Tensor x = a[0].tensor(), t = a[1].tensor();
  const double eps = std::max(0.0, a[5].to_double());
  const std::string& red = a[3].str();
  const int64_t cd = class_dim(x), classes = x.sizes()[cd - 1];
  Tensor lsm = d.op(Op::log_softmax, {x, cd});
  Value wv;  // the weights along the class dim of x
  if (!is_none(a[2])) {
    Tensor w = d.op(Op::to_dtype, {a[2], x.dtype()});
    wv = x.dim() >= 2 ? per_channel(d, w, x.dim()) : w;
  }
  auto weighted = [&](const Tensor& v) { return is_none(wv) ? v : d.op(Op::mul, {v, wv}); };
  if (is_floating(t.dtype())) {
    if (t.sizes() != x.sizes()) return {};
    Tensor p = eps > 0 ? d.op(Op::add, {d.op(Op::mul, {t, 1 - eps}), eps / double(classes)}) : t;
    Tensor loss = d.op(Op::neg, {d.op(Op::sum, {weighted(d.op(Op::mul, {lsm, p})), IntList{cd}})});
    return {reduce_loss(d, loss, red)};
  }
  if (eps == 0) return {d.op(Op::nll_loss, {lsm, t, a[2], a[3], a[4]})};
  Tensor wt;
  Tensor nll = picked_loss(d, lsm, t, a[2], a[4].to_int(), &wt);
  Tensor valid = d.op(Op::ne, {t, a[4]});
  Tensor smooth = d.op(Op::where, {valid, d.op(Op::neg, {d.op(Op::sum, {weighted(lsm), IntList{cd}})}), 0.0});
  if (red == "none")
    return {d.op(Op::add, {d.op(Op::mul, {nll, 1 - eps}), d.op(Op::mul, {smooth, eps / double(classes)})})};
  Tensor main = d.op(Op::sum, {nll}), extra = d.op(Op::sum, {smooth});
  if (red == "mean") {
    Tensor n = d.op(Op::sum, {wt});
    main = d.op(Op::div, {main, n});
    extra = is_none(a[2]) ? d.op(Op::mean, {smooth}) : d.op(Op::div, {extra, n});
  }
  return {d.op(Op::add, {d.op(Op::mul, {main, 1 - eps}), d.op(Op::mul, {extra, eps / double(classes)})})};
}

Stack mse_loss(D& d, const Stack& a) {
  Tensor diff = d.op(Op::sub, {a[0], a[1]});
  return {reduce_loss(d, d.op(Op::mul, {diff, diff}), a[2].str())};
}

Stack l1_loss(D& d, const Stack& a) {
  return {reduce_loss(d, d.op(Op::abs, {d.op(Op::sub, {a[0], a[1]})}), a[2].str())};
}

Stack binary_cross_entropy(D& d, const Stack& a) {
  if (!is_none(a[2])) return {};
  Tensor x = a[0].tensor(), t = a[1].tensor();
  Tensor lx = d.op(Op::clamp, {d.op(Op::log, {x}), -100.0});
  Tensor l1x = d.op(Op::clamp, {d.op(Op::log, {d.op(Op::sub, {1.0, x})}), -100.0});
  Tensor s = d.op(Op::add, {d.op(Op::mul, {t, lx}), d.op(Op::mul, {d.op(Op::sub, {1.0, t}), l1x})});
  return {reduce_loss(d, d.op(Op::neg, {s}), a[3].str())};
}

Stack bce_with_logits(D& d, const Stack& a) {
  if (!is_none(a[2]) || !is_none(a[4])) return {};
  Tensor x = a[0].tensor(), t = a[1].tensor();
  // (1 - t) * x + max(-x, 0) + log1p(exp(-|x|))
  Tensor l = d.op(Op::mul, {d.op(Op::sub, {1.0, t}), x});
  l = d.op(Op::add, {l, d.op(Op::relu, {d.op(Op::neg, {x})})});
  l = d.op(Op::add, {l, d.op(Op::log1p, {d.op(Op::exp, {d.op(Op::neg, {d.op(Op::abs, {x})})})})});
  return {reduce_loss(d, l, a[3].str())};
}

Stack attention(D& d, const Stack& a) {
  Tensor q = a[0].tensor(), k = a[1].tensor(), v = a[2].tensor();
  if (a[4].to_double() != 0 || q.dim() < 2 || attention_is_library_call(a, d.device)) return {};
  double scale = is_none(a[6]) ? 1.0 / std::sqrt(double(q.sizes().back())) : a[6].to_double();
  Tensor s = d.op(Op::mul, {d.op(Op::matmul, {q, d.op(Op::transpose, {k, int64_t(-2), int64_t(-1)})}), scale});
  if (a[5].to_bool()) {
    int64_t L = q.sizes()[q.dim() - 2], S = k.sizes()[k.dim() - 2];
    Tensor causal = d.op(Op::tril, {d.op(Op::ones, {L, S}, {{"dtype", DType::Bool}, {"device", q.device()}})});
    s = d.op(Op::masked_fill, {s, d.op(Op::logical_not, {causal}), -INFINITY});
  }
  if (!is_none(a[3])) {
    const Tensor& m = a[3].tensor();
    s = m.dtype() == DType::Bool ? d.op(Op::masked_fill, {s, d.op(Op::logical_not, {m}), -INFINITY})
                                 : d.op(Op::add, {s, m});
  }
  return {d.op(Op::matmul, {d.op(Op::softmax, {s, int64_t(-1)}), v})};
}

Stack addmm(D& d, const Stack& a) {
  Tensor p = d.op(a[0].tensor().dim() == 3 && a[1].tensor().dim() == 3 ? Op::bmm : Op::mm, {a[1], a[2]});
  double beta = a[3].to_double(), alpha = a[4].to_double();
  if (alpha != 1) p = d.op(Op::mul, {p, a[4]});
  if (beta == 0) return {p};
  return {d.op(Op::add, {p, beta == 1 ? a[0] : Value(d.op(Op::mul, {a[0], a[3]}))})};
}

Stack linear(D& d, const Stack& a) {
  if (is_none(a[2])) return {};
  return {d.op(Op::add, {d.op(Op::linear, {a[0], a[1]}), a[2]})};
}

Stack dropout(D& d, const Stack& a) {
  if (a[2].to_bool() && a[1].to_double() != 0) return {};
  return {a[0]};
  (void)d;
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      {Op::softmax, softmax},
      {Op::log_softmax, log_softmax},
      {Op::layer_norm, layer_norm},
      {Op::rms_norm, rms_norm},
      {Op::group_norm, group_norm},
      {Op::batch_norm, batch_norm},
      {Op::logsumexp, logsumexp},
      {Op::norm, norm},
      {Op::nll_loss, nll_loss},
      {Op::cross_entropy, cross_entropy},
      {Op::mse_loss, mse_loss},
      {Op::l1_loss, l1_loss},
      {Op::binary_cross_entropy, binary_cross_entropy},
      {Op::binary_cross_entropy_with_logits, bce_with_logits},
      {Op::scaled_dot_product_attention, attention},
      {Op::addmm, addmm},
      {Op::baddbmm, addmm},
      {Op::linear, linear},
      {Op::dropout, dropout},
  };
  return table;
}

}  // namespace

bool attention_is_library_call(const Stack& a, DeviceType device) {
  if (device != DeviceType::CUDA || !is_none(a[3]) || a[4].to_double() != 0) return false;
  const Tensor &q = a[0].tensor(), &k = a[1].tensor(), &v = a[2].tensor();
  const int64_t nd = q.dim();
  if (nd < 3 || nd > 4 || k.dim() != nd || v.dim() != nd) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (t->dtype() != DType::Float32) return false;
  for (int64_t i = 0; i < nd - 2; i++)
    if (k.sizes()[i] != q.sizes()[i] || v.sizes()[i] != q.sizes()[i]) return false;
  const int64_t e = q.sizes()[nd - 1];
  return e > 0 && e % 4 == 0 && e <= 128 && k.sizes()[nd - 1] == e && v.sizes()[nd - 1] == e && v.sizes()[nd - 2] == k.sizes()[nd - 2];
}

capture::Graph decompose(const capture::Graph& g, std::vector<int>* origin, DeviceType device) {
  capture::Graph out;
  out.dynamic_dims = g.dynamic_dims;
  D d{out, -1, {}, device};
  // Old (node, flat output) -> fake in the new graph.
  std::vector<std::vector<Tensor>> now(g.nodes.size());
  auto get = [&](capture::Ref r) { return now[r.node][r.elem >= 0 ? r.elem : r.out]; };
  for (size_t n = 0; n < g.nodes.size(); n++) {
    const capture::Node& node = g.nodes[n];
    d.line = node.line;
    Stack args;
    for (const capture::NodeArg& a : node.args) {
      if (a.kind == capture::NodeArg::Kind::Const) args.push_back(a.constant);
      if (a.kind == capture::NodeArg::Kind::Ref) args.push_back(get(a.refs[0]));
      if (a.kind == capture::NodeArg::Kind::RefList) {
        TensorList l;
        for (capture::Ref r : a.refs) l.push_back(get(r));
        args.push_back(std::move(l));
      }
    }
    Stack outs;
    if (node.kind == capture::NodeKind::Input) {
      const Tensor& f = node.fakes[0].tensor();
      d.refs[f.impl()] = out.add_input(node.name, node.source, f);
      outs = node.fakes;
    } else if (node.kind == capture::NodeKind::External) {
      std::vector<capture::NodeArg> nargs;
      for (const Value& v : args) nargs.push_back(d.arg(v));
      d.note(node.fakes, out.add_external(node.ext, std::move(nargs), node.fakes, node.line));
      outs = node.fakes;
    } else {
      outs = d.emit(node.op, args);
    }
    origin->resize(out.nodes.size(), int(n));
    for (size_t k = 0; k < out.nodes.size(); k++)
      if (out.nodes[k].file.empty()) out.nodes[k].file = node.file;
    for (const Value& v : outs) {
      if (v.is_tensor()) now[n].push_back(v.tensor());
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors()) now[n].push_back(t);
    }
  }
  for (capture::Ref r : g.outputs) out.outputs.push_back(d.refs.at(get(r).impl()));
  return out;
}

}  // namespace tc::lower
