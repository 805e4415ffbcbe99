// DType names, sizes and PyTorch's type promotion table.
#include "tc/dtype.h"

#include <string>

namespace tc {

size_t itemsize(DType t) {
  switch (t) {
#define X(e, ty, n) \
  case DType::e:    \
    return sizeof(ty);
    TC_DTYPES(X)
#undef X
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
#define X(e, ty, n) \
  case DType::e:    \
    return n;
    TC_DTYPES(X)
#undef X
  }
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  if (name.substr(0, 3) == "tc.") name.remove_prefix(3);
#define X(e, ty, n)       \
  if (name == n) {        \
    *out = DType::e;      \
    return true;          \
  }
  TC_DTYPES(X)
#undef X
  static const std::pair<const char*, DType> aliases[] = {
      {"float", DType::Float32}, {"double", DType::Float64}, {"half", DType::Float16},
      {"long", DType::Int64},    {"int", DType::Int32},      {"byte", DType::UInt8}};
  for (auto& [a, t] : aliases)
    if (name == a) {
      *out = t;
      return true;
    }
  return false;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Order of the table below: f32 f64 f16 bf16 i64 i32 u8 b
  using enum DType;
  static const DType table[kNumDTypes][kNumDTypes] = {
      /* f32 */ {Float32, Float64, Float32, Float32, Float32, Float32, Float32, Float32},
      /* f64 */ {Float64, Float64, Float64, Float64, Float64, Float64, Float64, Float64},
      /* f16 */ {Float32, Float64, Float16, Float32, Float16, Float16, Float16, Float16},
      /* bf16*/ {Float32, Float64, Float32, BFloat16, BFloat16, BFloat16, BFloat16, BFloat16},
      /* i64 */ {Float32, Float64, Float16, BFloat16, Int64, Int64, Int64, Int64},
      /* i32 */ {Float32, Float64, Float16, BFloat16, Int64, Int32, Int32, Int32},
      /* u8  */ {Float32, Float64, Float16, BFloat16, Int64, Int32, UInt8, UInt8},
      /* b   */ {Float32, Float64, Float16, BFloat16, Int64, Int32, UInt8, Bool},
  };
  return table[(int)a][(int)b];
}

}  // namespace tc
