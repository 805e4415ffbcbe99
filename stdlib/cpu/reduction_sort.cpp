// CPU kernels of sort (stable: equal values keep their order, ascending or descending) and topk
// (the k largest or smallest, sorted; equal values by position). NaN orders above every number,
// as in PyTorch. Indices are 1-based.
//
// Every element becomes one unsigned integer: an order-preserving key of its value in the high
// bits, its position in the low bits. Integer order is then the wanted total order (ties by
// position, so std::sort is stable) and comparisons are single instructions.
#include <cstring>

#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

// Unsigned key with key(a) < key(b) iff a < b; NaN above +inf, -0.0 equal to 0.0.
template <typename T>
auto sort_key(T x) {
  using V = opmath_t<T>;
  if constexpr (std::is_floating_point_v<V>) {
    using U = std::conditional_t<sizeof(V) == 4, uint32_t, uint64_t>;
    V v = static_cast<V>(x);
    if (v != v) return ~U(0);
    if (v == 0) v = 0;
    U b;
    std::memcpy(&b, &v, sizeof b);
    constexpr U sign = U(1) << (8 * sizeof(U) - 1);
    return (b & sign) ? U(~b) : U(b | sign);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return (uint64_t)x ^ (uint64_t(1) << 63);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return (uint32_t)x ^ 0x80000000u;
  } else {
    return (uint32_t)x;  // uint8, bool
  }
}

// Sorts (or, for topk, selects the first k of) every row; `k` is the output row length.
template <typename T, typename P>
void sort_rows_as(const Rows& in, int64_t k, bool descending, bool partial, Tensor& values, Tensor& indices) {
  constexpr int shift = 4 * sizeof(P);  // key in the high half, position in the low half
  const T* x = in.t.data<T>();
  T* y = values.data<T>();
  int64_t* yi = indices.data<int64_t>();
  int64_t n = in.len;
  P flip = descending ? ~P(0) : P(0);
  P low = (P(1) << shift) - 1;
  parallel_for(0, in.rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<P> items(n);
    for (int64_t r = b; r < e; r++) {
      const T* xr = x + r * n;
      for (int64_t i = 0; i < n; i++) items[i] = (((P)sort_key(xr[i]) ^ flip) << shift) | (P)i;
      if (partial && k < n)
        std::partial_sort(items.begin(), items.begin() + k, items.end());
      else
        std::sort(items.begin(), items.end());
      for (int64_t i = 0; i < k; i++) {
        int64_t j = (int64_t)(items[i] & low);
        y[r * k + i] = xr[j];
        yi[r * k + i] = j + 1;
      }
    }
  });
}

void sort_rows(const Rows& in, int64_t k, bool descending, bool partial, Tensor& values, Tensor& indices) {
  visit_dtype(in.t.dtype(), [&]<typename T>() {
    if (sizeof(sort_key(T())) == 4 && in.len <= (int64_t)UINT32_MAX)
      sort_rows_as<T, uint64_t>(in, k, descending, partial, values, indices);
    else
      sort_rows_as<T, unsigned __int128>(in, k, descending, partial, values, indices);
  });
}

}  // namespace

Stack cpu_sort(Op op, const Stack& a, const Metas& out) {
  const Tensor& t = a[0].tensor();
  bool topk = op == Op::topk;
  TC_ASSERT(topk || op == Op::sort, "not a sort op");
  int64_t d = wrap_dim(a[topk ? 2 : 1].to_int(), t.dim());
  Rows in = dim_last_rows(t, d);
  // A 0-dim input is one row of one element (topk with k = 0 returns it too, like PyTorch).
  int64_t k = topk && t.dim() > 0 ? a[1].to_int() : in.len;
  bool descending = topk ? a[3].to_bool() : a[2].to_bool();
  Shape sz = in.t.sizes();
  if (!sz.empty()) sz.back() = k;
  Tensor values = Tensor::empty(sz, t.dtype()), indices = Tensor::empty(sz, DType::Int64);
  sort_rows(in, k, descending, topk, values, indices);
  return {restore_dim(values, d), restore_dim(indices, d)};
}

}  // namespace tc::cpu
