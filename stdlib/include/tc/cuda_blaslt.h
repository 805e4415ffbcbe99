// Matrix products with fused epilogues through cuBLASLt (dlopen'ed libcublasLt.so.13): one call
// computes out = act(a @ b + bias) on the current stream, for float32 (TF32 when tc's float32
// matmul precision is not "highest", as eager matmuls), float16 and bfloat16 (float32
// accumulation). The algorithm is chosen by cuBLASLt's heuristic once per problem (shapes,
// layouts, dtype, epilogue, pointer alignments) and cached.
//
//   // linear + bias + gelu(tanh) as one library call (GPT-2's MLP):
//   tc::Tensor y = tc::Tensor::empty({rows, n}, x.dtype(), x.device());
//   if (!tc::cuda::linear_act(y, x, w, b, tc::cuda::Act::GeluTanh)) { /* unfused path */ }
//
// The epilogues are cuBLASLt's, and only where their math is eager's: relu, and gelu with the
// tanh approximation (cuBLASLt's GELU is gelu(approximate = "tanh"); eager's default erf gelu is
// not fused). Results equal the unfused composition up to float rounding (the bias and the
// activation are applied to the float32 accumulator before the one rounding to the output dtype).
#pragma once
#include <string>

namespace tc {
class Tensor;
}

namespace tc::cuda {

enum class Act { None, Relu, GeluTanh };

// out (m x n) = act(a (m x k) @ b (k x n) + bias (n)). a, b, out: 2-D CUDA tensors of one
// float dtype on one device; a and b row-major or transposed (column-major) with any leading
// dimension, out with rows of unit stride (contiguous, or a padded row stride); bias: undefined, or 1-D (n) contiguous of the same dtype. False when
// cuBLASLt is unavailable (or TC_CUBLASLT_DISABLE=1), the problem is outside that (other dtypes or
// layouts, empty, sizes past int32), or cuBLASLt finds no algorithm: nothing was written, the
// caller runs its unfused path. Device errors raise DeviceError.
bool matmul_act(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, Act act);
// linear's layout: out (..., n) = act(x (..., k) @ w (n, k)^T + bias (n)); x's leading dims are
// folded into rows (x must then be contiguous in them), out contiguous.
bool linear_act(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, Act act);
// With a residual: out = act(a @ b + residual + bias), residual (undefined, or shaped and laid out
// as out) read as cuBLASLt's C (beta = 1): the graph's `y + linear(x)` in the same call.
// matmul_act's out (and residual) may have a row stride above n (rows of unit stride); linear_act
// runs large products without bias or residual whose rows are not 16-byte multiples as a few
// products over every g-th row (16-byte aligned rows: faster kernels; TC_BLASLT_ROW_GROUPS=0: one). Each plan times up to 6 of the heuristic's algorithms once on
// its first call outside graph capture (device time) and keeps the fastest, the heuristic's first
// unless another is 3% faster (TC_BLASLT_TUNE=<n>: n of them; 0: the first, untimed); the
// choice is kept in the disk cache ($TC_CACHE_DIR/blaslt), so a warm start times nothing.
bool matmul_act(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, Act act, const Tensor& residual);
bool linear_act(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, Act act, const Tensor& residual);
bool blaslt_available(std::string* why = nullptr);
int64_t blaslt_calls();  // products run through cuBLASLt since the process started (tests, reports)

}  // namespace tc::cuda
