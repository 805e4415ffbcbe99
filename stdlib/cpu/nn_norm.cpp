// Normalisation ops of the nn group: batch_norm (with the in-place running-stat update),
// layer_norm, group_norm and rms_norm. Statistics accumulate in double (PyTorch's CPU acc type),
// each row or channel is normalised in one pass with a fused scale and shift.
#include <limits>

#include "cpu/nn.h"

namespace tc::cpu {
namespace {

// Mean and biased variance of `n` values at p[0..n), two passes over data that is in cache.
template <typename T>
void moments(const T* p, int64_t n, double* mean, double* var) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)opmath_t<T>(p[i]);
  double mu = n ? s / n : 0, q = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)opmath_t<T>(p[i]) - mu;
    q += d * d;
  }
  *mean = mu;
  *var = n ? q / n : 0;
}

// torch.finfo(dtype).eps
template <typename T>
double machine_eps() {
  if constexpr (std::is_same_v<T, Half>) return 0.0009765625;   // 2^-10
  if constexpr (std::is_same_v<T, BFloat16>) return 0.0078125;  // 2^-7
  return (double)std::numeric_limits<opmath_t<T>>::epsilon();
}

// Elements per (sample, channel) of an [N, C, *] tensor.
int64_t spatial_numel(const Tensor& x) {
  return shape_numel(Shape(x.sizes().begin() + 2, x.sizes().end()));
}

void check_param(const char* op, const char* what, const Value& v, int64_t c) {
  if (v.is_none()) return;
  TC_CHECK(v.tensor().numel() == c, ShapeError, "%s(): %s should contain %lld elements not %lld",
           op, what, (long long)c, (long long)v.tensor().numel());
}

// Checks that `shape` is the trailing part of x's shape and weight/bias have exactly that shape;
// returns the number of normalised elements per row.
int64_t check_normalized_shape(const char* op, const Tensor& x, const IntList& shape,
                               const Value& w, const Value& b) {
  TC_CHECK(!shape.empty(), ShapeError,
           "%s(): expected normalized_shape to be at least 1-dimensional", op);
  Shape ns(shape.begin(), shape.end());
  int64_t r = x.dim(), k = (int64_t)ns.size();
  bool ok = r >= k;
  for (int64_t i = 0; ok && i < k; i++) ok = x.sizes()[r - k + i] == ns[i];
  TC_CHECK(ok, ShapeError,
           "%s(): given normalized_shape=%s, expected input with shape [*, %s], but got input of "
           "size %s",
           op, shape_string(ns).c_str(),
           shape_string(ns).substr(1, shape_string(ns).size() - 2).c_str(),
           shape_string(x.sizes()).c_str());
  for (const Value* p : {&w, &b}) {
    if (p->is_none()) continue;
    TC_CHECK(p->tensor().sizes() == ns, ShapeError,
             "%s(): expected %s to be of same shape as normalized_shape, but got %s of shape %s "
             "and normalized_shape = %s",
             op, p == &w ? "weight" : "bias", p == &w ? "weight" : "bias",
             shape_string(p->tensor().sizes()).c_str(), shape_string(ns).c_str());
  }
  return shape_numel(ns);
}

// out[r, i] = (x[r, i] - mean[r]) * rstd[r] * w[i] + b[i] over rows of length n; `rms` skips the
// mean.
template <typename T>
void normalize_rows(const T* x, T* out, int64_t rows, int64_t n, const std::vector<opmath_t<T>>& w,
                    const std::vector<opmath_t<T>>& b, double eps, bool rms) {
  using A = opmath_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
      const T* p = x + r * n;
      T* o = out + r * n;
      double mean = 0, var = 0;
      if (rms) {
        for (int64_t i = 0; i < n; i++) var += (double)A(p[i]) * (double)A(p[i]);
        var = n ? var / n : 0;
      } else {
        moments(p, n, &mean, &var);
      }
      A rstd = A(1.0 / std::sqrt(var + eps)), mu = A(mean);
      for (int64_t i = 0; i < n; i++) {
        A v = (A(p[i]) - mu) * rstd;
        if (!w.empty()) v *= w[i];
        if (!b.empty()) v += b[i];
        o[i] = T(v);
      }
    }
  });
}

}  // namespace

