// The helpers that derivatives.def formulas call besides ops: backward formulas too long for one
// line, written in tc ops (like PyTorch's FunctionsManual.cpp), and decompose().
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "autograd_internal.h"
#include "cpu/linalg.h"

namespace tc::autograd {
namespace {

using Kw = std::vector<std::pair<std::string, Value>>;

// ---- helpers: formulas too long for one line, in tc ops ---------------------------------------------
const Tensor& T(const Value& v) { return v.tensor(); }
Tensor zeros_like_t(const Tensor& x, const Tensor& like) {
  return op(Op::zeros, {Value(IntList(x.sizes().begin(), x.sizes().end()))},
            {{"dtype", Value(like.dtype())}, {"device", Value(like.device())}});
}
IntList shape_of(const Tensor& t) { return IntList(t.sizes().begin(), t.sizes().end()); }
int64_t norm_dim(int64_t d, int64_t rank) { return wrap_dim(d, rank); }  // 0-based
// 0-based reduced dims of a reduction's `dim` argument (none or empty: all)
std::vector<int64_t> reduced_dims(const Value& dim, int64_t rank) {
  std::vector<int64_t> r;
  if (dim.is_none() || (dim.is_int_list() && dim.ints().empty())) {
    for (int64_t d = 0; d < rank; d++) r.push_back(d);
  } else if (dim.is_int()) {
    r.push_back(norm_dim(dim.to_int(), rank));
  } else {
    for (int64_t d : dim.ints()) r.push_back(norm_dim(d, rank));
  }
  std::sort(r.begin(), r.end());
  return r;
}
// g of a reduction over `dim` back to x's shape (unsqueezed where keepdim was false, expanded)
Tensor expand_reduced(Tensor g, const Tensor& x, const Value& dim, bool keepdim) {
  if (x.dim() == 0) return op(Op::reshape, {g, IntList{}});
  if (!keepdim)
    for (int64_t d : reduced_dims(dim, x.dim())) g = op(Op::unsqueeze, {g, d + 1});
  return op(Op::expand, {g, shape_of(x)});
}
double reduced_count(const Tensor& x, const Value& dim) {
  double n = 1;
  for (int64_t d : reduced_dims(dim, x.dim())) n *= (double)x.sizes()[d];
  return n;
}
IntList all_dims(const Value& dim, int64_t rank) {
  IntList r;
  for (int64_t d : reduced_dims(dim, rank)) r.push_back(d + 1);
  return r;
}
// pad values (PyTorch order: last dim first) that put `before`/`after` around dim d of a rank-r tensor
IntList pad_around(int64_t d, int64_t rank, int64_t before, int64_t after) {
  IntList p(2 * (rank - d), 0);
  p[2 * (rank - 1 - d)] = before;
  p[2 * (rank - 1 - d) + 1] = after;
  return p;
}

Value h_zeros_like(Env&, const Stack& a) { return Value(zeros_like_t(T(a[0]), T(a[0]))); }
Value h_reshape_like(Env&, const Stack& a) { return Value(op(Op::reshape, {a[0], shape_of(T(a[1]))})); }
Value h_expand_reduced(Env&, const Stack& a) { return Value(expand_reduced(T(a[0]), T(a[1]), a[2], a[3].to_bool())); }
Value h_reduced_count(Env&, const Stack& a) { return Value(reduced_count(T(a[0]), a[1])); }

Value h_amax_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &r = T(a[2]);
  bool keep = a[4].to_bool();
  Tensor mask = op(Op::to_dtype, {op(Op::eq, {x, expand_reduced(r, x, a[3], keep)}), Value(g.dtype())});
  Tensor count = op(Op::sum, {mask, all_dims(a[3], x.dim()), true});
  return Value(op(Op::mul, {expand_reduced(g, x, a[3], keep), op(Op::div, {mask, count})}));
}

Value h_index_backward(Env&, const Stack& a) {
  Tensor g = T(a[0]), idx = T(a[3]);
  const Tensor& x = T(a[1]);
  int64_t d = x.dim() == 0 ? 0 : norm_dim(a[2].to_int(), x.dim());
  if (x.dim() == 0) return Value(g);
  if (!a[4].to_bool()) {
    g = op(Op::unsqueeze, {g, d + 1});
    idx = op(Op::unsqueeze, {idx, d + 1});
  }
  return Value(op(Op::scatter, {zeros_like_t(x, g), d + 1, idx, g}));
}

Value h_var_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  double n = reduced_count(x, a[2]), c = a[3].to_double();
  Tensor mean = op(Op::mean, {x, Value(all_dims(a[2], x.dim())), true});
  Tensor centered = op(Op::sub, {x, mean});
  return Value(op(Op::mul, {expand_reduced(g, x, a[2], a[4].to_bool()), op(Op::mul, {centered, 2.0 / std::max(n - c, 0.0)})}));
}

