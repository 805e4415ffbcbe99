// Process-wide numeric settings of the tensor core.
//
//   tc::set_float32_matmul_precision("high");   // float32 matmuls may use TF32 (CUDA)
//   if (tc::float32_matmul_precision() == "highest") ...
//
// "highest" (default): float32 matrix products in full float32. "high" and "medium": the CUDA
// kernels may use TF32 tensor cores. Guards of compiled code read it too.
#pragma once
#include <string>

#include "tc/error.h"

namespace tc {

namespace detail {
inline std::string& matmul_precision_slot() {
  static std::string p = "highest";
  return p;
}
}  // namespace detail

inline void set_float32_matmul_precision(const std::string& p) {
  TC_CHECK(p == "highest" || p == "high" || p == "medium", ValueError,
           "set_float32_matmul_precision(): expected \"highest\", \"high\" or \"medium\", got \"%s\"", p.c_str());
  detail::matmul_precision_slot() = p;
}
inline const std::string& float32_matmul_precision() { return detail::matmul_precision_slot(); }
inline bool allow_tf32() { return detail::matmul_precision_slot() != "highest"; }

}  // namespace tc
