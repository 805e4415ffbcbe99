// Loss functions of the nn group: cross_entropy and nll_loss (class targets 1-based, or class
// probabilities), mse_loss, l1_loss, binary_cross_entropy(_with_logits). Classification losses make
// one fused pass per position (max, log-sum-exp, picked class, smoothing term).
#include <atomic>

#include "cpu/nn.h"

namespace tc::cpu {
namespace {

// input [N, C, d...] (or [C]) seen as n x c x d; `prob`: target holds class probabilities.
struct ClassLayout {
  int64_t n = 1, c = 1, d = 1;
  bool prob = false;
  Shape out_none;  // the shape of reduction="none"
};

ClassLayout class_layout(const char* op, const Stack& a, bool allow_prob) {
  const Tensor &x = a[0].tensor(), &t = a[1].tensor();
  TC_CHECK(x.dim() >= 1, ShapeError, "%s(): expected input with 1 or more dimensions (got 0)", op);
  check_floating(op, "input", x);
  ClassLayout l;
  l.c = x.dim() == 1 ? x.sizes()[0] : x.sizes()[1];
  l.n = x.dim() == 1 ? 1 : x.sizes()[0];
  for (int64_t i = 2; i < x.dim(); i++) l.d *= x.sizes()[i];
  if (allow_prob && t.sizes() == x.sizes()) {
    TC_CHECK(is_floating(t.dtype()), DTypeError,
             "%s(): expected floating point type for target with class probabilities, got %s", op,
             dtype_name(t.dtype()));
    l.prob = true;
    l.out_none = x.sizes();
    l.out_none.erase(l.out_none.begin() + (x.dim() == 1 ? 0 : 1));
  } else {
    TC_CHECK(t.dtype() == DType::Int64, DTypeError,
             "%s(): expected a target of type int64 (class indices, 1-based), got %s", op,
             dtype_name(t.dtype()));
    if (x.dim() == 1) {
      TC_CHECK(t.dim() == 0, ShapeError,
               "%s(): expected a 0-D target for input of shape %s, got target of shape %s", op,
               shape_string(x.sizes()).c_str(), shape_string(t.sizes()).c_str());
    } else {
      TC_CHECK(t.dim() >= 1 && t.sizes()[0] == l.n, ShapeError,
               "%s(): expected input batch_size (%lld) to match target batch_size (%lld)", op,
               (long long)l.n, (long long)(t.dim() ? t.sizes()[0] : 0));
      Shape want = x.sizes();
      want.erase(want.begin() + 1);
      TC_CHECK(t.sizes() == want, ShapeError, "%s(): expected target size %s, got %s", op,
               shape_string(want).c_str(), shape_string(t.sizes()).c_str());
    }
    l.out_none = t.sizes();
  }
  if (!a[2].is_none())
    TC_CHECK(a[2].tensor().numel() == l.c, ShapeError,
             "%s(): weight tensor should be defined either for all %lld classes or no classes but "
             "got weight tensor of shape: %s",
             op, (long long)l.c, shape_string(a[2].tensor().sizes()).c_str());
  return l;
}

TensorMeta class_meta(const char* op, const Stack& a, bool cross_entropy) {
  ClassLayout l = class_layout(op, a, cross_entropy);
  Reduction r = parse_reduction(a[3].str());
  if (cross_entropy) {
    double ls = a[5].to_double();
    TC_CHECK(ls <= 1.0, ValueError, "%s(): label_smoothing must be between 0.0 and 1.0. Got: %g",
             op, ls);
    TC_CHECK(!l.prob || a[4].to_int() < 1, ValueError,
             "%s(): ignore_index is not supported for floating point target", op);
  }
  const Tensor& x = a[0].tensor();
  return contiguous_meta(r == Reduction::None ? l.out_none : Shape{}, x.dtype(), x.device());
}

// Per position (sample, spatial index): -w[t]*logp[t], the smoothing term -sum_c w[c]*logp[c]
// (or, for probability targets, -sum_c w[c]*t'[c]*logp[c]) and w[t].
template <typename T>
void class_terms(const Stack& a, const ClassLayout& l, bool log_softmax, double smoothing,
                 const std::vector<int64_t>& cls, std::vector<double>& nll,
                 std::vector<double>& smooth, std::vector<double>& wt) {
  Tensor x = a[0].tensor().contiguous();
  Tensor tp = l.prob ? a[1].tensor().to(DType::Float64).contiguous() : Tensor();
  std::vector<double> w = to_vector<double>(opt_tensor(a[2]));
  const T* px = x.data<T>();
  const double* pt = l.prob ? tp.data<double>() : nullptr;
  int64_t c = l.c, d = l.d;
  using A = opmath_t<T>;
  parallel_for(0, l.n * d, row_grain(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      int64_t k = l.prob ? 0 : cls[i];
      if (k < 0) continue;  // ignored: zeros
      const T* row = px + (i / d) * c * d + i % d;
      auto x = [&](int64_t j) { return A(row[j * d]); };
      A lse = 0;
      if (log_softmax) {
        A mx = -INFINITY;
        for (int64_t j = 0; j < c; j++) mx = std::max(mx, x(j));
        if (std::isinf(mx)) mx = 0;
        double sum = 0;
        for (int64_t j = 0; j < c; j++) sum += std::exp(x(j) - mx);
        lse = mx + A(std::log(sum));
      }
      // log-probability of class j, rounded to T like the output of PyTorch's log_softmax
      auto logp = [&](int64_t j) { return log_softmax ? (double)A(T(x(j) - lse)) : (double)x(j); };
      double s = 0;
      if (l.prob) {
        const double* trow = pt + (i / d) * c * d + i % d;
        for (int64_t j = 0; j < c; j++)
          s -= (w.empty() ? 1.0 : w[j]) * (trow[j * d] * (1 - smoothing) + smoothing / c) * logp(j);
        nll[i] = s;
        continue;
      }
      double wk = w.empty() ? 1.0 : w[k];
      nll[i] = -wk * logp(k);
      wt[i] = wk;
      if (smoothing > 0) {
        for (int64_t j = 0; j < c; j++) s -= (w.empty() ? 1.0 : w[j]) * logp(j);
        smooth[i] = s;
      }
    }
  });
}

Tensor class_kernel(const Stack& a, const TensorMeta& m, bool cross_entropy) {
  const char* op = cross_entropy ? "cross_entropy" : "nll_loss";
  ClassLayout l = class_layout(op, a, cross_entropy);
  Reduction r = parse_reduction(a[3].str());
  int64_t ignore = a[4].to_int(), n = l.n * l.d;
  double smoothing = cross_entropy ? std::max(0.0, a[5].to_double()) : 0.0;
  std::vector<int64_t> cls;  // 0-based class per position, -1 where ignored
  if (!l.prob) {
    Tensor t = a[1].tensor().contiguous();
    const int64_t* pt = t.data<int64_t>();
    cls.resize(n);
    for (int64_t i = 0; i < n; i++) {
      int64_t v = pt[i];
      if (v == ignore) {
        cls[i] = -1;
        continue;
      }
      TC_CHECK(v >= 1 && v <= l.c, IndexError,
               "%s(): target %lld is out of bounds (targets are 1-based, %lld classes)", op,
               (long long)v, (long long)l.c);
      cls[i] = v - 1;
    }
  }
  std::vector<double> nll(n, 0.0), smooth(n, 0.0), wt(n, 0.0);
  Tensor out = empty_from_meta(m);
  visit_floating(out.dtype(), [&]<typename T>() {
    class_terms<T>(a, l, cross_entropy, smoothing, cls, nll, smooth, wt);
    T* o = out.data<T>();
    double eps = l.prob ? 0.0 : smoothing, c = (double)l.c;
    if (r == Reduction::None) {
      for (int64_t i = 0; i < n; i++)
        o[i] = T(opmath_t<T>((1 - eps) * nll[i] + eps / c * smooth[i]));
      return;
    }
    double s_nll = 0, s_smooth = 0, s_wt = 0;
    for (int64_t i = 0; i < n; i++) {
      s_nll += nll[i];
      s_smooth += smooth[i];
      s_wt += wt[i];
    }
    if (r == Reduction::Mean) {
      if (l.prob) {
        s_nll /= n;
      } else {
        s_nll /= s_wt;
        // PyTorch: the smoothing term is averaged over all positions without weight, else by sum of
        // w[t]
        s_smooth /= a[2].is_none() ? (double)n : s_wt;
      }
    }
    o[0] = T(opmath_t<T>((1 - eps) * s_nll + (eps > 0 ? eps / c * s_smooth : 0.0)));
  });
  return out;
}

// Writes per-element losses f(i) (reduction none) or their mean/sum into out.
template <typename T, typename F>
void reduce_into(Tensor& out, int64_t n, Reduction r, F&& f) {
  T* o = out.data<T>();
  if (r == Reduction::None) {
    parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) o[i] = T(f(i));
    });
    return;
  }
  double s = chunked_sum(n, [&](int64_t i) { return (double)f(i); });
  o[0] = T(opmath_t<T>(r == Reduction::Sum ? s : s / (double)n));
}

