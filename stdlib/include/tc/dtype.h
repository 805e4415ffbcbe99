// Element types of tensors, their storage types, names and PyTorch's promotion rules.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tc {

// X-macro: name, storage type, Lua/PyTorch name, item size.
#define TC_DTYPES(X)                  \
  X(Float32, float, "float32")        \
  X(Float64, double, "float64")       \
  X(Float16, ::tc::Half, "float16")   \
  X(BFloat16, ::tc::BFloat16, "bfloat16") \
  X(Int64, int64_t, "int64")          \
  X(Int32, int32_t, "int32")          \
  X(UInt8, uint8_t, "uint8")          \
  X(Bool, bool, "bool")

enum class DType : uint8_t {
#define X(e, t, n) e,
  TC_DTYPES(X)
#undef X
};
constexpr int kNumDTypes = 8;

// IEEE binary16, stored as bits; arithmetic is done in float32.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  // nan / inf
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  // overflow (after rounding) -> inf
    if (ax < 0x38800000u) {                        // subnormal or zero in half
      if (ax < 0x33000000u) return sign;           // rounds to zero
      // value in units of 2^-24 is m * 2^(e - 126); round to nearest even on the dropped bits
      uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
      uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (hm & 1))) hm++;
      return sign | hm;
    }
    uint32_t r = ax + 0xc8000fffu + ((ax >> 13) & 1);  // rebias exponent and round to nearest even
    return sign | (r >> 13);
  }
  static float to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
    if (e == 0) {
      if (m == 0) {
        x = sign;
      } else {  // subnormal: normalise
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
      }
    } else if (e == 31) {
      x = sign | 0x7f800000u | (m << 13);
    } else {
      x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40;  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

size_t itemsize(DType t);
const char* dtype_name(DType t);           // "float32"
bool dtype_from_name(std::string_view name, DType* out);  // accepts "float32", "float", "half", "long"...
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
inline bool is_integral(DType t, bool include_bool) {
  return t == DType::Int64 || t == DType::Int32 || t == DType::UInt8 || (include_bool && t == DType::Bool);
}
DType promote_types(DType a, DType b);     // PyTorch's promote_types table

// Category used by PyTorch's scalar promotion: bool < integral < floating.
enum class Category : uint8_t { Bool, Integral, Floating };
inline Category category(DType t) {
  return t == DType::Bool ? Category::Bool : is_floating(t) ? Category::Floating : Category::Integral;
}

// The C++ type for arithmetic on a dtype: float for half types, the storage type otherwise.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

// Calls fn.template operator()<T>() with T the storage type of dt:
//   visit_dtype(dt, [&]<typename T>() { ... });
template <typename F>
decltype(auto) visit_dtype(DType dt, F&& fn) {
  switch (dt) {
#define X(e, t, n) \
  case DType::e:   \
    return fn.template operator()<t>();
    TC_DTYPES(X)
#undef X
  }
  __builtin_unreachable();
}

}  // namespace tc
