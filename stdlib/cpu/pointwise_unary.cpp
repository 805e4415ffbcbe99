// CPU kernels of the one-input pointwise ops: math functions, activations, clamping, rounding,
// predicates and dtype conversion.
#include <cmath>
#include <limits>

#include "cpu/pointwise.h"

namespace tc::cpu {
namespace {

template <typename T>
void to_dtype_kernel(const Tensor& x, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<typename O>() { map<O, T>(out, {x}, [](opmath_t<T> v) { return v; }); });
}

// Float-only functions (the meta rule sent integer inputs to the default float dtype).
template <typename T>
bool float_kernel(Op op, const Stack& a, const Tensor& x, const Tensor& out) {
  using M = opmath_t<T>;
  auto run = [&](auto f) {
    map<T, T>(out, {x}, f);
    return true;
  };
  switch (op) {
    case Op::sqrt: return run([](M v) { return std::sqrt(v); });
    case Op::rsqrt: return run([](M v) { return M(1) / std::sqrt(v); });
    case Op::exp: return run([](M v) { return std::exp(v); });
    case Op::exp2: return run([](M v) { return std::exp2(v); });
    case Op::log: return run([](M v) { return std::log(v); });
    case Op::log2: return run([](M v) { return std::log2(v); });
    case Op::log1p: return run([](M v) { return std::log1p(v); });
    case Op::expm1: return run([](M v) { return std::expm1(v); });
    case Op::sin: return run([](M v) { return std::sin(v); });
    case Op::cos: return run([](M v) { return std::cos(v); });
    case Op::tan: return run([](M v) { return std::tan(v); });
    case Op::tanh: return run([](M v) { return std::tanh(v); });
    case Op::sigmoid: return run([](M v) { return M(1) / (M(1) + std::exp(-v)); });
    case Op::reciprocal: return run([](M v) { return M(1) / v; });
    case Op::erf: return run([](M v) { return std::erf(v); });
    case Op::silu: return run([](M v) { return v / (M(1) + std::exp(-v)); });
    case Op::gelu:
      if (a[1].str() == "tanh")
        return run([](M v) {
          const M beta = M(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = M(0.044715);
          return M(0.5) * v * (M(1) + std::tanh(beta * (v + kappa * v * v * v)));
        });
      return run([](M v) { return v * M(0.5) * (M(1) + std::erf(v * M(M_SQRT1_2))); });
    case Op::softplus: {
      M beta = scalar_to<T>(a[1]), threshold = scalar_to<T>(a[2]);
      return run([=](M v) { return v * beta > threshold ? v : std::log1p(std::exp(v * beta)) / beta; });
    }
    case Op::leaky_relu: {
      M slope = scalar_to<T>(a[1]);
      return run([=](M v) { return v > M(0) ? v : v * slope; });
    }
    case Op::elu: {
      M alpha = scalar_to<T>(a[1]);
      return run([=](M v) { return v > M(0) ? v : alpha * std::expm1(v); });
    }
    case Op::floor: return run([](M v) { return std::floor(v); });
    case Op::ceil: return run([](M v) { return std::ceil(v); });
    case Op::round: return run([](M v) { return std::nearbyint(v); });
    case Op::trunc: return run([](M v) { return std::trunc(v); });
    case Op::isnan: map<bool, T>(out, {x}, [](M v) { return v != v; }); return true;
    case Op::isinf:
      map<bool, T>(out, {x}, [](M v) { return std::abs(v) == std::numeric_limits<M>::infinity(); });
      return true;
    default: return false;
  }
}

// clamp and hardtanh: NaN stays NaN; with min > max every element becomes max (like PyTorch).
template <typename T>
void clamp_kernel(const Tensor& x, const Tensor& out, opmath_t<T> lo, opmath_t<T> hi) {
  using M = opmath_t<T>;
  map<T, T>(out, {x}, [=](M v) {
    if (v != v) return v;
    M r = v < lo ? lo : v;
    return r > hi ? hi : r;
  });
}

template <typename T>
void typed_kernel(Op op, const Stack& a, const Tensor& x, const Tensor& out) {
  using M = opmath_t<T>;
  if constexpr (kIsFloat<T>)
    if (float_kernel<T>(op, a, x, out)) return;
  auto same = [&](auto f) { map<T, T>(out, {x}, f); };
  switch (op) {
    case Op::to_dtype: return to_dtype_kernel<T>(x, out);
    case Op::logical_not: return map<bool, T>(out, {x}, [](M v) { return !(v != M(0)); });
    case Op::isnan: case Op::isinf: return map<bool, T>(out, {x}, [](M) { return false; });
    case Op::sign:
      if constexpr (kIsBool<T>) return same([](M v) { return v; });
      else return same([](M v) { return M((M(0) < v) - (v < M(0))); });
    case Op::clamp: {
      M lo = a[1].is_none() ? std::numeric_limits<M>::lowest() : scalar_to<T>(a[1]);
      M hi = a[2].is_none() ? std::numeric_limits<M>::max() : scalar_to<T>(a[2]);
      if constexpr (kIsFloat<T>) {
        if (a[1].is_none()) lo = -std::numeric_limits<M>::infinity();
        if (a[2].is_none()) hi = std::numeric_limits<M>::infinity();
      }
      return clamp_kernel<T>(x, out, lo, hi);
    }
    case Op::hardtanh: return clamp_kernel<T>(x, out, scalar_to<T>(a[1]), scalar_to<T>(a[2]));
    default: break;
  }
  if constexpr (kIsBool<T>) {
    if (op == Op::bitwise_not) return same([](M v) { return !v; });
  } else {
    switch (op) {
      case Op::neg:
        if constexpr (kIsInt<T>) return same([](M v) { return wrap_sub(M(0), v); });
        else return same([](M v) { return -v; });
      case Op::abs:
        if constexpr (std::is_unsigned_v<M>) return same([](M v) { return v; });
        else if constexpr (kIsInt<T>) return same([](M v) { return v < 0 ? wrap_sub(M(0), v) : v; });
        else return same([](M v) { return std::abs(v); });
      case Op::relu: return same([](M v) { return v < M(0) ? M(0) : v; });
      case Op::floor: case Op::ceil: case Op::round: case Op::trunc:  // integers: already integral
        return same([](M v) { return v; });
      case Op::bitwise_not:
        if constexpr (kIsInt<T>) return same([](M v) { return M(~v); });
        break;
      default: break;
    }
  }
  TC_ASSERT(false, "unary pointwise op without a kernel for this dtype (the meta rule should have rejected it)");
}

}  // namespace

void unary_kernel(Op op, const Stack& a, const Tensor& out) {
  DType ct = pointwise_compute_dtype(op, a);
  Tensor x = a[0].tensor().to(ct);
  visit_dtype(ct, [&]<typename T>() { typed_kernel<T>(op, a, x, out); });
}

}  // namespace tc::cpu