Value h_norm_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &r = T(a[2]);
  double p = a[3].to_double();
  bool keep = a[5].to_bool();
  Tensor ge = expand_reduced(g, x, a[4], keep), re = expand_reduced(r, x, a[4], keep);
  if (p == 1) return Value(op(Op::mul, {ge, op(Op::sign, {x})}));
  if (p == 0) return Value(zeros_like_t(x, g));  // a count of nonzeros: constant almost everywhere
  if (std::isinf(p)) {
    // max (min for -inf) of |x|: the elements at it share the gradient evenly, as PyTorch's
    Tensor mask = op(Op::to_dtype, {op(Op::eq, {op(Op::abs, {x}), re}), Value(g.dtype())});
    Tensor count = op(Op::sum, {mask, all_dims(a[4], x.dim()), true});
    return Value(op(Op::mul, {op(Op::mul, {ge, op(Op::sign, {x})}), op(Op::div, {mask, count})}));
  }
  TC_CHECK(p > 0, NotImplementedError, "the derivative of norm with p=%g is not implemented", p);
  // x * |x|^(p-2) * g / r^(p-1), zero where the norm is zero
  Tensor scale = p == 2 ? x : op(Op::mul, {x, op(Op::pow, {op(Op::abs, {x}), p - 2})});
  Tensor denom = p == 2 ? re : op(Op::pow, {re, p - 1});
  Tensor v = op(Op::div, {op(Op::mul, {scale, ge}), denom});
  return Value(op(Op::masked_fill, {v, op(Op::eq, {re, 0}), 0}));
}

Value h_prod_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &r = T(a[2]);
  bool keep = a[4].to_bool();
  // g * prod / x (exact for inputs without zeros)
  return Value(op(Op::div, {op(Op::mul, {expand_reduced(g, x, a[3], keep), expand_reduced(r, x, a[3], keep)}), x}));
}

Value h_gelu_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  if (a[2].str() == "tanh") {
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Tensor x2 = op(Op::mul, {x, x});
    Tensor inner = op(Op::mul, {op(Op::add, {x, op(Op::mul, {op(Op::mul, {x2, x}), c})}), k});
    Tensor t = op(Op::tanh, {inner});
    Tensor left = op(Op::mul, {op(Op::add, {t, 1}), 0.5});
    Tensor dinner = op(Op::mul, {op(Op::add, {op(Op::mul, {x2, 3 * c}), 1}), k});
    Tensor right = op(Op::mul, {op(Op::mul, {op(Op::mul, {x, 0.5}), op(Op::sub, {1, op(Op::mul, {t, t})})}), dinner});
    return Value(op(Op::mul, {g, op(Op::add, {left, right})}));
  }
  Tensor cdf = op(Op::mul, {op(Op::add, {op(Op::erf, {op(Op::mul, {x, M_SQRT1_2})}), 1}), 0.5});
  Tensor pdf = op(Op::mul, {op(Op::exp, {op(Op::mul, {op(Op::mul, {x, x}), -0.5})}), 0.3989422804014327});
  return Value(op(Op::mul, {g, op(Op::add, {cdf, op(Op::mul, {x, pdf})})}));
}

Value h_silu_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  Tensor s = op(Op::sigmoid, {x});
  return Value(op(Op::mul, {g, op(Op::mul, {s, op(Op::add, {op(Op::mul, {x, op(Op::sub, {1, s})}), 1})})}));
}

Value h_clamp_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  Tensor keep;
  if (!a[2].is_none()) keep = op(Op::ge, {x, a[2]});
  if (!a[3].is_none()) {
    Tensor hi = op(Op::le, {x, a[3]});
    keep = keep.defined() ? op(Op::logical_and, {keep, hi}) : hi;
  }
  return Value(keep.defined() ? op(Op::mul, {g, keep}) : g);
}

