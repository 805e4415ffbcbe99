// Internal interface of the linalg group: the strided GEMM every op of the group reduces to
// (linalg_gemm.cpp), and the meta rules and kernels of the group's other files.
#pragma once
#include <array>
#include <cstdint>

#include "tc/ops.h"

namespace tc::cpu {

// A matrix operand: element (i, j) is at data + (i*rs + j*cs) elements. Strides may be 0.
struct Mat {
  const void* data;
  int64_t rows, cols, rs, cs;
};

// C = alpha * A @ B + beta * C with C row-major, leading dimension ldc, of A.rows x B.cols.
// beta == 0 writes C without reading it. float32/float64 go to OpenBLAS, reading transposed
// operands in place; float16/bfloat16 compute in float32; integers use a plain loop.
// Safe to call from a parallel_for body.
void gemm(DType dt, const Mat& a, const Mat& b, void* c, int64_t ldc, double alpha, double beta);

// out = alpha * a @ b + beta * out over a batch. `out` is contiguous [*batch, n, p]; `a` is
// [*batch_a, n, m] and `b` [*batch_b, m, p] (any strides), batch_a and batch_b broadcastable
// to batch. All three share one dtype. When b is shared by the whole batch and a's batch folds
// into its rows, this is a single GEMM.
void matmul_into(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);

// Fills every element of `t` (CPU) with v.
void fill(const Tensor& t, double v);

// Normalises a per-spatial-dim argument (one value or `n` values) to `n` values.
IntList expand_param(const char* op, const char* name, const IntList& v, size_t n);

// A 2-D pool's window from its arguments kernel_size, stride, padding[, dilation] at a[first...]
// (an empty or missing stride is the kernel size; without dilation, 1), each as two values
// (expand_param); the CPU's pools and the CUDA pool kernels read them alike.
struct PoolWindow {
  IntList k, s, pad, d;
};
PoolWindow pool_window(const char* name, const Stack& a, size_t first, bool dilated);

// conv2d's padding argument (numbers, "same" or "valid") as {top, bottom, left, right}.
std::array<int64_t, 4> conv2d_padding(const Value& padding, const IntList& dilation, int64_t kh, int64_t kw);

// PyTorch's C++ names of dtypes, as its messages print them ("float", "double", "long int").
const char* cpp_type_name(DType t);

}  // namespace tc::cpu

namespace tc {

Metas meta_einsum(const Stack& args);
Stack cpu_einsum(const Stack& args, const Metas& out);
// einsum computed with ops (bmm, sum, copies) on the operands' device: the CPU kernel, and the
// CUDA one.
Stack einsum_by_ops(const Stack& args, const Metas& out);
Metas meta_conv(Op op, const Stack& args);
Stack cpu_conv(Op op, const Stack& args, const Metas& out);
// _conv2d_weight_backward (conv_weight_grad.cpp); the kernel in ops also serves CUDA's fallback.
Metas meta_conv2d_weight_backward(const Stack& args);
Stack cpu_conv2d_weight_backward(const Stack& args, const Metas& out);
Tensor conv2d_weight_grad_by_ops(const Stack& args);
Metas meta_pool(Op op, const Stack& args);
Stack cpu_pool(Op op, const Stack& args, const Metas& out);
// _max_pool2d_backward (pool.cpp)
Metas meta_max_pool2d_backward(const Stack& args);
Stack cpu_max_pool2d_backward(const Stack& args, const Metas& out);

}  // namespace tc
