// CPU kernels of the ops along one dim that keep its size: cumsum (accumulates in double or
// wrapping int64), softmax and log_softmax (max subtracted first; sums in double). Each works on
// rows with that dim moved last, then puts the dim back.
#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

Tensor cumsum(const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  int64_t d = wrap_dim(a[1].to_int(), t.dim());
  Rows in = dim_last_rows(t.to(m.dtype), d);
  Tensor tmp = Tensor::empty(in.t.sizes(), m.dtype);
  visit_dtype(m.dtype, [&]<typename T>() {
    const T* x = in.t.data<T>();
    T* y = tmp.data<T>();
    int64_t n = in.len;
    for_rows(in.rows, n, [&](int64_t r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) yr[i] = static_cast<T>(static_cast<opmath_t<T>>(acc += (double)load(xr, i)));
      } else {
        uint64_t acc = 0;
        for (int64_t i = 0; i < n; i++) yr[i] = static_cast<T>((int64_t)(acc += (uint64_t)(int64_t)xr[i]));
      }
    });
  });
  return restore_dim(tmp, d);
}

Tensor softmax(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  int64_t d = wrap_dim(a[1].to_int(), t.dim());
  Rows in = dim_last_rows(t.to(m.dtype), d);
  Tensor tmp = Tensor::empty(in.t.sizes(), m.dtype);
  bool log = op == Op::log_softmax;
  visit_floating(m.dtype, [&]<typename T>() {
    using V = opmath_t<T>;
    const T* x = in.t.data<T>();
    T* y = tmp.data<T>();
    int64_t n = in.len;
    parallel_for(0, in.rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<V> ex(n);
      for (int64_t r = b; r < e; r++) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        V mx = lane_extreme<true>(xr, n, [](V v) { return v; });  // NaN if any: all outputs NaN
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += (double)(ex[i] = std::exp(load(xr, i) - mx));
        if (log) {
          V ls = (V)std::log(s);
          for (int64_t i = 0; i < n; i++) yr[i] = static_cast<T>(load(xr, i) - mx - ls);
        } else {
          for (int64_t i = 0; i < n; i++) yr[i] = static_cast<T>((V)((double)ex[i] / s));
        }
      }
    });
  });
  return restore_dim(tmp, d);
}

}  // namespace

Stack cpu_scan(Op op, const Stack& a, const Metas& out) {
  switch (op) {
    case Op::cumsum: return {cumsum(a, out[0])};
    case Op::softmax:
    case Op::log_softmax: return {softmax(op, a, out[0])};
    default: TC_ASSERT(false, "not a scan op");
  }
}

}  // namespace tc::cpu