// Shape and dtype of the elementwise losses: PyTorch's promotion, floating only.
TensorMeta pointwise_loss_meta(const char* op, const Tensor& x, const Tensor& t, const Shape& shape,
                               const std::string& reduction) {
  DType dt = result_type({x, t});
  TC_CHECK(is_floating(dt), DTypeError,
           "%s(): expected floating point input and target, got %s and %s", op,
           dtype_name(x.dtype()), dtype_name(t.dtype()));
  Reduction r = parse_reduction(reduction);
  return contiguous_meta(r == Reduction::None ? shape : Shape{}, dt, x.device());
}

void check_broadcasts_to(const char* op, const char* what, const Value& v, const Shape& shape) {
  if (v.is_none()) return;
  const Shape& s = v.tensor().sizes();
  bool ok = (int64_t)s.size() <= (int64_t)shape.size();
  for (size_t i = 0; ok && i < s.size(); i++) {
    int64_t want = shape[shape.size() - s.size() + i];
    ok = s[i] == want || s[i] == 1;
  }
  TC_CHECK(ok, ShapeError, "%s(): %s of shape %s cannot be broadcast to the input shape %s", op,
           what, shape_string(s).c_str(), shape_string(shape).c_str());
}

}  // namespace

TensorMeta cross_entropy_meta(const Stack& a) {
  return class_meta("cross_entropy", a, true);
}
Tensor cross_entropy_kernel(const Stack& a, const TensorMeta& m) {
  return class_kernel(a, m, true);
}
TensorMeta nll_loss_meta(const Stack& a) {
  return class_meta("nll_loss", a, false);
}
Tensor nll_loss_kernel(const Stack& a, const TensorMeta& m) {
  return class_kernel(a, m, false);
}

