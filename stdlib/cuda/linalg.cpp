// Matrix products on CUDA through cuBLAS (dlopen'ed libcublas.so.13): mm, bmm, matmul, linear,
// addmm, baddbmm for float32 (TF32 only when tc's float32 matmul precision is not "highest"),
// float64, float16 and bfloat16 (float accumulation). Transposed operands are passed as cuBLAS
// transposes, anything else strided is made contiguous first. Other dtypes and the remaining
// ops of the group (conv, pools, einsum) take the host fallback for now.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>

#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda.h"

namespace tc::cuda {
namespace {

struct Cublas {
  cublasStatus_t (*Create)(cublasHandle_t*);
  cublasStatus_t (*SetStream)(cublasHandle_t, CUstream);
  cublasStatus_t (*SetMathMode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const void*, const void*, cudaDataType, int, long long, const void*,
                                         cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                         long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  bool ok = false;
  std::string why;
  cublasHandle_t handle[16] = {};
};

Cublas& cb() {
  static Cublas* c = [] {
    auto* c = new Cublas{};
    void* h = nullptr;
    std::string errs;
    std::vector<std::string> cands;
    for (const char* env : {"TC_CUDA_PATH", "CUDA_PATH", "CUDA_HOME"})
      if (const char* e = std::getenv(env)) cands.push_back(std::string(e) + "/lib64/libcublas.so.13");
    cands.push_back("/usr/local/cuda/lib64/libcublas.so.13");
    cands.push_back("libcublas.so.13");
    cands.push_back("libcublas.so");
    for (auto& n : cands) {
      h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      if (errs.empty() && e) errs = e;
    }
    if (!h) {
      c->why = "cannot load cuBLAS (libcublas.so.13): " + errs;
      return c;
    }
    auto get = [&](const char* name, auto& fp) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      return fp != nullptr;
    };
    bool ok = get("cublasCreate_v2", c->Create) && get("cublasSetStream_v2", c->SetStream) &&
              get("cublasSetMathMode", c->SetMathMode) && get("cublasGemmStridedBatchedEx", c->GemmStridedBatchedEx);
    if (!ok) c->why = "cuBLAS lacks entry points";
    c->ok = ok;
    return c;
  }();
  return *c;
}

cublasHandle_t handle(int device) {
  Cublas& c = cb();
  TC_CHECK(c.ok, DeviceError, "matrix products on CUDA need cuBLAS: %s", c.why.c_str());
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  DeviceState& ds = dev(device);
  if (!c.handle[device]) {
    TC_CHECK(c.Create(&c.handle[device]) == CUBLAS_STATUS_SUCCESS, DeviceError, "cublasCreate failed");
    c.SetStream(c.handle[device], ds.stream);
  }
  return c.handle[device];
}

// A matrix operand (the last two dims of t): row-major with leading dimension ld, or its
// transpose (column-major storage); batch stride for 3-D.
struct Mat {
  Tensor t;  // keeps a contiguous copy alive when one was needed
  const void* p;
  bool trans;
  int64_t ld, bstride;
};

Mat as_mat(const Tensor& in, DType dt) {
  Tensor t = in.dtype() == dt ? in : contiguous_as(in, dt);
  int64_t nd = t.dim();
  int64_t r = t.sizes()[nd - 2], c = t.sizes()[nd - 1];
  int64_t s0 = t.strides()[nd - 2], s1 = t.strides()[nd - 1];
  if (c == 1) s1 = 1;
  if (r == 1) s0 = std::max<int64_t>(c, 1);
  int64_t bs = nd == 3 ? (t.sizes()[0] == 1 ? 0 : t.strides()[0]) : 0;
  if (s1 == 1 && s0 >= std::max<int64_t>(c, 1)) return {t, t.data_ptr(), false, s0, bs};
  if (c > 1 && r > 1 && s0 == 1 && s1 >= r) return {t, t.data_ptr(), true, s1, bs};
  Tensor k = Tensor::empty(t.sizes(), dt, t.device());
  copy_strided(k, t);
  return {k, k.data_ptr(), false, std::max<int64_t>(c, 1), nd == 3 ? r * c : 0};
}

cudaDataType cu_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float64: return CUDA_R_64F;
    case DType::Float16: return CUDA_R_16F;
    default: return CUDA_R_16BF;
  }
}