Value h_div_self(Env&, const Stack& a) {
  if (!a[2].is_none()) return Value(zeros_like_t(T(a[0]), T(a[0])));
  return Value(op(Op::div, {a[0], a[1]}));
}
Value h_div_other(Env&, const Stack& a) {
  if (!a[3].is_none()) return Value(zeros_like_t(T(a[0]), T(a[0])));
  return Value(op(Op::neg, {op(Op::div, {op(Op::mul, {a[0], a[1]}), op(Op::mul, {a[2], a[2]})})}));
}

Value h_pow_self(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &e = T(a[2]);
  Tensor d = op(Op::mul, {e, op(Op::pow, {x, op(Op::sub, {e, 1})})});
  return Value(op(Op::mul, {g, op(Op::masked_fill, {d, op(Op::eq, {e, 0}), 0})}));
}
Value h_pow_exponent(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &e = T(a[2]), &r = T(a[3]);
  Tensor d = op(Op::mul, {r, op(Op::log, {x})});
  Tensor zero = op(Op::logical_and, {op(Op::eq, {x, 0}), op(Op::ge, {e, 0})});
  return Value(op(Op::mul, {g, op(Op::masked_fill, {d, zero, 0})}));
}

Value h_minmax(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &y = T(a[2]);
  Tensor wins = op(Op::to_dtype, {op(a[3].to_bool() ? Op::gt : Op::lt, {x, y}), Value(g.dtype())});
  Tensor ties = op(Op::to_dtype, {op(Op::eq, {x, y}), Value(g.dtype())});
  return Value(op(Op::mul, {g, op(Op::add, {wins, op(Op::mul, {ties, 0.5})})}));
}

Value h_inverse_permutation(Env&, const Stack& a) {
  const IntList& p = a[0].ints();
  IntList inv(p.size());
  for (size_t i = 0; i < p.size(); i++) inv[norm_dim(p[i], (int64_t)p.size())] = (int64_t)i + 1;
  return Value(inv);
}

// -x of a number (sub's alpha: a number, not a 0-dim CPU tensor that a compiled CUDA backward
// would have to hold) or of an int list (roll's shifts)
Value h_negate(Env&, const Stack& a) {
  if (a[0].is_int()) return Value(-a[0].to_int());
  if (a[0].is_number()) return Value(-a[0].to_double());
  if (a[0].is_tensor()) return Value(op(Op::neg, {a[0]}));
  IntList r = a[0].ints();
  for (auto& v : r) v = -v;
  return Value(r);
}

// the start (0-based) of a 1-based or negative index into n elements
int64_t start_of(int64_t s, int64_t n) { return s < 0 ? s + n : s - 1; }

Value h_narrow_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  int64_t d = norm_dim(a[2].to_int(), x.dim()), n = x.sizes()[d];
  int64_t s = start_of(a[3].to_int(), n), len = a[4].to_int();
  return Value(op(Op::pad, {g, pad_around(d, x.dim(), s, n - s - len)}));
}

Value h_select_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  int64_t d = norm_dim(a[2].to_int(), x.dim()), n = x.sizes()[d];
  int64_t s = start_of(a[3].to_int(), n);
  return Value(op(Op::pad, {op(Op::unsqueeze, {g, d + 1}), pad_around(d, x.dim(), s, n - s - 1)}));
}

Value h_slice_backward(Env&, const Stack& a) {
  Tensor g = T(a[0]);
  const Tensor& x = T(a[1]);
  int64_t d = norm_dim(a[2].to_int(), x.dim()), n = x.sizes()[d], step = a[5].to_int();
  auto norm = [&](const Value& v, int64_t dflt) { return v.is_none() ? dflt : (v.to_int() < 0 ? n + v.to_int() : v.to_int() - 1); };
  int64_t b = std::clamp<int64_t>(norm(a[3], 0), 0, n);
  int64_t len = g.sizes()[d];
  if (len == 0) return Value(zeros_like_t(x, g));
  if (step > 1) {  // interleave step-1 zeros after each element, then place
    Shape s = g.sizes();
    g = op(Op::unsqueeze, {g, d + 2});
    g = op(Op::pad, {g, pad_around(d + 1, g.dim(), 0, step - 1)});
    s[d] = len * step;
    g = op(Op::reshape, {g, IntList(s.begin(), s.end())});
  }
  return Value(op(Op::pad, {g, pad_around(d, x.dim(), b, n - b - g.sizes()[d])}));
}

