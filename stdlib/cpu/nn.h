// Internal to the nn group (stdlib/cpu/nn*.cpp): the per-op meta rules and kernels that
// nn.cpp dispatches to, and the small helpers they share.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "tc/ops.h"
#include "tc/parallel.h"

namespace tc::cpu {

// One meta rule and one kernel per op; the kernel gets the op's single output meta.
#define TC_NN_OPS(X)                                                                   \
  X(batch_norm)                                                                        \
  X(layer_norm) X(group_norm) X(rms_norm) X(embedding) X(scaled_dot_product_attention) \
      X(cross_entropy) X(nll_loss) X(mse_loss) X(l1_loss) X(binary_cross_entropy)      \
          X(binary_cross_entropy_with_logits) X(interpolate) X(dropout)
#define X(name)                           \
  TensorMeta name##_meta(const Stack& a); \
  Tensor name##_kernel(const Stack& a, const TensorMeta& m);
TC_NN_OPS(X)
#undef X
// batch_norm's num_batches_tracked += 1 when training and given (a = batch_norm's arguments).
void count_batch(const Stack& a);
Metas batch_norm_backward_meta(const Stack& a);  // three outputs: grad_input, grad_weight, grad_bias
Stack batch_norm_backward_kernel(const Stack& a, const Metas& m);

// Calls fn.template operator()<T>() with T the storage type of a floating dtype.
template <typename F>
decltype(auto) visit_floating(DType dt, F&& fn) {
  switch (dt) {
    case DType::Float32:
      return fn.template operator()<float>();
    case DType::Float64:
      return fn.template operator()<double>();
    case DType::Float16:
      return fn.template operator()<Half>();
    case DType::BFloat16:
      return fn.template operator()<BFloat16>();
    default:
      break;
  }
  TC_ASSERT(false, "visit_floating: not a floating dtype");
}

// The dtype that a kernel computes in: float64 for float64, float32 for the other floats.
inline DType opmath_dtype(DType t) {
  return t == DType::Float64 ? DType::Float64 : DType::Float32;
}

// An optional tensor argument, or null.
inline const Tensor* opt_tensor(const Value& v) {
  return v.is_none() ? nullptr : &v.tensor();
}

// `t` converted to dtype `dt` and broadcast to `shape`, contiguous (t itself if it already is).
inline Tensor expand_as_contiguous(const Tensor& t, const Shape& shape, DType dt) {
  if (t.sizes() == shape && t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(shape, dt, t.device());
  out.copy_from(t);
  return out;
}

// A small parameter tensor (weight, bias, running stats) as a contiguous vector of `A`.
template <typename A>
std::vector<A> to_vector(const Tensor* t) {
  if (!t) return {};
  Tensor c = t->to(std::is_same_v<A, double> ? DType::Float64 : DType::Float32).contiguous();
  const A* p = c.data<A>();
  return std::vector<A>(p, p + c.numel());
}

enum class Reduction { None, Mean, Sum };
inline Reduction parse_reduction(const std::string& s) {
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  TC_FAIL(ValueError,
          "%s is not a valid value for reduction (expected \"none\", \"mean\" or \"sum\")",
          s.c_str());
}

inline void check_floating(const char* op, const char* what, const Tensor& t) {
  TC_CHECK(is_floating(t.dtype()), DTypeError, "%s(): expected a floating point %s, got %s", op,
           what, dtype_name(t.dtype()));
}

// Deterministic sum of n values produced by f(i): fixed-size chunks summed in parallel, then in
// order, in double.
template <typename F>
double chunked_sum(int64_t n, F&& f) {
  constexpr int64_t kChunk = 4096;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks, 0.0);
  parallel_for(0, chunks, 4, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c++) {
      double s = 0;
      for (int64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; i++) s += f(i);
      part[c] = s;
    }
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}

// Rows per parallel_for task so that a task covers about 32k elements.
inline int64_t row_grain(int64_t row_len) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_len));
}

}  // namespace tc::cpu
