// CPU kernels of the two-pass reductions: var, std, var_mean (mean, then the sum of squared
// deviations, both in double) and logsumexp (max, then the sum of exp(x - max)).
#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

double add(double a, double b) { return a + b; }

// Per-row mean and variance (divisor max(0, n - correction)) of a floating input, in double.
void moments(const Stack& a, Op op, Tensor& mean, Tensor& var) {
  const Tensor& t = a[0].tensor();
  double correction = a[2].to_double();
  Rows in = as_rows(t, reduced_dims(op_name(op), t, a[1]));
  double* mu = mean.data<double>();
  double* m2 = var.data<double>();
  int64_t len = in.len;
  visit_floating(t.dtype(), [&]<typename T>() {
    const T* x = in.t.data<T>();
    auto id = [](double v) { return v; };
    reduce_rows<double>(in.rows, len, mu, 0.0,
                        [&](int64_t r, int64_t b, int64_t e) { return lane_sum(x + r * len + b, e - b, id); }, add);
    for (int64_t r = 0; r < in.rows; r++) mu[r] /= (double)len;  // empty: NaN, like PyTorch
    auto dev2 = [&](int64_t r, int64_t b, int64_t e) {
      double c = mu[r];
      return lane_sum(x + r * len + b, e - b, [c](double v) { return (v - c) * (v - c); });
    };
    reduce_rows<double>(in.rows, len, m2, 0.0, dev2, add);
  });
  double div = std::max(0.0, (double)len - correction);
  for (int64_t r = 0; r < in.rows; r++) m2[r] /= div;  // x/0: inf or NaN, like PyTorch
}

Tensor logsumexp(const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  Rows in = as_rows(t.to(m.dtype), reduced_dims("logsumexp", t, a[1]));
  Tensor acc = Tensor::empty(m.sizes, DType::Float64);
  double* out = acc.data<double>();
  std::vector<double> shift(in.rows);
  int64_t len = in.len;
  visit_floating(m.dtype, [&]<typename T>() {
    const T* x = in.t.data<T>();
    auto id = [](opmath_t<T> v) { return v; };
    reduce_rows<double>(
        in.rows, len, shift.data(), -INFINITY,
        [&](int64_t r, int64_t b, int64_t e) -> double { return lane_extreme<true>(x + r * len + b, e - b, id); },
        extreme2<true, double>);
    for (double& s : shift) s = std::isinf(s) ? 0.0 : s;  // all -inf (or an inf): no shift
    auto row = [&](int64_t r, int64_t b, int64_t e) {
      double c = shift[r];
      return lane_sum(x + r * len + b, e - b, [c](double v) { return std::exp(v - c); });
    };
    reduce_rows<double>(in.rows, len, out, 0.0, row, add);
  });
  for (int64_t r = 0; r < in.rows; r++) out[r] = std::log(out[r]) + shift[r];
  return acc.to(m.dtype);
}

}  // namespace

Stack cpu_statistics(Op op, const Stack& a, const Metas& out) {
  if (op == Op::logsumexp) return {logsumexp(a, out[0])};
  TC_ASSERT(op == Op::var || op == Op::std || op == Op::var_mean, "not a statistics reduction");
  Tensor mean = Tensor::empty(out[0].sizes, DType::Float64), var = Tensor::empty(out[0].sizes, DType::Float64);
  moments(a, op, mean, var);
  if (op == Op::std) {
    double* v = var.data<double>();
    for (int64_t i = 0; i < var.numel(); i++) v[i] = std::sqrt(v[i]);
  }
  DType dt = out[0].dtype;
  if (op == Op::var_mean) return {var.to(dt), mean.to(dt)};
  return {var.to(dt)};
}

}  // namespace tc::cpu
