// Internal interface of the pointwise group: the meta rule (pointwise.cpp) decides shapes, dtypes
// and errors; the kernels, one file per family, fill an already allocated contiguous output.
#pragma once
#include "cpu/pointwise_loop.h"
#include "tc/ops.h"

namespace tc::cpu {

// The dtype every input is converted to before the elementwise function runs (PyTorch's
// "common dtype"); the output dtype is in the meta (bool for comparisons, etc.).
DType pointwise_compute_dtype(Op op, const Stack& args);
DType self_dtype(const Stack& args);

// A Scalar argument, or a 0-dim tensor, as a Value holding a bool, int or double.
Value scalar_of(const Tensor& t);

// A Scalar value converted to dtype T as PyTorch does (2.5 -> 2 for integers, -1 -> 255 for uint8).
template <typename T>
opmath_t<T> scalar_to(const Value& v) {
  if (v.is_double()) return static_cast<opmath_t<T>>(out_cast<T>(v.to_double()));
  if (v.is_bool()) return static_cast<opmath_t<T>>(out_cast<T>((int64_t)v.to_bool()));
  return static_cast<opmath_t<T>>(out_cast<T>(v.to_int()));
}

// Integer arithmetic that wraps around like two's complement hardware (no signed overflow UB).
template <typename T>
inline T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// Family kernels: `out` is allocated from the meta and not empty.
void unary_kernel(Op op, const Stack& args, const Tensor& out);   // pointwise_unary.cpp
void arith_kernel(Op op, const Stack& args, const Tensor& out);   // pointwise_arith.cpp
void logic_kernel(Op op, const Stack& args, const Tensor& out);   // pointwise_logic.cpp

}  // namespace tc::cpu
