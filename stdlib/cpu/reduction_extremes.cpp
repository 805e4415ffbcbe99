// CPU kernels of the max/min reductions: amax, amin (values only, vectorized lanes) and max_dim,
// min_dim, argmax, argmin (with 1-based indices). NaN wins over every number (the first NaN for
// indices); ties give the first occurrence.
#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

template <typename T>
constexpr bool kFloating = std::is_floating_point_v<opmath_t<T>>;

Tensor amax_amin(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor& t = a[0].tensor();
  auto red = reduced_dims(op_name(op), t, a[1]);
  bool max = op == Op::amax;
  Tensor out;
  visit_dtype(t.dtype(), [&]<typename T>() {
    using V = opmath_t<T>;
    using Acc = std::conditional_t<kFloating<T>, double, int64_t>;
    out = Tensor::empty(m.sizes, kFloating<T> ? DType::Float64 : DType::Int64);
    Acc* o = out.data<Acc>();
    if (auto c = as_columns(t, red)) {  // a NaN, once in an accumulator, stays there
      using L = std::numeric_limits<Acc>;
      constexpr Acc big = L::has_infinity ? L::infinity() : L::max();
      if (max)
        reduce_columns<Acc, T>(*c, o, kFloating<T> ? -big : L::lowest(), [](Acc s, Acc v) { return v > s || v != v ? v : s; });
      else
        reduce_columns<Acc, T>(*c, o, big, [](Acc s, Acc v) { return v < s || v != v ? v : s; });
      return;
    }
    Rows in = as_rows(t, red);
    const T* x = in.t.data<T>();
    auto id = [](V v) { return v; };
    auto row = [&](int64_t r, int64_t b, int64_t e) -> Acc {
      const T* p = x + r * in.len + b;
      return max ? (Acc)lane_extreme<true>(p, e - b, id) : (Acc)lane_extreme<false>(p, e - b, id);
    };
    auto combine = [&](Acc u, Acc v) { return max ? extreme2<true>(u, v) : extreme2<false>(u, v); };
    reduce_rows<Acc>(in.rows, in.len, o, Acc(0), row, combine);  // len > 0 (meta rule)
  });
  return out.to(m.dtype);
}

template <typename V>
struct Best {
  V v;
  int64_t i;
};

// The first NaN, else the first maximum (Max) or minimum of x[b, e), e > b.
template <bool Max, typename T>
Best<opmath_t<T>> scan_best(const T* x, int64_t b, int64_t e) {
  using V = opmath_t<T>;
  Best<V> best{load(x, b), b};
  if (best.v != best.v) return best;
  for (int64_t i = b + 1; i < e; i++) {
    V v = load(x, i);
    if (v != v) return {v, i};
    if (Max ? v > best.v : v < best.v) best = {v, i};
  }
  return best;
}

template <bool Max, typename V>
Best<V> combine_best(Best<V> a, Best<V> b) {  // a comes first
  if (a.v != a.v) return a;
  if (b.v != b.v) return b;
  return (Max ? b.v > a.v : b.v < a.v) ? b : a;
}

// values (may be undefined: argmax/argmin) and 1-based indices, both contiguous rows.
void best_rows(const Rows& in, bool max, Tensor values, Tensor indices) {
  visit_dtype(in.t.dtype(), [&]<typename T>() {
    using V = opmath_t<T>;
    const T* x = in.t.data<T>();
    std::vector<Best<V>> best(in.rows);
    auto row = [&](int64_t r, int64_t b, int64_t e) {
      const T* p = x + r * in.len;
      return max ? scan_best<true>(p, b, e) : scan_best<false>(p, b, e);
    };
    auto combine = [&](Best<V> u, Best<V> v) { return max ? combine_best<true>(u, v) : combine_best<false>(u, v); };
    reduce_rows<Best<V>>(in.rows, in.len, best.data(), Best<V>{V(0), 0}, row, combine);
    int64_t* idx = indices.data<int64_t>();
    for (int64_t r = 0; r < in.rows; r++) idx[r] = best[r].i + 1;
    if (values.defined()) {
      T* val = values.data<T>();
      for (int64_t r = 0; r < in.rows; r++) val[r] = x[r * in.len + best[r].i];
    }
  });
}

}  // namespace

Stack cpu_extremes(Op op, const Stack& a, const Metas& out) {
  const Tensor& t = a[0].tensor();
  switch (op) {
    case Op::amax:
    case Op::amin: return {amax_amin(op, a, out[0])};
    case Op::max_dim:
    case Op::min_dim: {
      Rows in = dim_last_rows(t, wrap_dim(a[1].to_int(), t.dim()));
      Tensor values = empty_from_meta(out[0]), indices = empty_from_meta(out[1]);
      best_rows(in, op == Op::max_dim, values, indices);
      return {values, indices};
    }
    case Op::argmax:
    case Op::argmin: {
      Rows in = a[1].is_none() ? as_rows(t, std::vector<bool>(t.dim(), true))
                               : dim_last_rows(t, wrap_dim(a[1].to_int(), t.dim()));
      Tensor indices = empty_from_meta(out[0]);
      best_rows(in, op == Op::argmax, Tensor(), indices);
      return {indices};
    }
    default: TC_ASSERT(false, "not a max/min reduction");
  }
}

}  // namespace tc::cpu