// ---- mse_loss and l1_loss: broadcast input and target -------------------------------------------
TensorMeta mse_loss_meta(const Stack& a) {
  const Tensor &x = a[0].tensor(), &t = a[1].tensor();
  return pointwise_loss_meta("mse_loss", x, t, broadcast_shapes(x.sizes(), t.sizes()), a[2].str());
}
TensorMeta l1_loss_meta(const Stack& a) {
  const Tensor &x = a[0].tensor(), &t = a[1].tensor();
  return pointwise_loss_meta("l1_loss", x, t, broadcast_shapes(x.sizes(), t.sizes()), a[2].str());
}

static Tensor distance_loss(const Stack& a, const TensorMeta& m, bool squared) {
  Shape shape = broadcast_shapes(a[0].tensor().sizes(), a[1].tensor().sizes());
  Tensor x = expand_as_contiguous(a[0].tensor(), shape, m.dtype),
         t = expand_as_contiguous(a[1].tensor(), shape, m.dtype);
  Tensor out = empty_from_meta(m);
  visit_floating(m.dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const T *px = x.data<T>(), *pt = t.data<T>();
    reduce_into<T>(out, x.numel(), parse_reduction(a[2].str()), [&](int64_t i) {
      A d = A(px[i]) - A(pt[i]);
      return squared ? d * d : std::abs(d);
    });
  });
  return out;
}
Tensor mse_loss_kernel(const Stack& a, const TensorMeta& m) {
  return distance_loss(a, m, true);
}
Tensor l1_loss_kernel(const Stack& a, const TensorMeta& m) {
  return distance_loss(a, m, false);
}