// ---- batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
// ----------
TensorMeta batch_norm_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  check_floating("batch_norm", "input", x);
  TC_CHECK(x.dim() >= 2, ShapeError,
           "batch_norm(): expected input of shape [N, C, *] (2 or more dims), got %s",
           shape_string(x.sizes()).c_str());
  int64_t c = x.sizes()[1];
  check_param("batch_norm", "weight", a[1], c);
  check_param("batch_norm", "bias", a[2], c);
  check_param("batch_norm", "running_mean", a[3], c);
  check_param("batch_norm", "running_var", a[4], c);
  if (a[5].to_bool()) {
    TC_CHECK(
        x.numel() / std::max<int64_t>(c, 1) != 1, ValueError,
        "batch_norm(): expected more than 1 value per channel when training, got input size %s",
        shape_string(x.sizes()).c_str());
  } else {
    TC_CHECK(!a[3].is_none() && !a[4].is_none(), ValueError,
             "batch_norm(): running_mean and running_var must be defined in evaluation mode");
  }
  if (a.size() > 8 && !a[8].is_none())
    TC_CHECK(a[8].tensor().numel() == 1, ShapeError,
             "batch_norm(): num_batches_tracked should contain 1 element not %lld", (long long)a[8].tensor().numel());
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

void count_batch(const Stack& a) {
  if (!a[5].to_bool() || a.size() <= 8 || a[8].is_none()) return;
  Tensor t = a[8].tensor();
  t.copy_from(call1(Op::add, {t, 1}));
}

Tensor batch_norm_kernel(const Stack& a, const TensorMeta& m) {
  Tensor x = a[0].tensor().contiguous(), out = empty_from_meta(m);
  const Tensor *weight = opt_tensor(a[1]), *bias = opt_tensor(a[2]);
  const Tensor *run_mean = opt_tensor(a[3]), *run_var = opt_tensor(a[4]);
  bool training = a[5].to_bool();
  double momentum = a[6].to_double(), eps = a[7].to_double();
  int64_t n = x.sizes()[0], c = x.sizes()[1], s = spatial_numel(x), count = n * s;
  std::vector<double> mean(c), var(c);
  visit_floating(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    if (training) {
      parallel_for(0, c, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, count)),
                   [&](int64_t cb, int64_t ce) {
                     for (int64_t ch = cb; ch < ce; ch++) {
                       double sum = 0, sq = 0;
                       for (int64_t i = 0; i < n; i++)
                         for (int64_t j = 0; j < s; j++)
                           sum += (double)opmath_t<T>(px[(i * c + ch) * s + j]);
                       double mu = count ? sum / count : 0;
                       for (int64_t i = 0; i < n; i++)
                         for (int64_t j = 0; j < s; j++) {
                           double d = (double)opmath_t<T>(px[(i * c + ch) * s + j]) - mu;
                           sq += d * d;
                         }
                       mean[ch] = mu;
                       var[ch] = sq;  // sum of squared deviations for now
                     }
                   });
    }
  });
  if (training) {
    // running = (1 - momentum) * running + momentum * batch statistic (unbiased variance)
    auto update = [&](const Tensor* run, const std::vector<double>& stat, double div) {
      if (!run || count == 0) return;
      std::vector<double> old = to_vector<double>(run);
      Tensor t = Tensor::empty(run->sizes(), DType::Float64);
      for (int64_t ch = 0; ch < c; ch++)
        t.data<double>()[ch] = momentum * stat[ch] / div + (1 - momentum) * old[ch];
      Tensor dst = *run;
      dst.copy_from(t);
    };
    update(run_mean, mean, 1.0);
    update(run_var, var, (double)(count - 1));
    for (int64_t ch = 0; ch < c; ch++) var[ch] = count ? var[ch] / count : 0;
  } else {
    mean = to_vector<double>(run_mean);
    var = to_vector<double>(run_var);
  }
  count_batch(a);
  std::vector<double> w = to_vector<double>(weight), b = to_vector<double>(bias);
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    std::vector<A> scale(c), shift(c);
    for (int64_t ch = 0; ch < c; ch++) {
      double sc = 1.0 / std::sqrt(var[ch] + eps) * (w.empty() ? 1.0 : w[ch]);
      scale[ch] = A(sc);
      shift[ch] = A((b.empty() ? 0.0 : b[ch]) - mean[ch] * sc);
    }
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(0, n * c, row_grain(s), [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; r++) {
        A sc = scale[r % c], sh = shift[r % c];
        for (int64_t j = 0; j < s; j++) po[r * s + j] = T(A(px[r * s + j]) * sc + sh);
      }
    });
  });
  return out;
}

