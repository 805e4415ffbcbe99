// Process-wide numeric settings of the tensor core.
//
//   tc::set_float32_matmul_precision("high");   // float32 matmuls may use TF32 (CUDA)
//   if (tc::float32_matmul_precision() == "highest") ...
//
// "highest" (default): float32 matrix products in full float32. "high" and "medium": the CUDA
// kernels may use TF32 tensor cores. Guards of compiled code read it too.
#pragma once
#include <cstdlib>
#include <cstring>
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

// TC_DEBUG's level, read once per process (0 when unset): 1 breaks, recompiles and fallbacks,
// 2 also graphs and lowering's stages, 3 also generated code, 4 also guards (STYLE.md's one
// debug knob).
inline int debug_level() {
  static const int level = [] {
    const char* d = std::getenv("TC_DEBUG");
    return d ? std::atoi(d) : 0;
  }();
  return level;
}

// Whether the code generators print what they generate (CUDA C++, LLVM IR): TC_LOGS names
// output_code (or all), or TC_DEBUG is 3 or more. Read once per process.
inline bool logs_output_code() {
  static const bool on = [] {
    const char* l = std::getenv("TC_LOGS");
    return debug_level() >= 3 || (l && (std::strstr(l, "output_code") || std::strstr(l, "all")));
  }();
  return on;
}

}  // namespace tc