// Row-major C[b] (m x n, ldc = n, contiguous) = alpha * A[b] (m x k) . B[b] (k x n) + beta * C[b].
void gemm(const Tensor& C, const Mat& A, const Mat& B, int64_t m, int64_t n, int64_t k, int64_t batch, double alpha,
          double beta) {
  if (m == 0 || n == 0 || batch == 0) return;
  DType dt = C.dtype();
  if (compile_only()) return;
  int device = C.device().index;
  cublasHandle_t h = handle(device);
  Cublas& c = cb();
  cublasComputeType_t ct = dt == DType::Float64 ? CUBLAS_COMPUTE_64F
                           : (dt == DType::Float32 && allow_tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                     : CUBLAS_COMPUTE_32F;
  double ad = alpha, bd = beta;
  float af = (float)alpha, bf = (float)beta;
  const void* pa = dt == DType::Float64 ? (const void*)&ad : (const void*)&af;
  const void* pb = dt == DType::Float64 ? (const void*)&bd : (const void*)&bf;
  if (k == 0) {  // empty inner dimension: C = beta * C
    if (beta == 0) fill(C, 0, 0, false);
    // beta != 0 with k == 0: cuBLAS handles it (scales C)
  }
  // Column-major: C^T (n x m) = op(B)^T (n x k) . op(A)^T (k x m)
  cublasStatus_t st = c.GemmStridedBatchedEx(
      h, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N, A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, pa, B.p,
      cu_type(dt), (int)B.ld, B.bstride, A.p, cu_type(dt), (int)A.ld, A.bstride, pb, C.data_ptr(), cu_type(dt), (int)n,
      m * n, (int)batch, ct, CUBLAS_GEMM_DEFAULT);
  TC_CHECK(st == CUBLAS_STATUS_SUCCESS, DeviceError, "cuBLAS gemm failed (status %d, m=%lld n=%lld k=%lld batch=%lld)",
           (int)st, (long long)m, (long long)n, (long long)k, (long long)batch);
}

bool float_dtype(DType t) { return is_floating(t); }

// Broadcast `src` into C (the epilogue base for beta != 0).
void init_out(const Tensor& C, const Tensor& src) {
  Tensor s = src;
  if (s.device().is_cpu()) {
    Tensor d = Tensor::empty(s.sizes(), s.dtype(), C.device());
    d.copy_from(s);
    s = d;
  }
  Shape sz = C.sizes();
  Shape st(sz.size(), 0);
  int64_t off = (int64_t)sz.size() - s.dim();
  for (int64_t d = 0; d < s.dim(); d++) st[d + off] = s.sizes()[d] == 1 ? 0 : s.strides()[d];
  copy_strided(C, s.as_strided(sz, st, s.offset()));
}

}  // namespace