// ---- _batch_norm_backward(grad_out, input, weight, running_mean, running_var, training, eps)
// ----------
Metas batch_norm_backward_meta(const Stack& a) {
  const Tensor &g = a[0].tensor(), &x = a[1].tensor();
  check_floating("_batch_norm_backward", "input", x);
  TC_CHECK(g.dtype() == x.dtype(), DTypeError, "_batch_norm_backward(): expected grad_out of dtype %s, got %s",
           dtype_name(x.dtype()), dtype_name(g.dtype()));
  TC_CHECK(x.dim() >= 2 && g.sizes() == x.sizes(), ShapeError,
           "_batch_norm_backward(): expected grad_out and input of one shape [N, C, *], got %s and %s",
           shape_string(g.sizes()).c_str(), shape_string(x.sizes()).c_str());
  int64_t c = x.sizes()[1];
  check_param("_batch_norm_backward", "weight", a[2], c);
  check_param("_batch_norm_backward", "running_mean", a[3], c);
  check_param("_batch_norm_backward", "running_var", a[4], c);
  DType pt = a[2].is_none() ? x.dtype() : a[2].tensor().dtype();
  TensorMeta p = contiguous_meta({c}, pt, x.device());
  return {contiguous_meta(x.sizes(), x.dtype(), x.device()), p, p};
}

// Per channel over its M = N * S elements, with mean and invstd the batch's (use_batch) or the
// running statistics' and w the weight (1 without one):
//   grad_bias = sum(g), grad_weight = sum(g * (x - mean)) * invstd,
//   grad_input = w * invstd * (g - sum(g) / M - (x - mean) * invstd^2 * sum(g * (x - mean)) / M)
//   (use_batch), or g * w * invstd (running statistics).
Stack batch_norm_backward_kernel(const Stack& a, const Metas& m) {
  Tensor g = a[0].tensor().contiguous(), x = a[1].tensor().contiguous();
  Tensor gx = empty_from_meta(m[0]), gw = empty_from_meta(m[1]), gb = empty_from_meta(m[2]);
  bool use_batch = a[5].to_bool() || a[3].is_none() || a[4].is_none();
  double eps = a[6].to_double();
  int64_t n = x.sizes()[0], c = x.sizes()[1], s = spatial_numel(x), count = n * s;
  std::vector<double> w = to_vector<double>(opt_tensor(a[2]));
  std::vector<double> rm = use_batch ? std::vector<double>() : to_vector<double>(opt_tensor(a[3]));
  std::vector<double> rv = use_batch ? std::vector<double>() : to_vector<double>(opt_tensor(a[4]));
  std::vector<double> dw(c), db(c);
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    const T *px = x.data<T>(), *pg = g.data<T>();
    T* po = gx.data<T>();
    parallel_for(0, c, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, count)), [&](int64_t cb, int64_t ce) {
      for (int64_t ch = cb; ch < ce; ch++) {
        auto each = [&](auto&& f) {
          for (int64_t i = 0; i < n; i++)
            for (int64_t j = (i * c + ch) * s, e = j + s; j < e; j++) f(j);
        };
        double mean = 0, invstd = 0;
        if (use_batch) {
          double sum = 0, sq = 0;
          each([&](int64_t j) { sum += (double)A(px[j]); });
          mean = count ? sum / count : 0;
          each([&](int64_t j) {
            double d = (double)A(px[j]) - mean;
            sq += d * d;
          });
          invstd = 1.0 / std::sqrt((count ? sq / count : 0) + eps);
        } else {
          mean = rm[ch];
          invstd = 1.0 / std::sqrt(rv[ch] + eps);
        }
        double sg = 0, sgx = 0;
        each([&](int64_t j) {
          sg += (double)A(pg[j]);
          sgx += (double)A(pg[j]) * ((double)A(px[j]) - mean);
        });
        dw[ch] = sgx * invstd;
        db[ch] = sg;
        double k = (w.empty() ? 1.0 : w[ch]) * invstd;
        if (use_batch) {
          A kk = A(k), mg = A(count ? sg / count : 0), mu = A(mean);
          A proj = A(count ? invstd * invstd * sgx / count : 0);
          each([&](int64_t j) { po[j] = T(kk * (A(pg[j]) - mg - (A(px[j]) - mu) * proj)); });
        } else {
          A kk = A(k);
          each([&](int64_t j) { po[j] = T(A(pg[j]) * kk); });
        }
      }
    });
  });
  Tensor dwt = Tensor::empty({c}, DType::Float64), dbt = Tensor::empty({c}, DType::Float64);
  std::copy(dw.begin(), dw.end(), dwt.data<double>());
  std::copy(db.begin(), db.end(), dbt.data<double>());
  gw.copy_from(dwt);
  gb.copy_from(dbt);
  return {Value(gx), Value(gw), Value(gb)};
}

