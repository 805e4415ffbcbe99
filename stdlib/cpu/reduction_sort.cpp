// CPU kernels of sort (stable: equal values keep their order, ascending or descending) and topk
// (the k largest or smallest, sorted; equal values by position). NaN orders above every number,
// as in PyTorch. Indices are 1-based.
#include "cpu/reduction_rows.h"

namespace tc::cpu {
namespace {

template <typename V>
bool less_nan(V a, V b) {
  return b != b ? a == a : a < b;
}

template <typename V>
struct Item {
  V v;
  int64_t i;
};

// Sorts (or, for topk, selects the first k of) every row; `k` is the output row length.
void sort_rows(const Rows& in, int64_t k, bool descending, bool partial, Tensor& values, Tensor& indices) {
  visit_dtype(in.t.dtype(), [&]<typename T>() {
    using V = opmath_t<T>;
    const T* x = in.t.data<T>();
    T* y = values.data<T>();
    int64_t* yi = indices.data<int64_t>();
    int64_t n = in.len;
    auto before = [descending](const Item<V>& a, const Item<V>& b) {
      return descending ? less_nan(b.v, a.v) : less_nan(a.v, b.v);
    };
    auto before_or_first = [&](const Item<V>& a, const Item<V>& b) {
      if (before(a, b)) return true;
      return !before(b, a) && a.i < b.i;
    };
    parallel_for(0, in.rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<Item<V>> items(n);
      for (int64_t r = b; r < e; r++) {
        for (int64_t i = 0; i < n; i++) items[i] = {load(x + r * n, i), i};
        if (partial && k < n)
          std::partial_sort(items.begin(), items.begin() + k, items.end(), before_or_first);
        else
          std::stable_sort(items.begin(), items.end(), before);
        for (int64_t i = 0; i < k; i++) {
          y[r * k + i] = x[r * n + items[i].i];
          yi[r * k + i] = items[i].i + 1;
        }
      }
    });
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