// ---- binary_cross_entropy(input, target, weight, reduction): input holds probabilities
// -----------
TensorMeta binary_cross_entropy_meta(const Stack& a) {
  const Tensor &x = a[0].tensor(), &t = a[1].tensor();
  check_floating("binary_cross_entropy", "input", x);
  TC_CHECK(t.sizes() == x.sizes(), ShapeError,
           "binary_cross_entropy(): using a target size (%s) that is different to the input size "
           "(%s) is not supported",
           shape_string(t.sizes()).c_str(), shape_string(x.sizes()).c_str());
  TC_CHECK(t.dtype() == x.dtype(), DTypeError,
           "binary_cross_entropy(): found target of dtype %s but expected %s",
           dtype_name(t.dtype()), dtype_name(x.dtype()));
  check_broadcasts_to("binary_cross_entropy", "weight", a[2], x.sizes());
  return pointwise_loss_meta("binary_cross_entropy", x, t, x.sizes(), a[3].str());
}

Tensor binary_cross_entropy_kernel(const Stack& a, const TensorMeta& m) {
  const Shape& shape = a[0].tensor().sizes();
  Tensor x = a[0].tensor().contiguous(), t = a[1].tensor().contiguous(), out = empty_from_meta(m);
  Tensor w = a[2].is_none() ? Tensor() : expand_as_contiguous(a[2].tensor(), shape, m.dtype);
  visit_floating(m.dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const T *px = x.data<T>(), *pt = t.data<T>(), *pw = w.defined() ? w.data<T>() : nullptr;
    std::atomic<bool> bad{false};
    parallel_for(0, x.numel(), 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++)
        if (!(A(px[i]) >= 0 && A(px[i]) <= 1)) bad = true;
    });
    TC_CHECK(!bad, ValueError,
             "binary_cross_entropy(): all elements of input should be between 0 and 1");
    reduce_into<T>(out, x.numel(), parse_reduction(a[3].str()), [&](int64_t i) {
      A xv = A(px[i]), tv = A(pt[i]);
      A l = (tv - A(1)) * std::max(A(std::log1p(-xv)), A(-100)) -
            tv * std::max(A(std::log(xv)), A(-100));
      return pw ? A(T(l)) * A(pw[i]) : l;
    });
  });
  return out;
}

// ---- binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight)
// ---------------
TensorMeta binary_cross_entropy_with_logits_meta(const Stack& a) {
  const Tensor &x = a[0].tensor(), &t = a[1].tensor();
  const char* op = "binary_cross_entropy_with_logits";
  TC_CHECK(t.sizes() == x.sizes(), ShapeError,
           "%s(): target size (%s) must be the same as input size (%s)", op,
           shape_string(t.sizes()).c_str(), shape_string(x.sizes()).c_str());
  check_broadcasts_to(op, "weight", a[2], x.sizes());
  check_broadcasts_to(op, "pos_weight", a[4], x.sizes());
  return pointwise_loss_meta(op, x, t, x.sizes(), a[3].str());
}

Tensor binary_cross_entropy_with_logits_kernel(const Stack& a, const TensorMeta& m) {
  const Shape& shape = a[0].tensor().sizes();
  auto expand = [&](const Value& v) {
    return v.is_none() ? Tensor() : expand_as_contiguous(v.tensor(), shape, m.dtype);
  };
  Tensor x = expand(a[0]), t = expand(a[1]), w = expand(a[2]), pw = expand(a[4]),
         out = empty_from_meta(m);
  visit_floating(m.dtype, [&]<typename T>() {
    using A = opmath_t<T>;
    const T *px = x.data<T>(), *pt = t.data<T>();
    const T *pwt = w.defined() ? w.data<T>() : nullptr,
            *ppw = pw.defined() ? pw.data<T>() : nullptr;
    reduce_into<T>(out, x.numel(), parse_reduction(a[3].str()), [&](int64_t i) {
      // (1 - t) x + lw (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0), lw = 1 + (pos_weight - 1)
      // t
      A xv = A(px[i]), tv = A(pt[i]), mv = std::max(-xv, A(0));
      A lw = ppw ? (A(ppw[i]) - A(1)) * tv + A(1) : A(1);
      A l = (A(1) - tv) * xv + lw * (std::log(std::exp(-mv) + std::exp(-xv - mv)) + mv);
      return pwt ? l * A(pwt[i]) : l;
    });
  });
  return out;
}

}  // namespace tc::cpu
