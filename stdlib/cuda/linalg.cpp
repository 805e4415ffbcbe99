// Matrix products on CUDA through cuBLAS (dlopen'ed libcublas.so.13): mm, bmm, matmul, linear,
// addmm, baddbmm for float32 (TF32 only when tc's float32 matmul precision is not "highest"),
// float64, float16 and bfloat16 (float accumulation). Transposed operands are passed as cuBLAS
// transposes, anything else strided is made contiguous first. Integer products take the host
// fallback. Convolutions: cuDNN (cudnn.cpp) when it takes the problem, else im2col + cuBLAS
// below; pools below; einsum in einsum.cpp.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cpu/linalg.h"
#include "cuda/runtime.h"
#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/cuda_blaslt.h"

namespace tc::cuda {
namespace {

struct Cublas {
  cublasStatus_t (*Create)(cublasHandle_t*);
  cublasStatus_t (*SetStream)(cublasHandle_t, CUstream);
  cublasStatus_t (*SetWorkspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*SetMathMode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const void*, const void*, cudaDataType, int, long long, const void*,
                                         cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                         long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  bool ok = false;
  std::string why;
  cublasHandle_t handle[16] = {};
  CUstream stream[16] = {};  // the stream each handle is set to
  // A workspace per pool stream (the default stream keeps cuBLAS's own): cublasSetStream resets
  // the handle to its default workspace, which two streams must not share while both run.
  CUdeviceptr workspace[16][1 + Stream::kPoolStreams] = {};
};

Cublas& cb() {
  static Cublas* c = [] {
    auto* c = new Cublas{};
    std::string errs;
    void* h = open_toolkit_library("libcublas.so.13", &errs);
    if (!h) {
      c->why = "cannot load cuBLAS (libcublas.so.13): " + errs;
      return c;
    }
    auto get = [&](const char* name, auto& fp) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      return fp != nullptr;
    };
    bool ok = get("cublasCreate_v2", c->Create) && get("cublasSetStream_v2", c->SetStream) &&
              get("cublasSetWorkspace_v2", c->SetWorkspace) &&
              get("cublasSetMathMode", c->SetMathMode) && get("cublasGemmStridedBatchedEx", c->GemmStridedBatchedEx);
    if (!ok) c->why = "cuBLAS lacks entry points";
    c->ok = ok;
    return c;
  }();
  return *c;
}

// The device's handle, set to the calling thread's current stream.
cublasHandle_t handle(int device) {
  Cublas& c = cb();
  TC_CHECK(c.ok, DeviceError, "matrix products on CUDA need cuBLAS: %s", c.why.c_str());
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  TC_CHECK(device < 16, DeviceError, "cuBLAS: at most 16 devices are supported (cuda:%d)", device);
  int id = current_stream_id(device);
  CUstream s = stream_handle(device, id);
  if (!c.handle[device])
    TC_CHECK(c.Create(&c.handle[device]) == CUBLAS_STATUS_SUCCESS, DeviceError, "cublasCreate failed");
  else if (c.stream[device] == s)
    return c.handle[device];
  c.SetStream(c.handle[device], s);
  c.stream[device] = s;
  if (id != 0) {
    const size_t size = dev(device).cc_major >= 9 ? 32u << 20 : 4u << 20;  // cuBLAS's advice per architecture
    CUdeviceptr& ws = c.workspace[device][id];
    if (!ws) check(drv().MemAlloc(&ws, size), "allocating a cuBLAS workspace");
    c.SetWorkspace(c.handle[device], (void*)ws, size);
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

// Row-major C[b] (m x n, leading dimension ldc, batch stride cstride; dtype dt on `device`) =
// alpha * A[b] (m x k) . B[b] (k x n) + beta * C[b].
void gemm_raw(DType dt, int device, void* C, int64_t ldc, int64_t cstride, const Mat& A, const Mat& B, int64_t m,
              int64_t n, int64_t k, int64_t batch, double alpha, double beta) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (compile_only()) return;
  cublasHandle_t h = handle(device);
  Cublas& c = cb();
  cublasComputeType_t ct = dt == DType::Float64 ? CUBLAS_COMPUTE_64F
                           : (dt == DType::Float32 && allow_tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                     : CUBLAS_COMPUTE_32F;
  double ad = alpha, bd = beta;
  float af = (float)alpha, bf = (float)beta;
  const void* pa = dt == DType::Float64 ? (const void*)&ad : (const void*)&af;
  const void* pb = dt == DType::Float64 ? (const void*)&bd : (const void*)&bf;
  // Column-major: C^T (n x m) = op(B)^T (n x k) . op(A)^T (k x m)
  cublasStatus_t st = c.GemmStridedBatchedEx(
      h, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N, A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, pa, B.p,
      cu_type(dt), (int)B.ld, B.bstride, A.p, cu_type(dt), (int)A.ld, A.bstride, pb, C, cu_type(dt), (int)ldc,
      cstride, (int)batch, ct, CUBLAS_GEMM_DEFAULT);
  TC_CHECK(st == CUBLAS_STATUS_SUCCESS, DeviceError, "cuBLAS gemm failed (status %d, m=%lld n=%lld k=%lld batch=%lld)",
           (int)st, (long long)m, (long long)n, (long long)k, (long long)batch);
}

// Row-major C[b] (m x n, ldc = n, contiguous) = alpha * A[b] (m x k) . B[b] (k x n) + beta * C[b].
void gemm(const Tensor& C, const Mat& A, const Mat& B, int64_t m, int64_t n, int64_t k, int64_t batch, double alpha,
          double beta) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0 && beta == 0) fill(C, 0, 0, false);  // empty inner dimension: C = beta * C (cuBLAS scales C)
  gemm_raw(C.dtype(), C.device().index, C.data_ptr(), n, m * n, A, B, m, n, k, batch, alpha, beta);
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

bool linalg_rest(Op op, const Stack& a, const Metas& m, Stack* result);  // integer_linalg.cpp: integers, 1-D linear

bool linalg(Op op, const Stack& a, const Metas& m, Stack* result) {
  if (linalg_rest(op, a, m, result)) return true;
  switch (op) {
    case Op::conv1d: case Op::conv2d: case Op::conv_transpose2d: case Op::max_pool2d: case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d: case Op::adaptive_max_pool2d: case Op::_conv2d_weight_backward:
    case Op::_max_pool2d_backward:
      return conv_pool(op, a, m, result);
    case Op::einsum: return einsum(a, m, result);
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
      // with a bias: one cuBLASLt call with the bias epilogue instead of a broadcast copy into
      // out and a product accumulating onto it; without: cuBLASLt too (its row groups for rows
      // that are not 16-byte multiples, GPT-2's LM head, blaslt.cpp)
      if (a[2].is_none() ? linear_act(out, x2, w, Tensor(), Act::None)
                         : a[2].tensor().dim() == 1 && a[2].tensor().sizes()[0] == n &&
                               linear_act(out, x2, w, contiguous_as(a[2].tensor(), dt), Act::None))
        return true;
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

// ---- convolutions (im2col + cuBLAS GEMM) and pools ------------------------------------------------
namespace {

constexpr int kCBlock = 256;

unsigned cgrid(int64_t n, int device) { return grid_for(n, device, kCBlock, 64); }

struct ConvGeo {
  int64_t N, C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW;
};

// col[n][(ch*KH + i)*KW + j][oh*OW + ow] = x[n][ch][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (0 outside)
void im2col(const ConvGeo& g, const Tensor& x, const Tensor& col, int64_t n0, int64_t nb) {
  int device = x.device().index;
  std::string T = ctype(x.dtype());
  auto f = kernels(device, "im2col:" + T, [&] {
    return prelude() + "typedef " + T + " T;\n"
           "struct G { i64 N, C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW; };\n"
           "extern \"C\" __global__ void im2col(const T* __restrict__ x, T* __restrict__ col, i64 total, G g) {\n"
           "  i64 L = g.OH * g.OW, KK = g.KH * g.KW;\n"
           "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < total; e += (i64)gridDim.x * 256) {\n"
           "    i64 l = e % L, r = e / L, k = r % (g.C * KK), n = r / (g.C * KK);\n"
           "    i64 ch = k / KK, i = (k % KK) / g.KW, j = k % g.KW, oh = l / g.OW, ow = l % g.OW;\n"
           "    i64 ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;\n"
           "    T v = (T)0;\n"
           "    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = x[((n * g.C + ch) * g.H + ih) * g.W + iw];\n"
           "    col[e] = v;\n  }\n}\n";
  }, {"im2col"})[0];
  int64_t total = nb * g.C * g.KH * g.KW * g.OH * g.OW;
  const char* xp = (const char*)x.data_ptr() + n0 * g.C * g.H * g.W * x.itemsize();
  void* cp = col.data_ptr();
  ConvGeo gg = g;
  void* args[] = {&xp, &cp, &total, &gg};
  launch(device, f, cgrid(total, device), kCBlock, args);
}

// y[n][oc][oh][ow] += sum over (i, j) of col[n][(oc*KH + i)*KW + j][ih*W + iw] where
// oh = ih*sh - ph + i*dh, ow = iw*sw - pw + j*dw (the transposed convolution's scatter as a gather).
void col2im(const ConvGeo& g, const Tensor& col, const Tensor& y, int64_t Og, int64_t group) {
  int device = y.device().index;
  std::string T = ctype(y.dtype());
  auto f = kernels(device, "col2im:" + T, [&] {
    return prelude() + "typedef " + T + " T;\n"
           "struct G { i64 N, C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW; };\n"
           "extern \"C\" __global__ void col2im(const T* __restrict__ col, T* __restrict__ y, i64 total, i64 Og, i64 grp, G g) {\n"
           "  i64 OL = g.OH * g.OW, HW = g.H * g.W, KK = g.KH * g.KW;\n"
           "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < total; e += (i64)gridDim.x * 256) {\n"
           "    i64 ow = e % g.OW, oh = (e / g.OW) % g.OH, oc = (e / OL) % Og, n = e / (OL * Og);\n"
           "    T acc = y[(n * g.O + grp * Og + oc) * OL + oh * g.OW + ow];\n"
           "    const T* c = col + n * (g.G * Og * KK * HW) + grp * Og * KK * HW + oc * KK * HW;\n"
           "    for (i64 i = 0; i < g.KH; i++) {\n"
           "      i64 th = oh + g.ph - i * g.dh;\n      if (th < 0 || th % g.sh) continue;\n"
           "      i64 ih = th / g.sh;\n      if (ih >= g.H) continue;\n"
           "      for (i64 j = 0; j < g.KW; j++) {\n"
           "        i64 tw = ow + g.pw - j * g.dw;\n        if (tw < 0 || tw % g.sw) continue;\n"
           "        i64 iw = tw / g.sw;\n        if (iw >= g.W) continue;\n"
           "        acc += c[(i * g.KW + j) * HW + ih * g.W + iw];\n      }\n    }\n"
           "    y[(n * g.O + grp * Og + oc) * OL + oh * g.OW + ow] = acc;\n  }\n}\n";
  }, {"col2im"})[0];
  int64_t total = g.N * Og * g.OH * g.OW;
  const void* cp = col.data_ptr();
  void* yp = y.data_ptr();
  ConvGeo gg = g;
  void* args[] = {&cp, &yp, &total, &Og, &group, &gg};
  launch(device, f, cgrid(total, device), kCBlock, args);
}

// Output pixels per sample below which a convolution runs as ONE GEMM over all samples
// (columns laid out [C*KH*KW][N*L]) instead of a strided batch of per-sample GEMMs whose n = L
// is too small to fill the GPU (ResNet's 8x8/4x4 stages at batch 16).
constexpr int64_t kBigGemmBelow = 2048;

// 32-bit index arithmetic when every offset fits (integer division by a runtime value is much
// cheaper in 32 bits on the GPU).
const char* index_type(int64_t max_index) { return max_index < (int64_t(1) << 30) ? "int" : "i64"; }

// col[k][n*L + l] = x[n0 + n][ch][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (k = (ch*KH + i)*KW + j;
// 0 outside), for nb samples from n0.
void im2col_nl(const ConvGeo& g, const Tensor& x, const Tensor& col, int64_t n0, int64_t nb) {
  int device = x.device().index;
  std::string T = ctype(x.dtype());
  int64_t total = nb * g.C * g.KH * g.KW * g.OH * g.OW;
  std::string I = index_type(std::max(total, g.N * g.C * g.H * g.W));
  auto f = kernels(device, "im2col_nl:" + T + ":" + I, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + I + " I;\n"
           "struct G { i64 N, C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW; };\n"
           "extern \"C\" __global__ void im2col_nl(const T* __restrict__ x, T* __restrict__ col, i64 total64, i64 nb64, G g64) {\n"
           "  I total = (I)total64, nb = (I)nb64, C = (I)g64.C, H = (I)g64.H, W = (I)g64.W, KH = (I)g64.KH, KW = (I)g64.KW;\n"
           "  I sh = (I)g64.sh, sw = (I)g64.sw, ph = (I)g64.ph, pw = (I)g64.pw, dh = (I)g64.dh, dw = (I)g64.dw, OW = (I)g64.OW;\n"
           "  I L = (I)g64.OH * OW, NL = nb * L, KK = KH * KW;\n"
           "  for (I e = (I)blockIdx.x * 256 + threadIdx.x; e < total; e += (I)gridDim.x * 256) {\n"
           "    I nl = e % NL, k = e / NL, n = nl / L, l = nl - n * L;\n"
           "    I ch = k / KK, r = k - ch * KK, i = r / KW, j = r - i * KW, oh = l / OW, ow = l - oh * OW;\n"
           "    I ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;\n"
           "    T v = (T)0;\n"
           "    if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[((n * C + ch) * H + ih) * W + iw];\n"
           "    col[e] = v;\n  }\n}\n";
  }, {"im2col_nl"})[0];
  const char* xp = (const char*)x.data_ptr() + n0 * g.C * g.H * g.W * x.itemsize();
  void* cp = col.data_ptr();
  ConvGeo gg = g;
  void* args[] = {&xp, &cp, &total, &nb, &gg};
  launch(device, f, cgrid(total, device), kCBlock, args);
}

// y[n0 + n][o][l] = tmp[o][n*L + l] (+ bias[o]) for nb samples.
void conv_scatter_out(const Tensor& tmp, const Tensor& bias, const Tensor& y, int64_t O, int64_t L, int64_t n0,
                      int64_t nb) {
  int device = y.device().index;
  std::string T = ctype(y.dtype());
  int64_t total = nb * O * L;
  std::string I = index_type(total);
  auto f = kernels(device, "conv_out:" + T + ":" + I, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + I + " I;\n"
           "extern \"C\" __global__ void conv_out(const T* __restrict__ t, const T* __restrict__ b, T* __restrict__ y, i64 total64, i64 O64, i64 L64) {\n"
           "  I total = (I)total64, O = (I)O64, L = (I)L64, NL = total / O;\n"
           "  for (I e = (I)blockIdx.x * 256 + threadIdx.x; e < total; e += (I)gridDim.x * 256) {\n"
           "    I l = e % L, r = e / L, o = r % O, n = r / O;\n"
           "    T v = t[o * NL + n * L + l];\n"
           "    if (b) v = v + b[o];\n"
           "    y[e] = v;\n  }\n}\n";
  }, {"conv_out"})[0];
  const void* tp = tmp.data_ptr();
  const void* bp = bias.defined() ? bias.data_ptr() : nullptr;
  void* yp = (char*)y.data_ptr() + n0 * O * L * y.itemsize();
  void* args[] = {&tp, &bp, &yp, &total, &O, &L};
  launch(device, f, cgrid(total, device), kCBlock, args);
}

// A forward convolution as one GEMM per group over all samples of a chunk:
// tmp[g] (Og x nb*L) = W_g (Og x Cg*KK) . col[g] (Cg*KK x nb*L) (a strided batch over groups),
// then tmp is scattered into y's (N, O, L) layout with the bias added.
void conv_one_gemm(const ConvGeo& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  DType ct = x.dtype();
  int device = y.device().index;
  size_t isz = itemsize(ct);
  int64_t KK = g.KH * g.KW, L = g.OH * g.OW, Cg = g.C / g.G, Og = g.O / g.G, CK = Cg * KK;
  int64_t per = (g.C * KK + g.O) * L;
  int64_t nb = std::max<int64_t>(1, std::min<int64_t>(g.N, (int64_t)(256 << 20) / std::max<int64_t>(1, per * (int64_t)isz)));
  Tensor col = Tensor::empty({nb * g.C * KK * L}, ct, y.device());
  Tensor tmp = Tensor::empty({nb * g.O * L}, ct, y.device());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    int64_t cnt = std::min(nb, g.N - n0);
    int64_t NL = cnt * L;
    im2col_nl(g, x, col, n0, cnt);
    Mat A{w, w.data_ptr(), false, CK, Og * CK};
    Mat B{col, col.data_ptr(), false, NL, CK * NL};
    if (CK == 0) fill(tmp, 0, 0, false);
    gemm_raw(ct, device, tmp.data_ptr(), NL, Og * NL, A, B, Og, NL, CK, g.G, 1, 0);
    conv_scatter_out(tmp, bias, y, g.O, L, n0, cnt);
  }
}

// The im2col + cuBLAS convolution (out contiguous or not; computed in ct).
void conv_fallback(const ConvGeo& g, bool tr, DType dt, DType ct, const Tensor& x0, const Tensor& w0,
                   const Tensor& bias0, const Tensor& out) {
  int device = out.device().index;
  Tensor x = contiguous_as(x0, ct), w = contiguous_as(w0, ct);
  Tensor y = ct == dt ? out : Tensor::empty(out.sizes(), ct, out.device());
  int64_t KK = g.KH * g.KW, HW = g.H * g.W, L = g.OH * g.OW, G = g.G;
  size_t isz = itemsize(ct);
  if (!tr && L < kBigGemmBelow) {
    conv_one_gemm(g, x, w, bias0.defined() ? contiguous_as(bias0, ct) : Tensor(), y);
    if (!y.same(out)) copy_strided(out, y);
    return;
  }
  // bias first (beta = 1 accumulates onto it), else zeros
  Shape ysz{g.N, g.O, L};
  Tensor y3 = y.as_strided(ysz, {g.O * L, L, 1}, 0);
  // without bias the GEMMs write y (beta = 0); the transposed form's col2im adds onto zeros
  double beta = 1;
  if (bias0.defined()) {
    Tensor b = contiguous_as(bias0, ct);
    copy_strided(y3, b.as_strided(ysz, {0, 1, 0}, b.offset()));
  } else if (tr) {
    fill(y3, 0, 0, false);
  } else {
    beta = 0;
  }
  if (!tr) {
    int64_t Cg = g.C / G, Og = g.O / G, CK = Cg * KK;
    bool direct = KK == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && L == HW;
    // im2col in chunks of samples (at most ~256 MiB of columns at a time)
    int64_t per = g.C * KK * L, nb = direct ? g.N : std::max<int64_t>(1, std::min<int64_t>(g.N, (int64_t)(256 << 20) / std::max<int64_t>(1, per * (int64_t)isz)));
    Tensor col = direct ? Tensor() : Tensor::empty({nb * per}, ct, out.device());
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
      int64_t cnt = std::min(nb, g.N - n0);
      const char* src;
      int64_t sstride;
      if (direct) {
        src = (const char*)x.data_ptr() + n0 * g.C * HW * isz;
        sstride = g.C * HW;
      } else {
        im2col(g, x, col, n0, cnt);
        src = (const char*)col.data_ptr();
        sstride = per;
      }
      for (int64_t gi = 0; gi < G; gi++) {
        Mat A{w, (const char*)w.data_ptr() + gi * Og * CK * isz, false, CK, 0};
        Mat B{x, src + gi * CK * L * isz, false, L, sstride};
        char* C = (char*)y.data_ptr() + (n0 * g.O * L + gi * Og * L) * isz;
        if (CK == 0 && beta == 0) fill(y3, 0, 0, false);
        gemm_raw(ct, device, C, L, g.O * L, A, B, Og, L, CK, cnt, 1, beta);
      }
    }
  } else {
    // col[n][g] (Og*KK x HW) = W_g^T (Og*KK x Cg) . x[n][g] (Cg x HW); then col2im adds into y
    int64_t Cg = g.C / G, Og = g.O / G;
    Tensor col = Tensor::empty({g.N * G * Og * KK * HW}, ct, out.device());
    for (int64_t gi = 0; gi < G; gi++) {
      Mat A{w, (const char*)w.data_ptr() + gi * Cg * Og * KK * isz, true, Og * KK, 0};
      Mat B{x, (const char*)x.data_ptr() + gi * Cg * HW * isz, false, HW, g.C * HW};
      char* C = (char*)col.data_ptr() + gi * Og * KK * HW * isz;
      gemm_raw(ct, device, C, HW, G * Og * KK * HW, A, B, Og * KK, HW, Cg, g.N, 1, 0);
    }
    for (int64_t gi = 0; gi < G; gi++) col2im(g, col, y, Og, gi);
  }
  if (!y.same(out)) copy_strided(out, y);
}

// The geometry of convolution `op` with arguments `a` and result meta `m`.
ConvGeo conv_geometry(Op op, const Stack& a, const Metas& m) {
  const Tensor& x0 = a[0].tensor();
  const Tensor& w0 = a[1].tensor();
  bool tr = op == Op::conv_transpose2d, one = op == Op::conv1d;
  const char* name = op_name(op);
  int64_t sd = one ? 1 : 2;
  bool batched = x0.dim() == sd + 2;
  IntList stride = cpu::expand_param(name, "stride", a[3].ints(), sd);
  IntList dil = cpu::expand_param(name, "dilation", a[tr ? 7 : 5].ints(), sd);
  ConvGeo g{};
  g.N = batched ? x0.sizes()[0] : 1;
  g.C = x0.sizes()[batched ? 1 : 0];
  g.H = one ? 1 : x0.sizes()[x0.dim() - 2];
  g.W = x0.sizes()[x0.dim() - 1];
  g.KH = one ? 1 : w0.sizes()[2];
  g.KW = w0.sizes()[w0.dim() - 1];
  g.G = a[6].to_int();
  g.sh = one ? 1 : stride[0];
  g.sw = stride.back();
  g.dh = one ? 1 : dil[0];
  g.dw = dil.back();
  g.O = tr ? w0.sizes()[1] * g.G : w0.sizes()[0];
  const Shape& os = m[0].sizes;
  g.OH = one ? 1 : os[os.size() - 2];
  g.OW = os.back();
  if (tr) {
    IntList pad = cpu::expand_param(name, "padding", a[4].ints(), sd);
    g.ph = one ? 0 : pad[0];
    g.pw = pad.back();
  } else if (a[4].is_string()) {
    bool same = a[4].str() == "same";
    g.ph = same ? g.dh * (g.KH - 1) / 2 : 0;
    g.pw = same ? g.dw * (g.KW - 1) / 2 : 0;
  } else {
    IntList pad = cpu::expand_param(name, "padding", a[4].ints(), sd);
    g.ph = one ? 0 : pad[0];
    g.pw = pad.back();
  }
  return g;
}

bool conv(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x0 = a[0].tensor();
  const Tensor& w0 = a[1].tensor();
  DType dt = m[0].dtype;
  if (!is_floating(dt)) return false;
  DType ct = dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt;
  bool tr = op == Op::conv_transpose2d;
  const ConvGeo g = conv_geometry(op, a, m);
  Tensor out = empty_from_meta(m[0]);
  *result = {Value(out)};
  if (out.numel() == 0) {
    last_conv_impl_slot() = "im2col+cublas";
    return true;
  }
  Tensor bias0 = a[2].is_none() ? Tensor() : a[2].tensor();
  // cuDNN when present (in the tensor's own dtype). Timing both paths per problem and keeping the
  // faster (tried until cuDNN's graph API replaced its legacy one) picked the fallback for a few
  // small late-stage problems from isolated timings, yet made ResNet-50 and DenseNet-121 slower
  // (2.67 vs 1.90 ms, 5.37 vs 4.74 ms on an H200): in a model the fallback's three launches cost
  // more host time than the one cuDNN call, so cuDNN always runs when it takes the problem.
  if (out.is_contiguous()) {
    ConvProblem p{tr, dt, g.N, g.C, g.H, g.W, g.O, g.KH, g.KW, g.G, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.OH, g.OW};
    Tensor b = bias0.defined() ? contiguous_as(bias0, dt) : Tensor();
    if (cudnn_conv(p, contiguous_as(x0, dt), contiguous_as(w0, dt), b, out)) return true;
  }
  last_conv_impl_slot() = "im2col+cublas";
  conv_fallback(g, tr, dt, ct, x0, w0, bias0, out);
  return true;
}
// _conv2d_weight_backward: cuDNN's backward-filter when the problem is one cuDNN describes
// (symmetric padding, dy of the forward output's size), otherwise the formula in ops.
bool conv_weight_grad(const Stack& a, const Metas& m, Stack* result) {
  const Tensor &g0 = a[0].tensor(), &x0 = a[1].tensor();
  DType dt = m[0].dtype;
  const IntList& ws = a[2].ints();
  IntList stride = cpu::expand_param("conv2d", "stride", a[3].ints(), 2);
  IntList dil = cpu::expand_param("conv2d", "dilation", a[5].ints(), 2);
  auto pad = cpu::conv2d_padding(a[4], dil, ws[2], ws[3]);
  Tensor out = empty_from_meta(m[0]);
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  ConvProblem p{false, dt, x0.sizes()[0], x0.sizes()[1], x0.sizes()[2], x0.sizes()[3], ws[0], ws[2], ws[3], a[6].to_int(),
                stride[0], stride[1], pad[0], pad[2], dil[0], dil[1], g0.sizes()[2], g0.sizes()[3]};
  p.wgrad = true;
  bool described = pad[0] == pad[1] && pad[2] == pad[3] && g0.numel() > 0 &&
                   p.OH == (p.H + 2 * p.ph - p.dh * (p.KH - 1) - 1) / p.sh + 1 &&
                   p.OW == (p.W + 2 * p.pw - p.dw * (p.KW - 1) - 1) / p.sw + 1;
  if (described && cudnn_conv(p, contiguous_as(x0, dt), out, Tensor(), contiguous_as(g0, dt))) return true;
  out.copy_from(conv2d_weight_grad_by_ops(a));
  return true;
}

bool pool(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x0 = a[0].tensor();
  DType dt = x0.dtype();
  const char* name = op_name(op);
  Tensor out = empty_from_meta(m[0]);
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  int device = out.device().index;
  Tensor x = contiguous_as(x0, dt);
  struct PG {
    int64_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, cip, divisor;
  } p{};
  p.H = x.sizes()[x.dim() - 2];
  p.W = x.sizes()[x.dim() - 1];
  p.OH = out.sizes()[out.dim() - 2];
  p.OW = out.sizes()[out.dim() - 1];
  int kind = op == Op::max_pool2d ? 0 : op == Op::avg_pool2d ? 1 : op == Op::adaptive_avg_pool2d ? 2 : 3;
  if (kind < 2) {
    bool is_max = kind == 0;
    const auto [k, s, pad, d] = cpu::pool_window(name, a, 1, is_max);
    p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.ph = pad[0], p.pw = pad[1], p.dh = d[0], p.dw = d[1];
    if (!is_max) {
      p.cip = a[5].to_bool() ? 1 : 0;
      p.divisor = a[6].is_none() ? 0 : a[6].to_int();
    }
  }
  // integers accumulate in i64 (sums wrap, averages truncate, as the CPU's kernels)
  const bool integral = !is_floating(dt);
  std::string T = ctype(dt), A = integral ? "i64" : mtype(dt);
  const std::string lowest = integral ? "(A)(-9223372036854775807ll - 1)" : "-m_inf<A>()";
  auto f = kernels(device, "pool:" + T, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "struct P { i64 H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, cip, divisor; };\n"
           "__device__ __forceinline__ A wmax(const T* x, i64 W, i64 h0, i64 h1, i64 dh, i64 w0, i64 w1, i64 dw) {\n"
           "  A best = " + lowest + ";\n"
           "  for (i64 h = h0; h < h1; h += dh) for (i64 w = w0; w < w1; w += dw) {\n"
           "    A v = cvt<A>(x[h * W + w]);\n    if (v > best || v != v) best = v;\n    if (best != best) return best;\n  }\n"
           "  return best;\n}\n"
           "__device__ __forceinline__ A wsum(const T* x, i64 W, i64 h0, i64 h1, i64 w0, i64 w1) {\n"
           "  A s = 0;\n  for (i64 h = h0; h < h1; h++) for (i64 w = w0; w < w1; w++) s += cvt<A>(x[h * W + w]);\n  return s;\n}\n"
           "extern \"C\" __global__ void pool(const T* __restrict__ x, T* __restrict__ y, i64 total, int kind, P p) {\n"
           "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < total; e += (i64)gridDim.x * 256) {\n"
           "    i64 ow = e % p.OW, oh = (e / p.OW) % p.OH, pl = e / (p.OW * p.OH);\n"
           "    const T* in = x + pl * p.H * p.W;\n    A r;\n"
           "    if (kind == 0) {\n"
           "      i64 h0 = oh * p.sh - p.ph, h1 = h0 + (p.kh - 1) * p.dh + 1; if (h1 > p.H) h1 = p.H;\n"
           "      while (h0 < 0) h0 += p.dh;\n"
           "      i64 w0 = ow * p.sw - p.pw, w1 = w0 + (p.kw - 1) * p.dw + 1; if (w1 > p.W) w1 = p.W;\n"
           "      while (w0 < 0) w0 += p.dw;\n"
           "      r = wmax(in, p.W, h0, h1, p.dh, w0, w1, p.dw);\n"
           "    } else if (kind == 1) {\n"
           "      i64 h0 = oh * p.sh - p.ph, h1 = h0 + p.kh; if (h1 > p.H + p.ph) h1 = p.H + p.ph;\n"
           "      i64 hpad = h1 - h0; if (h0 < 0) h0 = 0; if (h1 > p.H) h1 = p.H;\n"
           "      i64 w0 = ow * p.sw - p.pw, w1 = w0 + p.kw; if (w1 > p.W + p.pw) w1 = p.W + p.pw;\n"
           "      i64 count = hpad * (w1 - w0); if (w0 < 0) w0 = 0; if (w1 > p.W) w1 = p.W;\n"
           "      if (p.divisor) count = p.divisor; else if (!p.cip) count = (h1 - h0) * (w1 - w0);\n"
           "      r = wsum(in, p.W, h0, h1, w0, w1) / (A)count;\n"
           "    } else {\n"
           "      i64 h0 = oh * p.H / p.OH, h1 = ((oh + 1) * p.H + p.OH - 1) / p.OH;\n"
           "      i64 w0 = ow * p.W / p.OW, w1 = ((ow + 1) * p.W + p.OW - 1) / p.OW;\n"
           "      r = kind == 3 ? wmax(in, p.W, h0, h1, 1, w0, w1, 1) : wsum(in, p.W, h0, h1, w0, w1) / (A)((h1 - h0) * (w1 - w0));\n"
           "    }\n"
           "    y[e] = Cv<T>::f(r);\n  }\n}\n";
  }, {"pool"})[0];
  int64_t total = out.numel();
  const void* xp = x.data_ptr();
  void* yp = out.data_ptr();
  void* args[] = {&xp, &yp, &total, &kind, &p};
  launch(device, f, cgrid(total, device), kCBlock, args);
  return true;
}

// _max_pool2d_backward(grad_out, self, kernel_size, stride, padding, dilation, ceil_mode): a
// thread per output element finds its window's maximum as the CPU kernel does (stdlib/cpu/pool.cpp:
// the first largest, outside the plane -inf, NaN wins) and stores its place in the window; then a
// thread per input element sums, in window order, the gradients of the windows (at most
// ceil(k / s) per dim) whose maximum it is. No atomics: deterministic. In-plane indices are 32-bit
// (planes run over the grid's y). The decomposition's backward (a stack of the windows and a
// scatter) took 0.23 ms for DenseNet-121's stem pool at batch 16 on an H200; one kernel that found
// every window's maximum again per input element, in 64-bit indices, 0.44 ms.
bool max_pool_backward(const Stack& a, const Metas& m, Stack* result) {
  const Tensor &g0 = a[0].tensor(), &x0 = a[1].tensor();
  const int64_t H = x0.sizes()[x0.dim() - 2], W = x0.sizes()[x0.dim() - 1];
  const int64_t OH = g0.sizes()[g0.dim() - 2], OW = g0.sizes()[g0.dim() - 1];
  if (H * W >= (int64_t(1) << 31) || OH * OW >= (int64_t(1) << 31)) return false;  // (the host's kernel then)
  DType dt = x0.dtype();
  Tensor out = empty_from_meta(m[0]);
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  int device = out.device().index;
  Tensor g = contiguous_as(g0, dt), x = contiguous_as(x0, dt);
  const auto [k, s, pad, d] = cpu::pool_window("max_pool2d", a, 2, true);
  struct PG {
    int32_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  } p{int32_t(H), int32_t(W), int32_t(OH), int32_t(OW), int32_t(k[0]), int32_t(k[1]), int32_t(s[0]),
      int32_t(s[1]), int32_t(pad[0]), int32_t(pad[1]), int32_t(d[0]), int32_t(d[1])};
  std::string T = ctype(dt), A = mtype(dt);
  auto f = kernels(device, "maxpool_bw2:" + T, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "struct P { int H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw; };\n"
           "extern \"C\" __global__ void maxpool_arg(const T* __restrict__ x, int* __restrict__ arg, P p, i64 planes) {\n"
           "  const int n = p.OH * p.OW;\n"
           "  for (i64 pl = blockIdx.y; pl < planes; pl += gridDim.y) {\n"
           "    const T* in = x + pl * p.H * p.W;\n"
           "    for (int r = blockIdx.x * 256 + threadIdx.x; r < n; r += gridDim.x * 256) {\n"
           "      const int h0 = r / p.OW * p.sh - p.ph, w0 = r % p.OW * p.sw - p.pw;\n"
           "      A best = 0;\n      int at = -1;\n"
           "      for (int i = 0; i < p.kh; i++) for (int j = 0; j < p.kw; j++) {\n"
           "        const int h = h0 + i * p.dh, w = w0 + j * p.dw;\n"
           "        A v = h >= 0 && h < p.H && w >= 0 && w < p.W ? cvt<A>(in[h * p.W + w]) : -m_inf<A>();\n"
           "        if (at < 0 || v > best || (v != v && best == best)) { best = v; at = i * p.kw + j; }\n"
           "      }\n"
           "      arg[pl * n + r] = at;\n    }\n  }\n}\n"
           "extern \"C\" __global__ void maxpool_bw(const T* __restrict__ g, const int* __restrict__ arg, T* __restrict__ gx, P p, i64 planes) {\n"
           "  const int n = p.H * p.W, on = p.OH * p.OW;\n"
           "  for (i64 pl = blockIdx.y; pl < planes; pl += gridDim.y) {\n"
           "    const T* go = g + pl * on;\n    const int* ag = arg + pl * on;\n"
           "    for (int r = blockIdx.x * 256 + threadIdx.x; r < n; r += gridDim.x * 256) {\n"
           "      const int w = r % p.W, h = r / p.W;\n      A acc = 0;\n"
           "      for (int i = 0; i < p.kh; i++) {\n"
           "        const int t = h + p.ph - i * p.dh;\n"
           "        if (t < 0 || t % p.sh || t / p.sh >= p.OH) continue;\n"
           "        for (int j = 0; j < p.kw; j++) {\n"
           "          const int u = w + p.pw - j * p.dw;\n"
           "          if (u < 0 || u % p.sw || u / p.sw >= p.OW) continue;\n"
           "          const int o = t / p.sh * p.OW + u / p.sw;\n"
           "          if (ag[o] == i * p.kw + j) acc += cvt<A>(go[o]);\n"
           "        }\n      }\n"
           "      gx[pl * n + r] = Cv<T>::f(acc);\n    }\n  }\n}\n";
  }, {"maxpool_arg", "maxpool_bw"});
  int64_t planes = out.numel() / (H * W);
  Tensor arg = Tensor::empty({planes * OH * OW}, DType::Int32, out.device());  // (freed stream-ordered)
  const void *gp = g.data_ptr(), *xp = x.data_ptr();
  void *ap = arg.data_ptr(), *yp = out.data_ptr();
  const unsigned gy = unsigned(std::min<int64_t>(planes, 65535));
  void* args_arg[] = {&xp, &ap, &p, &planes};
  launch3(device, f[0], unsigned(std::min<int64_t>((OH * OW + 255) / 256, 1024)), gy, 1, 256, args_arg);
  void* args_bw[] = {&gp, &ap, &yp, &p, &planes};
  launch3(device, f[1], unsigned(std::min<int64_t>((H * W + 255) / 256, 1024)), gy, 1, 256, args_bw);
  return true;
}

}  // namespace

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  const Shape& s = t.sizes();
  const int64_t want[4] = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
  for (int d = 0; d < 4; d++)
    if (s[d] != 1 && t.strides()[d] != want[d]) return false;
  return true;
}