Value h_cat_backward(Env&, const Stack& a) {
  const Tensor& g = T(a[0]);
  const TensorList& ts = a[1].tensors();
  int64_t d = norm_dim(a[2].to_int(), g.dim()), off = 0;
  TensorList out;
  for (const Tensor& t : ts) {
    if (t.dim() == 1 && t.sizes()[0] == 0 && g.dim() != 1) {  // legacy empty inputs take no part
      out.push_back(zeros_like_t(t, g));
      continue;
    }
    int64_t n = t.sizes()[d];
    out.push_back(op(Op::narrow, {g, d + 1, off + 1, n}));
    off += n;
  }
  return Value(out);
}

Value h_repeat_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  const IntList& reps = a[2].ints();
  IntList s(reps.size() - x.dim(), 1);
  s.insert(s.end(), x.sizes().begin(), x.sizes().end());
  IntList inter, dims;
  for (size_t i = 0; i < reps.size(); i++) {
    inter.push_back(reps[i]);
    inter.push_back(s[i]);
    dims.push_back(2 * (int64_t)i + 1);
  }
  Tensor r = op(Op::sum, {op(Op::reshape, {g, inter}), dims});
  return Value(op(Op::reshape, {r, shape_of(x)}));
}

Value h_pad_backward(Env&, const Stack& a) {
  TC_CHECK(a[2].str() == "constant", NotImplementedError, "the derivative of pad with mode \"%s\" is not implemented",
           a[2].str().c_str());
  IntList neg = a[1].ints();
  for (auto& v : neg) v = -v;
  return Value(op(Op::pad, {a[0], neg}));
}

Value h_index_select_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &idx = T(a[3]);
  if (x.dim() == 0) return Value(g);
  int64_t d = norm_dim(a[2].to_int(), x.dim());
  IntList view(g.dim(), 1);
  view[d] = -1;
  Tensor i = op(Op::expand, {op(Op::reshape, {idx, view}), shape_of(g)});
  return Value(op(Op::scatter_add, {zeros_like_t(x, g), d + 1, i, g}));
}

Value h_masked_select_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &mask = T(a[2]);
  Shape b = broadcast_shapes(x.sizes(), mask.sizes());
  IntList bs(b.begin(), b.end());
  Tensor m = op(Op::reshape, {op(Op::contiguous, {op(Op::expand, {mask, bs})}), IntList{-1}});
  Tensor idx = op(Op::reshape, {op(Op::nonzero, {m}), IntList{-1}});
  Tensor z = op(Op::zeros, {Value(IntList{shape_numel(b)})}, {{"dtype", Value(g.dtype())}, {"device", Value(g.device())}});
  return Value(op(Op::reshape, {op(Op::scatter, {z, 1, idx, g}), bs}));
}

Value h_matmul_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &y = T(a[2]);
  bool wrt_other = a[3].to_int() == 1;
  auto tr = [](const Tensor& t) { return op(Op::transpose, {t, -1, -2}); };
  if (x.dim() == 1 && y.dim() == 1) return Value(op(Op::mul, {g, wrt_other ? x : y}));
  if (x.dim() == 1) {  // (k) @ (..., k, n) -> (..., n)
    if (!wrt_other) return Value(op(Op::squeeze, {op(Op::matmul, {y, op(Op::unsqueeze, {g, -1})}), IntList{-1}}));
    return Value(op(Op::matmul, {op(Op::unsqueeze, {x, -1}), op(Op::unsqueeze, {g, -2})}));
  }
  if (y.dim() == 1) {  // (..., m, k) @ (k) -> (..., m)
    if (!wrt_other) return Value(op(Op::matmul, {op(Op::unsqueeze, {g, -1}), op(Op::unsqueeze, {y, 1})}));
    return Value(op(Op::squeeze, {op(Op::matmul, {tr(x), op(Op::unsqueeze, {g, -1})}), IntList{-1}}));
  }
  return Value(wrt_other ? op(Op::matmul, {tr(x), g}) : op(Op::matmul, {g, tr(y)}));
}

Value h_linear_weight_backward(Env&, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]);
  if (x.dim() == 1) return Value(op(Op::mul, {op(Op::unsqueeze, {g, -1}), op(Op::unsqueeze, {x, 1})}));
  Tensor g2 = op(Op::reshape, {g, IntList{-1, g.sizes().back()}});
  Tensor x2 = op(Op::reshape, {x, IntList{-1, x.sizes().back()}});
  return Value(op(Op::mm, {op(Op::t, {g2}), x2}));
}