// ---- layer_norm(input, normalized_shape, weight, bias, eps) and rms_norm(input, shape, weight,
// eps) -
TensorMeta layer_norm_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  check_floating("layer_norm", "input", x);
  check_normalized_shape("layer_norm", x, a[1].ints(), a[2], a[3]);
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

Tensor layer_norm_kernel(const Stack& a, const TensorMeta& m) {
  Tensor x = a[0].tensor().contiguous(), out = empty_from_meta(m);
  int64_t n = shape_numel(Shape(a[1].ints().begin(), a[1].ints().end()));
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    normalize_rows<T>(x.data<T>(), out.data<T>(), n ? x.numel() / n : 0, n,
                      to_vector<A>(opt_tensor(a[2])), to_vector<A>(opt_tensor(a[3])),
                      a[4].to_double(), false);
  });
  return out;
}

TensorMeta rms_norm_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  check_floating("rms_norm", "input", x);
  check_normalized_shape("rms_norm", x, a[1].ints(), a[2], Value());
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

Tensor rms_norm_kernel(const Stack& a, const TensorMeta& m) {
  Tensor x = a[0].tensor().contiguous(), out = empty_from_meta(m);
  int64_t n = shape_numel(Shape(a[1].ints().begin(), a[1].ints().end()));
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    // eps=None: the machine epsilon of the input's dtype (torch.finfo(dtype).eps)
    double eps = a[3].is_none() ? machine_eps<T>() : a[3].to_double();
    normalize_rows<T>(x.data<T>(), out.data<T>(), n ? x.numel() / n : 0, n,
                      to_vector<A>(opt_tensor(a[2])), {}, eps, true);
  });
  return out;
}

// ---- group_norm(input, num_groups, weight, bias, eps): statistics per (sample, group of channels)
// --
TensorMeta group_norm_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  check_floating("group_norm", "input", x);
  TC_CHECK(x.dim() >= 2, ShapeError,
           "group_norm(): expected input of shape [N, C, *] (2 or more dims), got %s",
           shape_string(x.sizes()).c_str());
  int64_t g = a[1].to_int(), c = x.sizes()[1];
  TC_CHECK(g > 0, ValueError, "group_norm(): num_groups must be positive, got %lld", (long long)g);
  TC_CHECK(c % g == 0, ShapeError,
           "group_norm(): expected number of channels in input to be divisible by num_groups, but "
           "got input of shape %s and num_groups=%lld",
           shape_string(x.sizes()).c_str(), (long long)g);
  for (int i : {2, 3}) {
    if (a[i].is_none()) continue;
    const Tensor& p = a[i].tensor();
    TC_CHECK(p.dim() == 1 && p.numel() == c, ShapeError,
             "group_norm(): expected %s to be a vector of size equal to the number of channels in "
             "input, but got %s of shape %s and input of shape %s",
             i == 2 ? "weight" : "bias", i == 2 ? "weight" : "bias",
             shape_string(p.sizes()).c_str(), shape_string(x.sizes()).c_str());
  }
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

Tensor group_norm_kernel(const Stack& a, const TensorMeta& m) {
  Tensor x = a[0].tensor().contiguous(), out = empty_from_meta(m);
  int64_t n = x.sizes()[0], c = x.sizes()[1], g = a[1].to_int(), s = spatial_numel(x);
  int64_t cg = c / g, block = cg * s;
  double eps = a[4].to_double();
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    std::vector<A> w = to_vector<A>(opt_tensor(a[2])), b = to_vector<A>(opt_tensor(a[3]));
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(0, n * g, row_grain(block), [&](int64_t gb, int64_t ge) {
      for (int64_t k = gb; k < ge; k++) {
        double mean, var;
        moments(px + k * block, block, &mean, &var);
        A rstd = A(1.0 / std::sqrt(var + eps)), mu = A(mean);
        for (int64_t j = 0; j < cg; j++) {
          int64_t ch = (k % g) * cg + j;
          A sc = rstd * (w.empty() ? A(1) : w[ch]), sh = (b.empty() ? A(0) : b[ch]) - mu * sc;
          const T* p = px + k * block + j * s;
          T* o = po + k * block + j * s;
          for (int64_t i = 0; i < s; i++) o[i] = T(A(p[i]) * sc + sh);
        }
      }
    });
  });
  return out;
}

}  // namespace tc::cpu
