// CPU kernels of the arithmetic pointwise ops: add/sub (alpha), mul, div (true, trunc, floor),
// remainder (sign of the divisor), pow, minimum/maximum (NaN propagating) and lerp.
#include <atomic>
#include <cmath>
#include <limits>

#include "cpu/pointwise.h"

namespace tc::cpu {
namespace {

// Python's float floor division (what PyTorch computes): exact for every representable quotient.
template <typename M>
inline M div_floor_float(M a, M b) {
  if (b == M(0)) return a / b;
  M mod = std::fmod(a, b);
  M div = (a - mod) / b;
  if (mod != M(0) && (b < M(0)) != (mod < M(0))) div -= M(1);
  if (div == M(0)) return std::copysign(M(0), a / b);
  M floordiv = std::floor(div);
  if (div - floordiv > M(0.5)) floordiv += M(1);
  return floordiv;
}

template <typename M>
inline M remainder_float(M a, M b) {
  M mod = std::fmod(a, b);
  if (mod != M(0) && (b < M(0)) != (mod < M(0))) mod += b;
  return mod;
}

// Integer division and remainder: the divisor is known to be nonzero; -1 is special-cased
// because INT_MIN / -1 traps on x86.
template <typename M>
inline M div_trunc_int(M a, M b) {
  if constexpr (std::is_signed_v<M>)
    if (b == M(-1)) return wrap_sub(M(0), a);
  return M(a / b);
}
template <typename M>
inline M div_floor_int(M a, M b) {
  if constexpr (std::is_signed_v<M>) {
    if (b == M(-1)) return wrap_sub(M(0), a);
    M q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
  }
  return M(a / b);
}
template <typename M>
inline M remainder_int(M a, M b) {
  if constexpr (std::is_signed_v<M>) {
    if (b == M(-1)) return M(0);
    M r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
  return M(a % b);
}

// Integer power by squaring, wrapping on overflow; negative exponents give 1, +-1 or 0.
template <typename M>
inline M pow_int(M a, M b) {
  if constexpr (std::is_signed_v<M>) {
    if (b < 0) {
      if (a == 1) return 1;
      if (a == -1) return (b & 1) ? M(-1) : M(1);
      return 0;
    }
  }
  M r = 1;
  while (b) {
    if (b & 1) r = wrap_mul(r, a);
    a = wrap_mul(a, a);
    b = M(b >> 1);
  }
  return r;
}

// Throws PyTorch's ZeroDivisionError if the integer divisor has a zero (checked before the loop:
// kernels never throw inside a parallel body).
template <typename T>
void check_no_zero(const Tensor& d) {
  std::atomic<bool> zero{false};
  strided_loop<1>(d.sizes(), {static_cast<char*>(d.data_ptr())}, {broadcast_byte_strides(d, d.sizes())},
                  [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
                    bool z = false;
                    for (int64_t i = 0; i < n; i++) z |= *reinterpret_cast<const T*>(p[0] + i * s[0]) == T(0);
                    if (z) zero.store(true, std::memory_order_relaxed);
                  });
  TC_CHECK(!zero.load(), ValueError, "ZeroDivisionError");
}

bool is_one(const Value& v) { return v.is_double() ? v.to_double() == 1.0 : v.is_bool() ? v.to_bool() : v.to_int() == 1; }

template <typename T>
void add_kernel(const Tensor& x, const Tensor& y, const Tensor& out, const Value& alpha_v, bool subtract) {
  using M = opmath_t<T>;
  if constexpr (kIsBool<T>) {  // bool results: or (sub never gets here)
    bool alpha = alpha_v.is_bool() ? alpha_v.to_bool() : alpha_v.to_double() != 0;
    if (alpha) return map<T, T, T>(out, {x, y}, [](M a, M b) { return a || b; });
    return map<T, T, T>(out, {x, y}, [](M a, M) { return a; });
  } else if constexpr (kIsInt<T>) {
    M alpha = scalar_to<T>(alpha_v);
    if (subtract) alpha = wrap_sub(M(0), alpha);
    if (alpha == M(1)) return map<T, T, T>(out, {x, y}, [](M a, M b) { return wrap_add(a, b); });
    if (alpha == M(-1)) return map<T, T, T>(out, {x, y}, [](M a, M b) { return wrap_sub(a, b); });
    return map<T, T, T>(out, {x, y}, [=](M a, M b) { return wrap_add(a, wrap_mul(alpha, b)); });
  } else {
    M alpha = M(alpha_v.to_double());
    if (is_one(alpha_v)) {
      if (subtract) return map<T, T, T>(out, {x, y}, [](M a, M b) { return a - b; });
      return map<T, T, T>(out, {x, y}, [](M a, M b) { return a + b; });
    }
    if (subtract) alpha = -alpha;
    return map<T, T, T>(out, {x, y}, [=](M a, M b) { return a + alpha * b; });
  }
}

template <typename T>
void pow_kernel(const Tensor& x, const Tensor& y, const Tensor& out) {
  using M = opmath_t<T>;
  if constexpr (kIsInt<T>) {
    map<T, T, T>(out, {x, y}, [](M a, M b) { return pow_int(a, b); });
  } else if constexpr (kIsFloat<T>) {
    if (y.dim() == 0) {  // common exponents of x^c, as PyTorch special-cases them
      M e = static_cast<M>(*y.data<T>());
      if (e == M(2)) return map<T, T>(out, {x}, [](M a) { return a * a; });
      if (e == M(3)) return map<T, T>(out, {x}, [](M a) { return a * a * a; });
      if (e == M(0.5)) return map<T, T>(out, {x}, [](M a) { return std::sqrt(a); });
      if (e == M(-1)) return map<T, T>(out, {x}, [](M a) { return M(1) / a; });
    }
    map<T, T, T>(out, {x, y}, [](M a, M b) { return std::pow(a, b); });
  }
}

template <typename T>
void lerp_kernel(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& out) {
  using M = opmath_t<T>;
  auto lerp = [](M a, M b, M t) { return std::abs(t) < M(0.5) ? a + t * (b - a) : b - (b - a) * (M(1) - t); };
  if (w.dim() == 0) {
    M t = static_cast<M>(*w.data<T>());
    return map<T, T, T>(out, {x, y}, [=](M a, M b) { return lerp(a, b, t); });
  }
  map<T, T, T, T>(out, {x, y, w}, lerp);
}

template <typename T>
void typed_kernel(Op op, const Stack& a, const Tensor& x, const Tensor& y, const Tensor& out) {
  using M = opmath_t<T>;
  auto bin = [&](auto f) { map<T, T, T>(out, {x, y}, f); };
  switch (op) {
    case Op::add: return add_kernel<T>(x, y, out, a[2], false);
    case Op::sub: return add_kernel<T>(x, y, out, a[2], true);
    case Op::mul:
      if constexpr (kIsBool<T>) return bin([](M p, M q) { return p && q; });
      else if constexpr (kIsInt<T>) return bin([](M p, M q) { return wrap_mul(p, q); });
      else return bin([](M p, M q) { return p * q; });
    case Op::minimum:
      if constexpr (kIsFloat<T>) return bin([](M p, M q) { return p != p ? p : q != q ? q : q < p ? q : p; });
      else return bin([](M p, M q) { return q < p ? q : p; });
    case Op::maximum:
      if constexpr (kIsFloat<T>) return bin([](M p, M q) { return p != p ? p : q != q ? q : p < q ? q : p; });
      else return bin([](M p, M q) { return p < q ? q : p; });
    case Op::pow: return pow_kernel<T>(x, y, out);
    default: break;
  }
  if constexpr (kIsFloat<T>) {
    switch (op) {
      case Op::div:
        if (a[2].is_none()) return bin([](M p, M q) { return p / q; });
        if (a[2].str() == "trunc") return bin([](M p, M q) { return std::trunc(p / q); });
        return bin([](M p, M q) { return div_floor_float(p, q); });
      case Op::remainder: return bin([](M p, M q) { return remainder_float(p, q); });
      case Op::lerp: return lerp_kernel<T>(x, y, a[2].tensor().to(x.dtype()), out);
      default: break;
    }
  } else if constexpr (kIsInt<T>) {
    if (op == Op::div || op == Op::remainder) {
      check_no_zero<T>(y);
      if (op == Op::remainder) return bin([](M p, M q) { return remainder_int(p, q); });
      if (a[2].str() == "trunc") return bin([](M p, M q) { return div_trunc_int(p, q); });
      return bin([](M p, M q) { return div_floor_int(p, q); });
    }
  }
  TC_ASSERT(false, "arithmetic pointwise op without a kernel for this dtype (the meta rule should have rejected it)");
}

}  // namespace

void arith_kernel(Op op, const Stack& a, const Tensor& out) {
  DType ct = pointwise_compute_dtype(op, a);
  Tensor x = a[0].tensor().to(ct), y = a[1].tensor().to(ct);
  visit_dtype(ct, [&]<typename T>() { typed_kernel<T>(op, a, x, y, out); });
}

}  // namespace tc::cpu
