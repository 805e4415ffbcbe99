// CPU kernels of the accumulating reductions: sum, mean, prod, any, all, norm. Floating inputs
// accumulate in double (lanes, chunks combined in order), integral ones in wrapping int64; the
// accumulators are converted to the output dtype at the end.
#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

template <typename T>
constexpr bool kFloating = std::is_floating_point_v<opmath_t<T>>;

template <typename T>
double lane_prod(const T* x, int64_t n) {
  double acc[kLanes] = {1, 1, 1, 1, 1, 1, 1, 1};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) acc[j] *= (double)load(x, i + j);
  for (int j = 0; i < n; i++, j++) acc[j] *= (double)load(x, i);
  return ((acc[0] * acc[1]) * (acc[2] * acc[3])) * ((acc[4] * acc[5]) * (acc[6] * acc[7]));
}

template <typename T>
int64_t lane_prod_int(const T* x, int64_t n) {
  uint64_t acc[kLanes] = {1, 1, 1, 1, 1, 1, 1, 1};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) acc[j] *= (uint64_t)(int64_t)x[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] *= (uint64_t)(int64_t)x[i];
  uint64_t p = 1;
  for (int j = 0; j < kLanes; j++) p *= acc[j];
  return (int64_t)p;
}

// Any (All = false) or all (All = true) elements nonzero; NaN counts as nonzero.
template <bool All, typename T>
uint8_t lane_truth(const T* x, int64_t n) {
  uint8_t acc[kLanes];
  for (int j = 0; j < kLanes; j++) acc[j] = All;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) {
      uint8_t nz = load(x, i + j) != 0;
      acc[j] = All ? (acc[j] & nz) : (acc[j] | nz);
    }
  uint8_t r = All;
  for (; i < n; i++) r = All ? (r & (load(x, i) != 0)) : (r | (load(x, i) != 0));
  for (int j = 0; j < kLanes; j++) r = All ? (r & acc[j]) : (r | acc[j]);
  return r;
}

