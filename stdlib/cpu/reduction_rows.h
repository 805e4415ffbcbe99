// Shared machinery of the reduction group: dim parsing, the "rows" view of an input (kept dims
// first, reduced or scanned dims last, one contiguous row per output element) with a chunked
// parallel driver, the "columns" view (reduced dims leading: accumulate whole rows into a block
// of outputs, no copy), and vectorizable lane loops.
//
//   Rows in = as_rows(x, reduced_dims("sum", x, dims));    // in.rows x in.len, contiguous
//   reduce_rows<double>(in.rows, in.len, out_ptr, 0.0,
//       [&](int64_t r, int64_t b, int64_t e) { return lane_sum(p + r * in.len + b, e - b, id); },
//       [](double a, double b) { return a + b; });
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tc/ops.h"
#include "tc/parallel.h"

namespace tc::cpu {

// Which dims of `t` a reduction over `dims` (None or an empty list: all) reduces; IndexError for
// a dim out of range, ShapeError for a repeated dim. Empty for a 0-dim tensor.
std::vector<bool> reduced_dims(const char* op, const Tensor& t, const Value& dims);

// The input as `rows` contiguous rows of `len` elements: kept dims first (in order), the dims
// where `last` is true after them. Copies only when the layout is not already like that.
struct Rows {
  Tensor t;
  int64_t rows, len;
};
Rows as_rows(const Tensor& t, const std::vector<bool>& last);
// For ops along one dim (0-based `d`; any for a 0-dim tensor): that dim moved last.
Rows dim_last_rows(const Tensor& t, int64_t d);
// Inverse of dim_last_rows for a result `tmp` computed in that order (its last dim may have a
// new size): a contiguous tensor in the original dim order.
Tensor restore_dim(const Tensor& tmp, int64_t d);

// Parallel driver: out[r] = combine of row(r, b, e) over fixed chunks [b, e) of row r, combined
// in order (deterministic whatever the thread count); rows of length 0 get `empty`. `row` must
// not throw.
constexpr int64_t kChunk = 32768;  // elements per task of a long row
constexpr int64_t kGrain = 32768;  // elements below which a loop stays on one thread

template <typename Acc, typename RowFn, typename Combine>
void reduce_rows(int64_t rows, int64_t len, Acc* out, Acc empty, RowFn&& row, Combine&& combine) {
  if (rows == 0) return;
  if (len == 0) {
    std::fill(out, out + rows, empty);
    return;
  }
  int64_t nchunks = (len + kChunk - 1) / kChunk;
  if (nchunks == 1) {
    parallel_for(0, rows, std::max<int64_t>(1, kGrain / len), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) out[r] = row(r, 0, len);
    });
    return;
  }
  std::vector<Acc> part(rows * nchunks);
  parallel_for(0, rows * nchunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      int64_t r = i / nchunks, c = i % nchunks;
      part[i] = row(r, c * kChunk, std::min(len, (c + 1) * kChunk));
    }
  });
  for (int64_t r = 0; r < rows; r++) {
    Acc acc = part[r * nchunks];
    for (int64_t c = 1; c < nchunks; c++) acc = combine(acc, part[r * nchunks + c]);
    out[r] = acc;
  }
}

// Runs body(row) for every row, rows split across threads by element count.
template <typename F>
void for_rows(int64_t rows, int64_t len, F&& body) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) body(r);
  });
}

// Element of a row as its arithmetic type (float for the half types, the storage type else).
template <typename T>
inline opmath_t<T> load(const T* p, int64_t i) {
  return static_cast<opmath_t<T>>(p[i]);
}

constexpr int kLanes = 8;

// Sum of f(x[i]) for i in [0, n), in double with independent lanes so that the compiler can
// vectorize it without reassociating (no -ffast-math).
template <typename T, typename F>
inline double lane_sum(const T* x, int64_t n, F f) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) acc[j] += f((double)load(x, i + j));
  for (int j = 0; i < n; i++, j++) acc[j] += f((double)load(x, i));
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The same in 64-bit integers (wrapping) for integral and bool inputs.
template <typename T, typename F>
inline int64_t lane_sum_int(const T* x, int64_t n, F f) {
  uint64_t acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) acc[j] += (uint64_t)f((int64_t)x[i + j]);
  for (int j = 0; i < n; i++, j++) acc[j] += (uint64_t)f((int64_t)x[i]);
  uint64_t s = 0;
  for (int j = 0; j < kLanes; j++) s += acc[j];
  return (int64_t)s;
}

