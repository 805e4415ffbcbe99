// Composite ops written in tc ops: autograd differentiates these (recomputed in the backward from
// the saved inputs) instead of keeping a hand-written backward per fused kernel. dropout and
// attention with dropout run this way in the forward when they record (the mask must be saved).
#include <algorithm>
#include <cmath>

#include "autograd_internal.h"

namespace tc::autograd {
namespace {

using Kw = std::vector<std::pair<std::string, Value>>;

IntList shape_of(const Tensor& t) { return IntList(t.sizes().begin(), t.sizes().end()); }
const Tensor* opt(const Value& v) { return v.is_tensor() ? &v.tensor() : nullptr; }
IntList pair_of(const Value& v) {
  const IntList& l = v.ints();
  return l.size() == 1 ? IntList{l[0], l[0]} : l;
}

Tensor reduce(const Tensor& loss, const std::string& reduction) {
  if (reduction == "mean") return op(Op::mean, {loss});
  if (reduction == "sum") return op(Op::sum, {loss});
  return loss;
}

// (x - mean) / sqrt(var + eps) over `dims`
Tensor normalize(const Tensor& x, const IntList& dims, double eps) {
  Tensor mean = op(Op::mean, {x, dims, true});
  Tensor var = op(Op::var, {x, dims}, {{"correction", Value(int64_t(0))}, {"keepdim", Value(true)}});
  return op(Op::mul, {op(Op::sub, {x, mean}), op(Op::rsqrt, {op(Op::add, {var, eps})})});
}

// a per-channel vector shaped to broadcast over dim 2 of a rank-r tensor
Tensor channel_view(const Tensor& v, int64_t rank) {
  IntList s(rank, 1);
  s[1] = -1;
  return op(Op::reshape, {v, s});
}

Tensor affine(Tensor y, const Tensor* w, const Tensor* b) {
  if (w) y = op(Op::mul, {y, *w});
  if (b) y = op(Op::add, {y, *b});
  return y;
}

// The kh x kw window elements of a pooling as a last dim: (..., oh, ow, kh*kw).
Tensor windows(const Tensor& x, IntList k, IntList s, IntList p, IntList d, int64_t oh, int64_t ow, double fill) {
  int64_t h = x.sizes()[x.dim() - 2], w = x.sizes()[x.dim() - 1];
  int64_t extra_h = std::max<int64_t>(0, (oh - 1) * s[0] + d[0] * (k[0] - 1) + 1 - (h + p[0]));
  int64_t extra_w = std::max<int64_t>(0, (ow - 1) * s[1] + d[1] * (k[1] - 1) + 1 - (w + p[1]));
  Tensor xp = op(Op::pad, {x, IntList{p[1], extra_w, p[0], extra_h}, std::string("constant"), fill});
  TensorList parts;
  for (int64_t i = 0; i < k[0]; i++)
    for (int64_t j = 0; j < k[1]; j++) {
      Tensor v = op(Op::slice, {xp, -2, i * d[0] + 1, i * d[0] + (oh - 1) * s[0] + 1, s[0]});
      parts.push_back(op(Op::slice, {v, -1, j * d[1] + 1, j * d[1] + (ow - 1) * s[1] + 1, s[1]}));
    }
  return op(Op::stack, {parts, -1});
}

Tensor pool(Op o, const Stack& a) {
  const Tensor& x = a[0].tensor();
  Shape out = infer_meta(o, a)[0].sizes;
  int64_t oh = out[out.size() - 2], ow = out[out.size() - 1];
  if (o == Op::adaptive_avg_pool2d || o == Op::adaptive_max_pool2d) {
    int64_t h = x.sizes()[x.dim() - 2], w = x.sizes()[x.dim() - 1];
    TensorList rows;
    for (int64_t i = 0; i < oh; i++) {
      int64_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;
      TensorList cols;
      for (int64_t j = 0; j < ow; j++) {
        int64_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
        Tensor r = op(Op::narrow, {op(Op::narrow, {x, -2, h0 + 1, h1 - h0}), -1, w0 + 1, w1 - w0});
        r = op(Op::flatten, {r, -2});
        cols.push_back(o == Op::adaptive_avg_pool2d ? op(Op::mean, {r, IntList{-1}})
                                                    : Tensor(call(Op::max_dim, bind(Op::max_dim, {r, -1}, {}))[0].tensor()));
      }
      rows.push_back(op(Op::stack, {cols, -1}));
    }
    return op(Op::stack, {rows, -2});
  }
  IntList k = pair_of(a[1]);
  IntList s = a[2].is_none() || a[2].ints().empty() ? k : pair_of(a[2]);
  IntList p = pair_of(a[3]);
  if (o == Op::max_pool2d) {
    Tensor win = windows(x, k, s, p, pair_of(a[4]), oh, ow, -INFINITY);
    return call(Op::max_dim, bind(Op::max_dim, {win, -1}, {}))[0].tensor();
  }
  // avg: the window sums times avg_pool2d(ones) / window sums of ones (the op's own divisors)
  Tensor sums = op(Op::sum, {windows(x, k, s, p, {1, 1}, oh, ow, 0), IntList{-1}});
  Tensor scale;
  {
    GradModeGuard off(false);
    Tensor ones = op(Op::ones, {shape_of(x)}, {{"dtype", Value(x.dtype())}, {"device", Value(x.device())}});
    Stack b = a;
    b[0] = Value(ones);
    Tensor avg = call(Op::avg_pool2d, b)[0].tensor();
    scale = op(Op::div, {avg, op(Op::sum, {windows(ones, k, s, p, {1, 1}, oh, ow, 0), IntList{-1}})});
  }
  return op(Op::mul, {sums, scale});
}

// bilinear along 0-based dim d: x[i0] * l0 + x[i1] * l1 per output index, with the kernel's
// source indices and weights (stdlib/cpu/nn_interpolate.cpp); `scale` is 1/scale_factor or 0.
Tensor linear_resize(const Tensor& x, int64_t d, int64_t n, bool align, double scale) {
  const int64_t in = x.sizes()[d];
  Tensor i0 = Tensor::empty({n}, DType::Int64), i1 = Tensor::empty({n}, DType::Int64);
  Tensor l0 = Tensor::empty({n}, DType::Float64), l1 = Tensor::empty({n}, DType::Float64);
  const double s = align ? (n > 1 ? double(in - 1) / double(n - 1) : 0.0) : scale > 0 ? scale : double(in) / double(n);
  for (int64_t o = 0; o < n; o++) {
    const double src = align ? s * double(o) : std::max(s * (double(o) + 0.5) - 0.5, 0.0);
    const int64_t lo = int64_t(src);
    i0.data<int64_t>()[o] = lo + 1;  // 1-based, as index_select takes them
    i1.data<int64_t>()[o] = lo + (lo < in - 1 ? 1 : 0) + 1;
    l1.data<double>()[o] = std::min(src - double(lo), 1.0);
    l0.data<double>()[o] = 1.0 - l1.data<double>()[o];
  }
  IntList wshape(size_t(x.dim() - d), 1);  // broadcasts along dim d
  wshape[0] = n;
  auto weight = [&](const Tensor& l) {
    return op(Op::reshape, {op(Op::to_dtype, {op(Op::to_device, {l, Value(x.device())}), Value(x.dtype())}), wshape});
  };
  auto pick = [&](const Tensor& i) { return op(Op::index_select, {x, d + 1, op(Op::to_device, {i, Value(x.device())})}); };
  return op(Op::add, {op(Op::mul, {pick(i0), weight(l0)}), op(Op::mul, {pick(i1), weight(l1)})});
}

Tensor interpolate(const Stack& a) {
  const Tensor& x = a[0].tensor();
  const bool bilinear = a[3].str() == "bilinear";
  TC_CHECK(bilinear || a[3].str() == "nearest", NotImplementedError,
           "the derivative of interpolate with mode \"%s\" is not implemented", a[3].str().c_str());
  Shape out = infer_meta(Op::interpolate, a)[0].sizes;
  Tensor y = x;
  int64_t spatial = x.dim() - 2;
  for (int64_t k = 0; k < spatial; k++) {
    int64_t d = 2 + k, in = x.sizes()[d], n = out[d];
    double scale = (double)in / (double)n;
    if (a[2].is_float_list() && !a[1].is_int_list()) {
      const FloatList& sf = a[2].floats();
      scale = 1.0 / sf[sf.size() == 1 ? 0 : k];
    }
    if (bilinear) {
      const bool given = a[2].is_float_list() && !a[1].is_int_list();
      y = linear_resize(y, d, n, !a[4].is_none() && a[4].to_bool(), given ? scale : 0.0);
      continue;
    }
    Tensor idx = op(Op::arange, {int64_t(0), n}, {{"dtype", Value(DType::Float64)}, {"device", Value(x.device())}});
    idx = op(Op::clamp, {op(Op::floor, {op(Op::mul, {idx, scale})}), Value(), (double)(in - 1)});
    idx = op(Op::to_dtype, {op(Op::add, {idx, 1}), Value(DType::Int64)});
    y = op(Op::index_select, {y, d + 1, idx});
  }
  return y;
}

Tensor conv1d(const Stack& a) {
  auto one = [](const Value& v, int64_t fill) {
    if (v.is_string()) return v;
    return Value(IntList{v.ints()[0], fill});
  };
  Tensor x = op(Op::unsqueeze, {a[0], -1}), w = op(Op::unsqueeze, {a[1], -1});
  Tensor y = op(Op::conv2d, {x, w, a[2], one(a[3], 1), one(a[4], 0), one(a[5], 1), a[6]});
  return op(Op::squeeze, {y, IntList{-1}});
}

Tensor nll(const Tensor& logp, const Tensor& target, const Tensor* weight, const std::string& reduction, int64_t ignore) {
  int64_t cdim = logp.dim() >= 2 ? 2 : 1;
  Tensor valid = op(Op::ne, {target, ignore});
  Tensor t = op(Op::where, {valid, target, int64_t(1)});
  Tensor picked = op(Op::squeeze, {op(Op::gather, {logp, cdim, op(Op::unsqueeze, {t, cdim})}), IntList{cdim}});
  Tensor wt = op(Op::to_dtype, {valid, Value(logp.dtype())});
  if (weight) {
    Tensor w = op(Op::reshape, {op(Op::index_select, {*weight, 1, op(Op::reshape, {t, IntList{-1}})}), shape_of(t)});
    wt = op(Op::mul, {wt, w});
  }
  Tensor loss = op(Op::neg, {op(Op::mul, {picked, wt})});
  if (reduction == "mean") return op(Op::div, {op(Op::sum, {loss}), op(Op::sum, {wt})});
  return reduce(loss, reduction);
}

Tensor cross_entropy(const Stack& a) {
  const Tensor &x = a[0].tensor(), &target = a[1].tensor();
  const Tensor* weight = opt(a[2]);
  const std::string& reduction = a[3].str();
  int64_t ignore = a[4].to_int();
  double ls = a[5].to_double();
  int64_t cdim = x.dim() >= 2 ? 2 : 1, classes = x.sizes()[cdim - 1];
  Tensor logp = op(Op::log_softmax, {x, cdim});
  Tensor wv = weight ? (x.dim() >= 2 ? channel_view(*weight, x.dim()) : *weight) : Tensor();
  if (is_floating(target.dtype())) {  // class probabilities
    Tensor t = ls > 0 ? op(Op::add, {op(Op::mul, {target, 1 - ls}), ls / classes}) : target;
    Tensor prod = op(Op::mul, {logp, t});
    if (weight) prod = op(Op::mul, {prod, wv});
    Tensor loss = op(Op::neg, {op(Op::sum, {prod, IntList{cdim}})});
    if (reduction == "mean") return op(Op::div, {op(Op::sum, {loss}), (double)x.numel() / (double)classes});
    return reduce(loss, reduction);
  }
  Tensor main = call(Op::nll_loss, bind(Op::nll_loss, {logp, target, a[2], reduction, ignore}, {}))[0].tensor();
  if (ls <= 0) return main;
  Tensor valid = op(Op::ne, {target, ignore});
  Tensor smooth = op(Op::neg, {op(Op::sum, {weight ? op(Op::mul, {logp, wv}) : logp, IntList{cdim}})});
  smooth = op(Op::mul, {smooth, op(Op::to_dtype, {valid, Value(x.dtype())})});
  Tensor s;
  if (reduction == "mean") {
    Tensor denom;
    if (weight) {
      Tensor t = op(Op::where, {valid, target, int64_t(1)});
      Tensor w = op(Op::index_select, {*weight, 1, op(Op::reshape, {t, IntList{-1}})});
      denom = op(Op::sum, {op(Op::mul, {w, op(Op::to_dtype, {op(Op::reshape, {valid, IntList{-1}}), Value(x.dtype())})})});
    } else {
      denom = op(Op::sum, {op(Op::to_dtype, {valid, Value(x.dtype())})});
    }
    s = op(Op::div, {op(Op::sum, {smooth}), denom});
  } else {
    s = reduce(smooth, reduction);
  }
  return op(Op::add, {op(Op::mul, {main, 1 - ls}), op(Op::mul, {s, ls / classes})});
}

Tensor attention(const Stack& a) {
  const Tensor &q = a[0].tensor(), &k = a[1].tensor(), &v = a[2].tensor();
  double scale = a[6].is_none() ? 1.0 / std::sqrt((double)q.sizes().back()) : a[6].to_double();
  Tensor s = op(Op::mul, {op(Op::matmul, {q, op(Op::transpose, {k, -2, -1})}), scale});
  int64_t l = q.sizes()[q.dim() - 2], n = k.sizes()[k.dim() - 2];
  if (a[5].to_bool()) {
    Tensor ones = op(Op::ones, {IntList{l, n}}, {{"dtype", Value(DType::Bool)}, {"device", Value(q.device())}});
    s = op(Op::masked_fill, {s, op(Op::logical_not, {op(Op::tril, {ones})}), -INFINITY});
  }
  if (const Tensor* m = opt(a[3])) {
    if (m->dtype() == DType::Bool)
      s = op(Op::masked_fill, {s, op(Op::logical_not, {*m}), -INFINITY});
    else
      s = op(Op::add, {s, *m});
  }
  Tensor p = op(Op::softmax, {s, -1});
  if (a[4].to_double() > 0) p = op(Op::dropout, {p, a[4].to_double(), true});
  return op(Op::matmul, {p, v});
}

}  // namespace

Tensor decomposition(Op o, const Stack& a) {
  switch (o) {
    case Op::conv1d: return conv1d(a);
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d:
    case Op::adaptive_max_pool2d: return pool(o, a);
    case Op::batch_norm: {
      const Tensor& x = a[0].tensor();
      IntList dims{1};
      for (int64_t d = 3; d <= x.dim(); d++) dims.push_back(d);
      const Tensor *rm = opt(a[3]), *rv = opt(a[4]);
      Tensor y;
      if (a[5].to_bool() || !rm || !rv) {
        y = normalize(x, dims, a[7].to_double());
      } else {
        Tensor inv = op(Op::rsqrt, {op(Op::add, {channel_view(*rv, x.dim()), a[7].to_double()})});
        y = op(Op::mul, {op(Op::sub, {x, channel_view(*rm, x.dim())}), inv});
      }
      Tensor w = opt(a[1]) ? channel_view(*opt(a[1]), x.dim()) : Tensor();
      Tensor b = opt(a[2]) ? channel_view(*opt(a[2]), x.dim()) : Tensor();
      return affine(y, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr);
    }
    case Op::layer_norm: {
      IntList dims;
      for (int64_t d = -(int64_t)a[1].ints().size(); d <= -1; d++) dims.push_back(d);
      return affine(normalize(a[0].tensor(), dims, a[4].to_double()), opt(a[2]), opt(a[3]));
    }
    case Op::group_norm: {
      const Tensor& x = a[0].tensor();
      int64_t g = a[1].to_int();
      Tensor r = op(Op::reshape, {x, IntList{x.sizes()[0], g, -1}});
      Tensor y = op(Op::reshape, {normalize(r, IntList{-1}, a[4].to_double()), shape_of(x)});
      Tensor w = opt(a[2]) ? channel_view(*opt(a[2]), x.dim()) : Tensor();
      Tensor b = opt(a[3]) ? channel_view(*opt(a[3]), x.dim()) : Tensor();
      return affine(y, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr);
    }
    case Op::rms_norm: {
      const Tensor& x = a[0].tensor();
      IntList dims;
      for (int64_t d = -(int64_t)a[1].ints().size(); d <= -1; d++) dims.push_back(d);
      double eps = 0;
      if (!a[3].is_none()) {
        eps = a[3].to_double();
      } else {
        switch (x.dtype()) {
          case DType::Float64: eps = 2.220446049250313e-16; break;
          case DType::Float16: eps = 0.0009765625; break;
          case DType::BFloat16: eps = 0.0078125; break;
          default: eps = 1.1920928955078125e-07; break;
        }
      }
      Tensor ms = op(Op::mean, {op(Op::mul, {x, x}), dims, true});
      return affine(op(Op::mul, {x, op(Op::rsqrt, {op(Op::add, {ms, eps})})}), opt(a[2]), nullptr);
    }
    case Op::embedding: {
      const Tensor &ids = a[0].tensor(), &w = a[1].tensor();
      Tensor flat = op(Op::reshape, {ids, IntList{-1}});
      Tensor rows = op(Op::index_select, {w, 1, flat});
      if (!a[2].is_none()) {  // rows of padding_idx get no gradient
        int64_t p = a[2].to_int();
        if (p < 0) p += w.sizes()[0] + 1;
        Tensor pad = op(Op::unsqueeze, {op(Op::eq, {flat, p}), -1});
        rows = op(Op::where, {pad, op(Op::index_select, {op(Op::detach, {w}), 1, flat}), rows});
      }
      IntList s = shape_of(ids);
      s.push_back(w.sizes()[1]);
      return op(Op::reshape, {rows, s});
    }
    case Op::scaled_dot_product_attention: return attention(a);
    case Op::cross_entropy: return cross_entropy(a);
    case Op::nll_loss: return nll(a[0].tensor(), a[1].tensor(), opt(a[2]), a[3].str(), a[4].to_int());
    case Op::mse_loss: {
      Tensor d = op(Op::sub, {a[0], a[1]});
      return reduce(op(Op::mul, {d, d}), a[2].str());
    }
    case Op::l1_loss: return reduce(op(Op::abs, {op(Op::sub, {a[0], a[1]})}), a[2].str());
    case Op::binary_cross_entropy: {
      const Tensor &x = a[0].tensor(), &t = a[1].tensor();
      Tensor lx = op(Op::clamp, {op(Op::log, {x}), -100.0});
      Tensor l1x = op(Op::clamp, {op(Op::log, {op(Op::sub, {1, x})}), -100.0});
      Tensor loss = op(Op::neg, {op(Op::add, {op(Op::mul, {t, lx}), op(Op::mul, {op(Op::sub, {1, t}), l1x})})});
      if (const Tensor* w = opt(a[2])) loss = op(Op::mul, {loss, *w});
      return reduce(loss, a[3].str());
    }
    case Op::binary_cross_entropy_with_logits: {
      const Tensor &x = a[0].tensor(), &t = a[1].tensor();
      Tensor soft = op(Op::softplus, {op(Op::neg, {x})});  // log(1 + exp(-x)), smooth at 0
      if (const Tensor* pw = opt(a[4])) soft = op(Op::mul, {soft, op(Op::add, {op(Op::mul, {op(Op::sub, {*pw, 1}), t}), 1})});
      Tensor loss = op(Op::add, {op(Op::mul, {op(Op::sub, {1, t}), x}), soft});
      if (const Tensor* w = opt(a[2])) loss = op(Op::mul, {loss, *w});
      return reduce(loss, a[3].str());
    }
    case Op::interpolate: return interpolate(a);
    case Op::dropout: {
      const Tensor& x = a[0].tensor();
      double p = a[1].to_double();
      if (!a[2].to_bool() || p == 0) return op(Op::clone, {x});
      if (p >= 1) return op(Op::mul, {x, 0.0});
      Tensor keep = op(Op::to_dtype, {op(Op::bernoulli, {x, 1.0 - p}), Value(x.dtype())});
      return op(Op::mul, {x, op(Op::mul, {keep, 1.0 / (1.0 - p)})});
    }
    default: break;
  }
  TC_ASSERT(false, "no decomposition for this op");
}

}  // namespace tc::autograd