double add(double a, double b) { return a + b; }
int64_t add_int(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

// sum, mean, prod: the input converted to the dtype option (if any), then accumulated.
Tensor sum_prod_mean(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  DType cd = a[3].is_none() ? t.dtype() : a[3].dtype();
  Tensor src = t.to(cd);
  auto red = reduced_dims(op_name(op), t, a[1]);
  bool prod = op == Op::prod;
  Tensor acc = Tensor::empty(m.sizes, is_floating(cd) ? DType::Float64 : DType::Int64);
  int64_t len;
  if (auto c = as_columns(src, red)) {
    len = c->len;
    visit_dtype(cd, [&]<typename T>() {
      if constexpr (kFloating<T>) {
        double* o = acc.data<double>();
        if (prod)
          reduce_columns<double, T>(*c, o, 1.0, [](double s, double v) { return s * v; });
        else
          reduce_columns<double, T>(*c, o, 0.0, add);
      } else {
        int64_t* o = acc.data<int64_t>();
        if (prod)
          reduce_columns<int64_t, T>(*c, o, 1, [](int64_t s, int64_t v) { return (int64_t)((uint64_t)s * (uint64_t)v); });
        else
          reduce_columns<int64_t, T>(*c, o, 0, add_int);
      }
    });
  } else {
    Rows in = as_rows(src, red);
    len = in.len;
    visit_dtype(cd, [&]<typename T>() {
      const T* p = in.t.data<T>();
      if constexpr (kFloating<T>) {
        auto row = [&](int64_t r, int64_t b, int64_t e) {
          return prod ? lane_prod(p + r * len + b, e - b) : lane_sum(p + r * len + b, e - b, [](double v) { return v; });
        };
        reduce_rows<double>(in.rows, len, acc.data<double>(), prod ? 1.0 : 0.0, row,
                            [&](double x, double y) { return prod ? x * y : x + y; });
      } else {
        auto row = [&](int64_t r, int64_t b, int64_t e) {
          return prod ? lane_prod_int(p + r * len + b, e - b)
                      : lane_sum_int(p + r * len + b, e - b, [](int64_t v) { return v; });
        };
        reduce_rows<int64_t>(in.rows, len, acc.data<int64_t>(), prod ? 1 : 0, row, [&](int64_t x, int64_t y) {
          return prod ? (int64_t)((uint64_t)x * (uint64_t)y) : add_int(x, y);
        });
      }
    });
  }
  if (op == Op::mean) {
    double* d = acc.data<double>();
    for (int64_t i = 0; i < acc.numel(); i++) d[i] /= (double)len;  // 0/0: NaN, like PyTorch
  }
  return acc.to(m.dtype);
}

Tensor any_all(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  auto red = reduced_dims(op_name(op), t, a[1]);
  bool all = op == Op::all;
  Tensor acc = Tensor::empty(m.sizes, DType::UInt8);
  uint8_t* o = acc.data<uint8_t>();
  visit_dtype(t.dtype(), [&]<typename T>() {
    using V = opmath_t<T>;
    if (auto c = as_columns(t, red)) {
      if (all)
        reduce_columns<uint8_t, T>(*c, o, 1, [](uint8_t s, V v) { return (uint8_t)(s & (v != 0)); });
      else
        reduce_columns<uint8_t, T>(*c, o, 0, [](uint8_t s, V v) { return (uint8_t)(s | (v != 0)); });
      return;
    }
    Rows in = as_rows(t, red);
    const T* p = in.t.data<T>();
    reduce_rows<uint8_t>(
        in.rows, in.len, o, all,
        [&](int64_t r, int64_t b, int64_t e) {
          return all ? lane_truth<true>(p + r * in.len + b, e - b) : lane_truth<false>(p + r * in.len + b, e - b);
        },
        [&](uint8_t x, uint8_t y) { return (uint8_t)(all ? x & y : x | y); });
  });
  return acc.to(m.dtype);
}

// Vector p-norm: p = 2, 1, inf, -inf, 0 (count of nonzeros) or any other (sum |x|^p)^(1/p).
// An empty reduction gives 0 for every p, as PyTorch 1.13 does.
Tensor norm(const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  double p = a[1].to_double();
  Rows in = as_rows(t, reduced_dims("norm", t, a[2]));
  Tensor acc = Tensor::empty(m.sizes, DType::Float64);
  double* out = acc.data<double>();
  visit_floating(t.dtype(), [&]<typename T>() {
    const T* x = in.t.data<T>();
    int64_t len = in.len;
    auto sum_of = [&](auto f) {
      reduce_rows<double>(in.rows, len, out, 0.0,
                          [&](int64_t r, int64_t b, int64_t e) { return lane_sum(x + r * len + b, e - b, f); }, add);
    };
    if (std::isinf(p)) {
      auto row = [&](int64_t r, int64_t b, int64_t e) -> double {
        auto absf = [](opmath_t<T> v) { return v < 0 ? -v : v; };
        return p > 0 ? lane_extreme<true>(x + r * len + b, e - b, absf) : lane_extreme<false>(x + r * len + b, e - b, absf);
      };
      reduce_rows<double>(in.rows, len, out, 0.0, row,
                          [&](double u, double v) { return p > 0 ? extreme2<true>(u, v) : extreme2<false>(u, v); });
    } else if (p == 2) {
      sum_of([](double v) { return v * v; });
      for (int64_t i = 0; i < acc.numel(); i++) out[i] = std::sqrt(out[i]);
    } else if (p == 1) {
      sum_of([](double v) { return std::fabs(v); });
    } else if (p == 0) {
      sum_of([](double v) { return v != 0 ? 1.0 : 0.0; });
    } else {
      sum_of([p](double v) { return std::pow(std::fabs(v), p); });
      for (int64_t i = 0; i < acc.numel(); i++) out[i] = len == 0 ? 0.0 : std::pow(out[i], 1.0 / p);
    }
  });
  return acc.to(m.dtype);
}

}  // namespace

Stack cpu_accumulate(Op op, const Stack& a, const Metas& out) {
  switch (op) {
    case Op::sum:
    case Op::mean:
    case Op::prod: return {sum_prod_mean(op, a, out[0])};
    case Op::any:
    case Op::all: return {any_all(op, a, out[0])};
    case Op::norm: return {norm(a, out[0])};
    default: TC_ASSERT(false, "not an accumulating reduction");
  }
}

}  // namespace tc::cpu