// NaN-propagating max (Max) or min of f(x[i]) over [0, n), n >= 0; the identity for n == 0.
template <bool Max, typename T, typename F>
inline opmath_t<T> lane_extreme(const T* x, int64_t n, F f) {
  using V = opmath_t<T>;
  constexpr V id = std::numeric_limits<V>::has_infinity
                       ? (Max ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity())
                       : (Max ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max());
  V m[kLanes];
  unsigned char nan[kLanes] = {};
  for (int j = 0; j < kLanes; j++) m[j] = id;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) {
      V v = f(load(x, i + j));
      m[j] = (Max ? v > m[j] : v < m[j]) ? v : m[j];
      nan[j] |= v != v;
    }
  for (int j = 0; i < n; i++, j++) {
    V v = f(load(x, i));
    m[j] = (Max ? v > m[j] : v < m[j]) ? v : m[j];
    nan[j] |= v != v;
  }
  V r = m[0];
  bool any_nan = nan[0];
  for (int j = 1; j < kLanes; j++) {
    r = (Max ? m[j] > r : m[j] < r) ? m[j] : r;
    any_nan |= nan[j];
  }
  if constexpr (std::numeric_limits<V>::has_quiet_NaN)
    if (any_nan) return std::numeric_limits<V>::quiet_NaN();
  return r;
}

// NaN-propagating pairwise max/min, for combining chunks.
template <bool Max, typename V>
inline V extreme2(V a, V b) {
  if (a != a) return a;
  if (b != b) return b;
  return (Max ? b > a : b < a) ? b : a;
}

// The input as [outer, len, inner] without a copy, when it is contiguous and the reduced dims
// are one block in memory with at least kMinInner elements after it: output o1 * inner + o2
// reduces x[(o1 * len + k) * inner + o2] over k. Reducing a leading dim then reads whole rows.
constexpr int64_t kMinInner = 16;
struct Columns {
  Tensor t;
  int64_t outer, len, inner;
};
std::optional<Columns> as_columns(const Tensor& t, const std::vector<bool>& reduced);

// out[o] = step(...step(init, x[k=0])..., x[len-1]) for every output of a Columns layout, a block
// of columns at a time (the inner loop runs along contiguous memory and vectorizes).
template <typename Acc, typename T, typename Step>
void reduce_columns(const Columns& c, Acc* out, Acc init, Step step) {
  constexpr int64_t B = 256;
  const T* x = c.t.data<T>();
  int64_t blocks = (c.inner + B - 1) / B;
  int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(c.len * B, 1));
  parallel_for(0, c.outer * blocks, grain, [&](int64_t b, int64_t e) {
    Acc acc[B];
    for (int64_t task = b; task < e; task++) {
      int64_t o1 = task / blocks, j0 = task % blocks * B, nb = std::min(B, c.inner - j0);
      for (int64_t j = 0; j < nb; j++) acc[j] = init;
      const T* base = x + o1 * c.len * c.inner + j0;
      for (int64_t k = 0; k < c.len; k++) {
        const T* row = base + k * c.inner;
        for (int64_t j = 0; j < nb; j++) acc[j] = step(acc[j], load(row, j));
      }
      std::copy(acc, acc + nb, out + o1 * c.inner + j0);
    }
  });
}

// visit_dtype restricted to the floating dtypes (the meta rule has rejected the others).
template <typename F>
decltype(auto) visit_floating(DType dt, F&& fn) {
  switch (dt) {
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    default: TC_ASSERT(false, "a floating dtype was expected");
  }
}

// Groups of kernels (one file each) called by cpu_reduction.
Stack cpu_accumulate(Op op, const Stack& a, const Metas& out);  // sum mean prod any all norm
Stack cpu_statistics(Op op, const Stack& a, const Metas& out);  // var std var_mean logsumexp
Stack cpu_extremes(Op op, const Stack& a, const Metas& out);    // amax amin max_dim min_dim argmax argmin
Stack cpu_scan(Op op, const Stack& a, const Metas& out);        // cumsum softmax log_softmax
Stack cpu_sort(Op op, const Stack& a, const Metas& out);        // sort topk

}  // namespace tc::cpu
