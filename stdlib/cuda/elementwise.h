// Generated elementwise kernels: one NVRTC program per signature (expression variant, dtypes,
// which inputs are host scalars), holding a contiguous kernel (16-byte vector loads and stores
// when aligned; single-element inputs broadcast) and a strided kernel (any strides, broadcasting,
// strided output). The launcher picks one per call.
//
//   EwSpec s{"add", {{EwIn::Ptr, DType::Float32, "float"}, {EwIn::Ptr, DType::Float32, "float"}},
//            DType::Float32, {}, "a0 + a1"};
//   run_elementwise(s, out, {x, y}, {});
#pragma once
#include <string>
#include <vector>

#include "tc/tensor.h"

namespace tc::cuda {

struct EwIn {
  enum Kind { Ptr, Param } kind;
  DType storage;      // Ptr: the tensor's dtype; Param: unused
  std::string ctype;  // the C type of a<i> in the expression ("float", "bool", "i64" ...)
};

struct EwSpec {
  std::string tag;                  // names the expression variant (part of the cache key)
  std::vector<EwIn> in;             // a0, a1, ...
  DType out;
  std::vector<std::string> params;  // C types of p0, p1, ...
  std::string expr;                 // C expression of a<i> and p<j>
  bool zero_div_check = false;      // a1 == 0 sets the device error word (integer division)
};

// A kernel argument passed by value (host scalars and params), 8 bytes at most.
struct PVal {
  alignas(8) unsigned char bytes[8] = {0};
};
// Value v (or iv for integer C types) in C type `ctype`.
PVal pval(const std::string& ctype, double v, int64_t iv, bool is_int);

// out[i] = expr over the inputs broadcast to out's shape. `ptrs` holds the Ptr inputs (device
// tensors) in order, `vals` the Param inputs first, then the params.
void run_elementwise(const EwSpec& s, const Tensor& out, const std::vector<Tensor>& ptrs,
                     const std::vector<PVal>& vals);

// The program source of a spec (for the NVRTC test: no device needed).
std::string elementwise_source(const EwSpec& s);

}  // namespace tc::cuda