bool linalg(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::mm: case Op::bmm: case Op::matmul: case Op::linear: case Op::addmm: case Op::baddbmm: break;
    default: return false;
  }
  DType dt = m[0].dtype;
  if (!float_dtype(dt)) return false;
  Tensor out = empty_from_meta(m[0]);
  if (!out.is_contiguous()) return false;
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  switch (op) {
    case Op::mm: case Op::addmm: {
      const Tensor& x = a[op == Op::mm ? 0 : 1].tensor();
      const Tensor& y = a[op == Op::mm ? 1 : 2].tensor();
      double alpha = 1, beta = 0;
      if (op == Op::addmm) {
        beta = a[3].to_double();
        alpha = a[4].to_double();
        if (beta != 0) init_out(out, a[0].tensor());
      }
      gemm(out, as_mat(x, dt), as_mat(y, dt), x.sizes()[0], y.sizes()[1], x.sizes()[1], 1, alpha, beta);
      return true;
    }
    case Op::bmm: case Op::baddbmm: {
      const Tensor& x = a[op == Op::bmm ? 0 : 1].tensor();
      const Tensor& y = a[op == Op::bmm ? 1 : 2].tensor();
      double alpha = 1, beta = 0;
      if (op == Op::baddbmm) {
        beta = a[3].to_double();
        alpha = a[4].to_double();
        if (beta != 0) init_out(out, a[0].tensor());
      }
      gemm(out, as_mat(x, dt), as_mat(y, dt), x.sizes()[1], y.sizes()[2], x.sizes()[2], x.sizes()[0], alpha, beta);
      return true;
    }
    case Op::linear: {
      const Tensor& x = a[0].tensor();
      const Tensor& w = a[1].tensor();  // (n, k)
      if (x.dim() == 0 || w.dim() != 2) return false;
      int64_t k = w.sizes()[1], n = w.sizes()[0];
      Tensor x2 = contiguous_as(x, dt);
      int64_t rows = shape_numel(Shape(x.sizes().begin(), x.sizes().end() - 1));
      x2 = x2.as_strided({rows, k}, {k, 1}, x2.offset());
      Tensor wt = w.as_strided({k, n}, {w.strides()[1], w.strides()[0]}, w.offset());
      double beta = 0;
      if (!a[2].is_none()) {
        init_out(out, a[2].tensor());
        beta = 1;
      }
      Tensor o2 = out.as_strided({rows, n}, {n, 1}, 0);
      gemm(o2, as_mat(x2, dt), as_mat(wt, dt), rows, n, k, 1, 1, beta);
      return true;
    }
    case Op::matmul: {
      Tensor x = a[0].tensor(), y = a[1].tensor();
      if (x.dim() == 1) x = x.as_strided({1, x.sizes()[0]}, {0, x.strides()[0]}, x.offset());
      if (y.dim() == 1) y = y.as_strided({y.sizes()[0], 1}, {y.strides()[0], 0}, y.offset());
      int64_t mm_ = x.sizes()[x.dim() - 2], k = x.sizes()[x.dim() - 1], n = y.sizes()[y.dim() - 1];
      if (y.dim() == 2) {  // fold x's batch dims into rows
        Tensor xc = contiguous_as(x, dt);
        int64_t rows = shape_numel(Shape(x.sizes().begin(), x.sizes().end() - 1));
        Tensor o2 = out.as_strided({rows, n}, {n, 1}, 0);
        gemm(o2, as_mat(xc.as_strided({rows, k}, {k, 1}, xc.offset()), dt), as_mat(y, dt), rows, n, k, 1, 1, 0);
        return true;
      }
      // batch: broadcast both to the result's batch shape, contiguous
      Shape xb(x.sizes().begin(), x.sizes().end() - 2), yb(y.sizes().begin(), y.sizes().end() - 2);
      Shape bshape = broadcast_shapes(xb, yb);
      int64_t batch = shape_numel(bshape);
      auto expand = [&](const Tensor& t, int64_t r, int64_t c) {
        Shape sz = bshape;
        sz.push_back(r);
        sz.push_back(c);
        Shape st(sz.size(), 0);
        int64_t off = (int64_t)sz.size() - t.dim();
        for (int64_t d = 0; d < t.dim(); d++) st[d + off] = t.sizes()[d] == 1 && d < t.dim() - 2 ? 0 : t.strides()[d];
        Tensor e = Tensor::empty(sz, dt, out.device());
        copy_strided(e, t.as_strided(sz, st, t.offset()));
        return e.as_strided({batch, r, c}, {r * c, c, 1}, 0);
      };
      Tensor xe = expand(x, mm_, k), ye = expand(y, k, n);
      Tensor o3 = out.as_strided({batch, mm_, n}, {mm_ * n, n, 1}, 0);
      gemm(o3, as_mat(xe, dt), as_mat(ye, dt), mm_, n, k, batch, 1, 0);
      return true;
    }
    default: return false;
  }
}

}  // namespace tc::cuda