IntList int_pair(const Value& v) {
  const IntList& l = v.ints();
  return l.size() == 1 ? IntList{l[0], l[0]} : l;
}

// The input gradient of y = conv2d(x, w, stride, padding, dilation, groups) for dy = g: a
// transposed convolution of g by w (with conv2d's padding when it is symmetric, otherwise none and
// the result cut to x's size afterwards).
Tensor conv2d_input_grad(const Tensor& g, const Tensor& x, const Tensor& w, const IntList& stride, const Value& padding,
                         const IntList& dil, int64_t groups) {
  int64_t kh = w.sizes()[2], kw = w.sizes()[3];
  auto pad = cpu::conv2d_padding(padding, dil, kh, kw);
  int64_t hp = x.sizes()[2] + pad[0] + pad[1], wp = x.sizes()[3] + pad[2] + pad[3];
  int64_t ho = g.sizes()[2], wo = g.sizes()[3];
  IntList outpad{hp - ((ho - 1) * stride[0] + dil[0] * (kh - 1) + 1), wp - ((wo - 1) * stride[1] + dil[1] * (kw - 1) + 1)};
  if (pad[0] == pad[1] && pad[2] == pad[3])
    return op(Op::conv_transpose2d, {g, w, Value(), stride, IntList{pad[0], pad[2]}, outpad, groups, dil});
  Tensor gx = op(Op::conv_transpose2d, {g, w, Value(), stride, IntList{0, 0}, outpad, groups, dil});
  return op(Op::pad, {gx, IntList{-pad[2], -pad[3], -pad[0], -pad[1]}});
}

Tensor conv2d_weight_grad(const Tensor& g, const Tensor& x, const Tensor& w, const Value& stride, const Value& padding,
                          const Value& dil, int64_t groups) {
  return op(Op::_conv2d_weight_backward, {g, x, shape_of(w), stride, padding, dil, groups});
}

// conv2d: the input's gradient is a transposed convolution of grad, the weight's one
// _conv2d_weight_backward (cuDNN's backward-filter on CUDA).
Value h_conv2d_backward(Env& e, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &w = T(a[2]);
  IntList stride = int_pair(a[4]), dil = int_pair(a[6]);
  int64_t groups = a[7].to_int();
  TensorList out(3);
  const auto& next = e.node.next;
  int slot_x = e.node.first_slot[0], slot_w = e.node.first_slot[1], slot_b = e.node.first_slot[2];
  if (next[slot_x].defined()) out[0] = conv2d_input_grad(g, x, w, stride, a[5], dil, groups);
  if (next[slot_w].defined()) out[1] = conv2d_weight_grad(g, x, w, stride, a[5], dil, groups);
  if (slot_b >= 0 && next[slot_b].defined()) out[2] = op(Op::sum, {g, IntList{1, 3, 4}});
  return Value(out);
}

// _conv2d_weight_backward's input gradient: conv2d's input gradient with the weight's gradient
// `grad` as the weight (a[2]) and grad_out as the output gradient.
Value h_conv2d_input_backward(Env&, const Stack& a) {
  return Value(conv2d_input_grad(T(a[0]), T(a[1]), T(a[2]), int_pair(a[3]), a[4], int_pair(a[5]), a[6].to_int()));
}

// conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation) is the adjoint of
// conv2d with the same weight: the input's gradient is conv2d(grad, w), the weight's is conv2d's
// weight gradient with the roles of input and output gradient exchanged.
Value h_conv_transpose2d_backward(Env& e, const Stack& a) {
  const Tensor &g = T(a[0]), &x = T(a[1]), &w = T(a[2]);
  IntList stride = int_pair(a[4]), pad2 = int_pair(a[5]), dil = int_pair(a[8]);
  int64_t groups = a[7].to_int();
  TensorList out(3);
  const auto& next = e.node.next;
  int slot_x = e.node.first_slot[0], slot_w = e.node.first_slot[1], slot_b = e.node.first_slot[2];
  if (next[slot_x].defined()) out[0] = op(Op::conv2d, {g, w, Value(), stride, Value(pad2), dil, groups});
  if (next[slot_w].defined())  // rows of g past the kernel's reach take no part
    out[1] = conv2d_weight_grad(x, g, w, Value(stride), Value(pad2), Value(dil), groups);
  if (slot_b >= 0 && next[slot_b].defined()) out[2] = op(Op::sum, {g, IntList{1, 3, 4}});
  return Value(out);
}