Tensor empty_channels_last(const Shape& s, DType dt, Device device) {
  Tensor t = Tensor::empty({s[0], s[2], s[3], s[1]}, dt, device);
  return t.as_strided(s, {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}, t.offset());
}

Tensor as_channels_last(const Tensor& t) {
  if (is_channels_last(t)) return t;
  Tensor c = empty_channels_last(t.sizes(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

ConvLast conv2d_channels_last_setup(const Stack& a) {
  static const bool products = [] {
    const char* e = std::getenv("TC_CUDA_CONV1X1_GEMM");
    return !(e && *e == '0');
  }();
  const Metas m = infer_meta(Op::conv2d, a);
  const ConvGeo g = conv_geometry(Op::conv2d, a, m);
  ConvLast c;
  c.out = m[0].sizes;
  c.dt = m[0].dtype;
  c.p = ConvProblem{false, c.dt, g.N,  g.C,  g.H,  g.W,  g.O,  g.KH, g.KW,
                    g.G,   g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.OH, g.OW};
  c.p.channels_last = true;
  const Tensor &x = a[0].tensor(), &w = a[1].tensor();
  c.library = x.dim() == 4 && x.dtype() == c.dt && w.dtype() == c.dt;
  c.product = products && c.library && g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
              g.G == 1 && g.OH == g.H && g.OW == g.W;
  return c;
}

Tensor conv2d_channels_last(const Stack& a, const ConvLast& c) {
  const Tensor& x0 = a[0].tensor();
  Tensor out = empty_channels_last(c.out, c.dt, x0.device());
  if (out.numel() == 0) return out;
  if (c.library) {
    const Tensor x = as_channels_last(x0), w = contiguous_as(a[1].tensor(), c.dt);
    const Tensor b = a[2].is_none() ? Tensor() : contiguous_as(a[2].tensor(), c.dt);
    const ConvProblem& p = c.p;
    // channels-last x is the matrix [N*H*W, C] and out [N*H*W, O]: out = x @ w[O, C]^T
    const int64_t rows = p.N * p.H * p.W;
    if (c.product && matmul_act(out.as_strided({rows, p.O}, {p.O, 1}, out.offset()),
                                x.as_strided({rows, p.C}, {p.C, 1}, x.offset()),
                                w.as_strided({p.C, p.O}, {1, p.C}, w.offset()), b, Act::None))
      return out;
    if (cudnn_conv(p, x, w, b, out)) return out;
  }
  out.copy_from(call1(Op::conv2d, a));  // the libraries declined: the NCHW convolution, copied
  return out;
}

bool conv_pool(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::conv1d: case Op::conv2d: case Op::conv_transpose2d: return conv(op, a, m, result);
    case Op::_conv2d_weight_backward: return conv_weight_grad(a, m, result);
    case Op::_max_pool2d_backward: return max_pool_backward(a, m, result);
    default: return pool(op, a, m, result);
  }
}

}  // namespace tc::cuda
