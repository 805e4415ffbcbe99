// CPU kernels of the one-input pointwise ops: math functions, activations, clamping, rounding,
// predicates and dtype conversion.
#include <bit>
#include <cmath>
#include <limits>

#include "cpu/pointwise.h"

namespace tc::cpu {
namespace {

// exp for float32 written so that loops over it vectorize (glibc's expf is a call per element):
// exp(x) = 2^k * e^r with k = round(x / ln 2), r = x - k ln 2 (in two parts, so r is exact
// enough), e^r by its Taylor series to degree 7 (|r| <= 0.35: truncation below 1e-8), and 2^k
// applied as two exact powers of two so that overflow gives inf and underflow rounds once into
// the subnormals. Within 1.2 ulp of exp. Out-of-range inputs and NaN are patched in at the end with
// bit masks: a float select there would keep GCC from vectorizing the loop.
inline float vexp(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, kept in the low bits
  float t = x * 1.44269504088896341f + magic;
  float k = t - magic;
  int32_t ki = (int32_t)(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(magic));
  float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t k1 = ki >> 1, k2 = ki - k1;
  float y = p * std::bit_cast<float>((k1 + 127) << 23) * std::bit_cast<float>((k2 + 127) << 23);
  uint32_t bits = std::bit_cast<uint32_t>(y);
  uint32_t over = -(uint32_t)(x > 89.0f), under = -(uint32_t)(x < -104.0f), nan = -(uint32_t)(x != x);
  bits = (bits & ~over) | (0x7f800000u & over);  // +inf
  bits &= ~under;                                // +0
  bits = (bits & ~nan) | (std::bit_cast<uint32_t>(x) & nan);
  return std::bit_cast<float>(bits);
}

template <typename M>
inline M exp_of(M v) {
  if constexpr (std::is_same_v<M, float>)
    return vexp(v);
  else
    return std::exp(v);
}

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
    case Op::exp: return run([](M v) { return exp_of(v); });
    case Op::exp2: return run([](M v) { return std::exp2(v); });
    case Op::log: return run([](M v) { return std::log(v); });
    case Op::log2: return run([](M v) { return std::log2(v); });
    case Op::log1p: return run([](M v) { return std::log1p(v); });
    case Op::expm1: return run([](M v) { return std::expm1(v); });
    case Op::sin: return run([](M v) { return std::sin(v); });
    case Op::cos: return run([](M v) { return std::cos(v); });
    case Op::tan: return run([](M v) { return std::tan(v); });
    case Op::tanh: return run([](M v) { return std::tanh(v); });
    case Op::sigmoid: return run([](M v) { return M(1) / (M(1) + exp_of(-v)); });
    case Op::reciprocal: return run([](M v) { return M(1) / v; });
    case Op::erf: return run([](M v) { return std::erf(v); });
    case Op::silu: return run([](M v) { return v / (M(1) + exp_of(-v)); });
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