// einsum: the gradient of operand i is an einsum of grad and the other operands back to operand
// i's subscripts; its labels that appear nowhere else were summed out, so they are broadcast back.
Value h_einsum_backward(Env& e, const Stack& a) {
  const Tensor& g = T(a[0]);
  std::string eq;
  for (char c : a[1].str())
    if (c != ' ') eq += c;
  const TensorList& ops = a[2].tensors();
  size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow);
  for (size_t p = 0;;) {
    size_t q = lhs.find(',', p);
    terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit output: "..." first, then the letters used once, sorted
    std::string letters;
    bool ellipsis = false;
    for (auto& t : terms) {
      ellipsis |= t.find("...") != std::string::npos;
      for (char c : t)
        if (std::isalpha((unsigned char)c)) letters += c;
    }
    std::string once;
    for (char c : letters)
      if (std::count(letters.begin(), letters.end(), c) == 1) once += c;
    std::sort(once.begin(), once.end());
    out = (ellipsis ? "..." : "") + once;
  }
  auto letters_of = [](const std::string& t) {
    std::string r;
    for (char c : t)
      if (std::isalpha((unsigned char)c)) r += c;
    return r;
  };
  TensorList grads(ops.size());
  const auto& next = e.node.next;
  int first = e.node.first_slot[1];
  for (size_t i = 0; i < ops.size(); i++) {
    if (!next[first + i].defined()) continue;
    const std::string& ti = terms[i];
    std::string li = letters_of(ti), elsewhere = letters_of(out);
    for (size_t j = 0; j < ops.size(); j++)
      if (j != i) elsewhere += letters_of(terms[j]);
    bool repeated = false;
    for (char c : li) repeated |= std::count(li.begin(), li.end(), c) > 1;
    bool lost_ellipsis = ti.find("...") != std::string::npos && out.find("...") == std::string::npos;
    TC_CHECK(!repeated && !lost_ellipsis, NotImplementedError,
             "the derivative of einsum(\"%s\") is not implemented (repeated subscripts in an operand, or an "
             "ellipsis summed out)", a[1].str().c_str());
    std::string target;  // ti without the labels that appear nowhere else
    for (size_t k = 0; k < ti.size(); k++)
      if (!std::isalpha((unsigned char)ti[k]) || elsewhere.find(ti[k]) != std::string::npos) target += ti[k];
    std::string geq = out;
    TensorList gops{g};
    for (size_t j = 0; j < ops.size(); j++)
      if (j != i) {
        geq += "," + terms[j];
        gops.push_back(ops[j]);
      }
    geq += "->" + target;
    Tensor r = op(Op::einsum, {geq, Value(gops)});
    if (target != ti) {  // the summed-out labels come back as broadcast dims
      size_t dim = 0;
      for (size_t k = 0; k < ti.size();) {
        if (ti.compare(k, 3, "...") == 0) {
          dim += ops[i].dim() - li.size();
          k += 3;
          continue;
        }
        if (elsewhere.find(ti[k]) == std::string::npos) r = op(Op::unsqueeze, {r, (int64_t)dim + 1});
        dim++;
        k++;
      }
      r = op(Op::expand, {r, shape_of(ops[i])});
    }
    grads[i] = r;
  }
  return Value(grads);
}

// The op's decomposition, recomputed from the saved inputs and differentiated by the engine.
Value h_decompose(Env& e, const Stack&) {
  Node& n = e.node;
  Stack args = n.args;
  for (size_t i = 0; i < args.size(); i++) {
    if (n.first_slot[i] < 0) continue;
    if (schema(n.op).args[i].type == ArgType::TensorList) {
      TensorList l;
      for (auto& s : n.saved[i]) l.push_back(unpack(s, n, "an input"));
      args[i] = Value(l);
    } else {
      const SavedVariable& s = n.saved[i][0];
      args[i] = s.data.defined() ? Value(unpack(s, n, "an input")) : Value();
    }
  }
  Task task;
  task.create_graph = e.create_graph;
  task.keep_graph = e.create_graph;
  task.accumulate = false;
  task.run_hooks = false;
  const std::vector<int>& ins = formula_inputs(e.formula);
  std::vector<int> target_of_input(ins.size(), -1);
  for (size_t k = 0; k < ins.size(); k++) {
    int slot = n.first_slot[ins[k]];
    if (slot < 0 || !n.next[slot].defined()) continue;
    target_of_input[k] = (int)task.targets.size();
    task.targets.push_back(edge_of(args[ins[k]].tensor()));
  }
  Tensor out;
  {
    GradModeGuard on(true);
    task.min_seq = g_next_seq.load();
    out = decomposition(n.op, args);
  }
  TensorList r(ins.size());
  if (out.requires_grad()) {
    run_backward(task, {{edge_of(out), e.grads[0]}});
    for (size_t k = 0; k < ins.size(); k++)
      if (target_of_input[k] >= 0) r[k] = task.captured[target_of_input[k]];
  }
  return ins.size() == 1 ? (r[0].defined() ? Value(r[0]) : Value()) : Value(r);
}

// batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps): one
// _batch_norm_backward (a[0] = grad, then input, weight, bias, running_mean, running_var,
// training, eps); with create_graph the decomposition, whose ops are differentiable again.
Value h_batch_norm_backward(Env& e, const Stack& a) {
  if (e.create_graph) return h_decompose(e, a);
  Stack r = call(Op::_batch_norm_backward, bind(Op::_batch_norm_backward, {a[0], a[1], a[2], a[4], a[5], a[6], a[7]}, {}));
  const auto& next = e.node.next;
  TensorList out(3);
  for (int i = 0; i < 3; i++) {
    int slot = e.node.first_slot[i];
    if (slot >= 0 && next[slot].defined()) out[i] = r[i].tensor();
  }
  return Value(out);
}

// max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode) on CUDA: one
// _max_pool2d_backward (a[0] = grad, then the op's arguments); on other devices, and with
// create_graph, the decomposition (CPU graphs keep generating its backward).
Value h_max_pool2d_backward(Env& e, const Stack& a) {
  if (e.create_graph || !a[1].tensor().device().is_cuda()) return h_decompose(e, a);
  return call(Op::_max_pool2d_backward, bind(Op::_max_pool2d_backward, {a[0], a[1], a[2], a[3], a[4], a[5], a[6]}, {}))[0];
}

const Helper kHelpers[] = {
    {"zeros_like", 1u, h_zeros_like},
    {"reshape_like", 2u, h_reshape_like},
    {"expand_reduced", 2u, h_expand_reduced},
    {"reduced_count", 1u, h_reduced_count},
    {"amax_backward", 0, h_amax_backward},
    {"index_backward", 2u, h_index_backward},
    {"var_backward", 0, h_var_backward},
    {"norm_backward", 0, h_norm_backward},
    {"prod_backward", 0, h_prod_backward},
    {"gelu_backward", 0, h_gelu_backward},
    {"silu_backward", 0, h_silu_backward},
    {"clamp_backward", 0, h_clamp_backward},
    {"div_self_backward", 0, h_div_self},
    {"div_other_backward", 0, h_div_other},
    {"pow_self_backward", 0, h_pow_self},
    {"pow_exponent_backward", 0, h_pow_exponent},
    {"minmax_backward", 0, h_minmax},
    {"inverse_permutation", 0, h_inverse_permutation},
    {"negate", 0, h_negate},
    {"narrow_backward", 2u, h_narrow_backward},
    {"select_backward", 2u, h_select_backward},
    {"slice_backward", 2u, h_slice_backward},
    {"cat_backward", 2u, h_cat_backward},
    {"repeat_backward", 2u, h_repeat_backward},
    {"pad_backward", 0, h_pad_backward},
    {"index_select_backward", 2u, h_index_select_backward},
    {"masked_select_backward", 2u, h_masked_select_backward},
    {"matmul_backward", 0, h_matmul_backward},
    {"linear_weight_backward", 0, h_linear_weight_backward},
    {"conv2d_backward", 0, h_conv2d_backward},
    {"conv2d_input_backward", 2u, h_conv2d_input_backward},
    {"conv_transpose2d_backward", 0, h_conv_transpose2d_backward},
    {"einsum_backward", 0, h_einsum_backward},
    {"decompose", 0, h_decompose, true},
    {"batch_norm_backward", 0, h_batch_norm_backward, true},
    {"max_pool2d_backward", 0, h_max_pool2d_backward, true},
};

}  // namespace

const Helper* find_helper(const std::string& name) {
  for (const Helper& h : kHelpers)
    if (name == h.name) return &h;
  return nullptr;
}

}  // namespace tc::autograd
