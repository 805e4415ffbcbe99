// The GEMM under every linalg op: strided matrices to OpenBLAS (transposed views read in place),
// float16/bfloat16 through float32, integers through a loop; and the batched matmul on top.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/linalg.h"
#include "tc/parallel.h"

// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels by CPU model at load time; a
// model newer than the library (e.g. 0.3.21 on Sapphire/Emerald Rapids) falls back to "Prescott"
// (SSE3 kernels, ~4x slower sgemm). These entry points exist only in DYNAMIC_ARCH builds.
extern "C" __attribute__((weak)) void gotoblas_dynamic_init(void);
extern "C" __attribute__((weak)) void gotoblas_dynamic_quit(void);
extern "C" __attribute__((weak)) void openblas_read_env(void);
extern "C" __attribute__((weak)) int blas_thread_shutdown_(void);

namespace tc::cpu {
namespace {

// When OpenBLAS chose an SSE-era core on a CPU with AVX2/AVX-512, re-select the best core the CPU
// supports, as OPENBLAS_CORETYPE would have (a user's OPENBLAS_CORETYPE is left alone). Runs at
// static initialisation, before any BLAS call.
const char* fix_openblas_core() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  const char* core = openblas_get_corename();
  static const char* const good[] = {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen"};
  for (const char* g : good)
    if (core && std::strcmp(core, g) == 0) return nullptr;
  __builtin_cpu_init();
  const char* want = nullptr;
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16"))
    want = "Cooperlake";
  else if (avx512)
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = "Haswell";
  if (!want) return nullptr;
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  return want;
}
[[maybe_unused]] const char* const openblas_core_fixed = fix_openblas_core();

// OpenBLAS's idle threads spin (sched_yield) for 2^28 cycles after every call before they sleep:
// on a machine with few cores they take the CPU from tc's pool, which runs the generated kernels
// between GEMMs. Unless the user set OPENBLAS_THREAD_TIMEOUT: 2^16 cycles (tens of microseconds),
// then sleep. Its threads are stopped here and restart, with that timeout, at the next call.
bool shorten_openblas_spin() {
  if (!openblas_read_env || !blas_thread_shutdown_ || std::getenv("OPENBLAS_THREAD_TIMEOUT")) return false;
  setenv("OPENBLAS_THREAD_TIMEOUT", "16", 0);
  openblas_read_env();
  blas_thread_shutdown_();
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  return true;
}
[[maybe_unused]] const bool openblas_spin_shortened = shorten_openblas_spin();

// OpenBLAS runs GEMMs up to this many multiply-adds on the calling thread only (its
// GEMM_MULTITHREAD_THRESHOLD * 65536), so below it we may parallelise over a batch ourselves.
constexpr int64_t kSmallGemm = 4 * 65536;

// How BLAS can read a row-major rows x cols matrix with strides (rs, cs): as is (NoTrans,
// ld = rs) or as the transpose of a row-major matrix (Trans, ld = cs). False if neither.
bool blas_layout(const Mat& m, CBLAS_TRANSPOSE* t, int64_t* ld) {
  int64_t lim = INT_MAX;
  if ((m.cs == 1 || m.cols == 1) && (m.rows == 1 || (m.rs >= std::max<int64_t>(1, m.cols) && m.rs <= lim))) {
    *t = CblasNoTrans;
    *ld = m.rows == 1 ? std::max<int64_t>(1, m.cols) : m.rs;
    return true;
  }
  if ((m.rs == 1 || m.rows == 1) && (m.cols == 1 || (m.cs >= std::max<int64_t>(1, m.rows) && m.cs <= lim))) {
    *t = CblasTrans;
    *ld = m.cols == 1 ? std::max<int64_t>(1, m.rows) : m.cs;
    return true;
  }
  return false;
}

// Copies a strided matrix of S into a row-major buffer of D.
template <typename D, typename S>
void pack(const Mat& m, D* out) {
  const S* p = static_cast<const S*>(m.data);
  for (int64_t i = 0; i < m.rows; i++)
    for (int64_t j = 0; j < m.cols; j++) out[i * m.cols + j] = static_cast<D>(static_cast<opmath_t<S>>(p[i * m.rs + j * m.cs]));
}

template <typename T>
void blas_gemm(Mat a, Mat b, T* c, int64_t ldc, T alpha, T beta) {
  CBLAS_TRANSPOSE ta, tb;
  int64_t lda, ldb;
  std::vector<T> abuf, bbuf;
  if (!blas_layout(a, &ta, &lda)) {
    abuf.resize(a.rows * a.cols);
    pack<T, T>(a, abuf.data());
    a = Mat{abuf.data(), a.rows, a.cols, a.cols, 1};
    ta = CblasNoTrans;
    lda = std::max<int64_t>(1, a.cols);
  }
  if (!blas_layout(b, &tb, &ldb)) {
    bbuf.resize(b.rows * b.cols);
    pack<T, T>(b, bbuf.data());
    b = Mat{bbuf.data(), b.rows, b.cols, b.cols, 1};
    tb = CblasNoTrans;
    ldb = std::max<int64_t>(1, b.cols);
  }
  int M = (int)a.rows, N = (int)b.cols, K = (int)a.cols;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, (const float*)a.data, (int)lda, (const float*)b.data, (int)ldb,
                beta, c, (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, (const double*)a.data, (int)lda, (const double*)b.data,
                (int)ldb, beta, c, (int)ldc);
}

// float16/bfloat16: pack to float32, sgemm, round back.
template <typename T>
void half_gemm(const Mat& a, const Mat& b, T* c, int64_t ldc, double alpha, double beta) {
  int64_t M = a.rows, N = b.cols;
  std::vector<float> abuf(a.rows * a.cols), bbuf(b.rows * b.cols), cbuf(M * N, 0.0f);
  pack<float, T>(a, abuf.data());
  pack<float, T>(b, bbuf.data());
  if (beta != 0)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) cbuf[i * N + j] = static_cast<float>(c[i * ldc + j]);
  blas_gemm<float>(Mat{abuf.data(), a.rows, a.cols, a.cols, 1}, Mat{bbuf.data(), b.rows, b.cols, b.cols, 1},
                   cbuf.data(), std::max<int64_t>(1, N), (float)alpha, (float)beta);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) c[i * ldc + j] = T(cbuf[i * N + j]);
}

// Integers: row by row, accumulating in T (wrapping like PyTorch).
template <typename T>
void int_gemm(const Mat& a, const Mat& b, T* c, int64_t ldc, T alpha, T beta) {
  const T* A = static_cast<const T*>(a.data);
  const T* B = static_cast<const T*>(b.data);
  int64_t M = a.rows, N = b.cols, K = a.cols;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, N * K));
  parallel_for(0, M, grain, [&](int64_t i0, int64_t i1) {
    std::vector<T> acc(N);
    for (int64_t i = i0; i < i1; i++) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t k = 0; k < K; k++) {
        T x = A[i * a.rs + k * a.cs];
        if (x == 0) continue;
        const T* brow = B + k * b.rs;
        for (int64_t j = 0; j < N; j++) acc[j] += x * brow[j * b.cs];
      }
      T* crow = c + i * ldc;
      for (int64_t j = 0; j < N; j++) crow[j] = (T)(beta == 0 ? alpha * acc[j] : beta * crow[j] + alpha * acc[j]);
    }
  });
}

}  // namespace

void gemm(DType dt, const Mat& a, const Mat& b, void* c, int64_t ldc, double alpha, double beta) {
  int64_t M = a.rows, N = b.cols, K = a.cols;
  TC_ASSERT(b.rows == K, "gemm: inner sizes differ");
  TC_ASSERT(M < INT_MAX && N < INT_MAX && K < INT_MAX, "gemm: matrix too large for BLAS");
  if (M == 0 || N == 0) return;
  visit_dtype(dt, [&]<typename T>() {
    T* C = static_cast<T*>(c);
    if (K == 0) {  // empty sum: C = beta * C
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
          C[i * ldc + j] = beta == 0 ? T(0) : T(static_cast<opmath_t<T>>(beta * static_cast<opmath_t<T>>(C[i * ldc + j])));
      return;
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      blas_gemm<T>(a, b, C, ldc, (T)alpha, (T)beta);
    else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      half_gemm<T>(a, b, C, ldc, alpha, beta);
    else if constexpr (std::is_same_v<T, bool>)
      TC_ASSERT(false, "gemm on bool (the meta rule rejects it)");
    else
      int_gemm<T>(a, b, C, ldc, (T)alpha, (T)beta);
  });
}

void matmul_into(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  int64_t r = out.dim();
  TC_ASSERT(r >= 2 && out.is_contiguous(), "matmul_into: out must be contiguous and at least 2-D");
  int64_t n = out.size(r - 2), p = out.size(r - 1), m = a.size(a.dim() - 1);
  Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  int64_t nb = shape_numel(batch), nbd = (int64_t)batch.size();
  if (n == 0 || p == 0 || nb == 0) return;
  // batch strides in elements, 0 where broadcast
  auto batch_strides = [&](const Tensor& t) {
    Shape s(nbd, 0);
    int64_t off = nbd - (t.dim() - 2);
    for (int64_t d = 0; d < t.dim() - 2; d++) s[off + d] = t.size(d) == 1 ? 0 : t.stride(d);
    return s;
  };
  Shape sa = batch_strides(a), sb = batch_strides(b);
  DType dt = out.dtype();
  size_t isz = itemsize(dt);
  const char* pa = static_cast<const char*>(a.data_ptr());
  const char* pb = static_cast<const char*>(b.data_ptr());
  char* pc = static_cast<char*>(out.data_ptr());
  Mat A{pa, n, m, a.stride(-2), a.stride(-1)}, B{pb, m, p, b.stride(-2), b.stride(-1)};

  // b shared by the whole batch: fold a's batch into its rows if they form one strided dim.
  if (std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; })) {
    int64_t rows = n, rs = n == 1 ? -1 : A.rs;  // -1: a single row takes any stride
    bool ok = true;
    for (int64_t d = nbd - 1; d >= 0 && ok; d--) {
      if (batch[d] == 1) continue;
      if (rs == -1) rs = sa[d];
      ok = sa[d] != 0 && sa[d] == rs * rows;
      rows *= batch[d];
    }
    if (ok) {
      gemm(dt, Mat{pa, rows, m, rs == -1 ? A.rs : rs, A.cs}, B, pc, p, alpha, beta);
      return;
    }
  }
  auto offset = [&](int64_t i, const Shape& st) {
    int64_t off = 0;
    for (int64_t d = nbd - 1; d >= 0; d--) {
      off += (i % batch[d]) * st[d];
      i /= batch[d];
    }
    return off;
  };
  auto run = [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; i++) {
      Mat Ai = A, Bi = B;
      Ai.data = pa + offset(i, sa) * (int64_t)isz;
      Bi.data = pb + offset(i, sb) * (int64_t)isz;
      gemm(dt, Ai, Bi, pc + i * n * p * (int64_t)isz, p, alpha, beta);
    }
  };
  if (n * p * std::max<int64_t>(m, 1) <= kSmallGemm)
    parallel_for(0, nb, std::max<int64_t>(1, kSmallGemm / 8 / std::max<int64_t>(1, n * p * m)), run);
  else
    run(0, nb);
}

void fill(const Tensor& t, double v) {
  Tensor dst = t;  // a handle: copy_from writes t's storage, broadcasting the 0-dim source
  dst.copy_from(Tensor::scalar(v, DType::Float64));
}

IntList expand_param(const char* op, const char* name, const IntList& v, size_t n) {
  if (v.size() == n) return v;
  TC_CHECK(v.size() == 1, ValueError, "%s(): %s must be a single int or a list of %zu ints, got %zu values", op, name,
           n, v.size());
  return IntList(n, v[0]);
}

PoolWindow pool_window(const char* name, const Stack& a, size_t first, bool dilated) {
  PoolWindow w;
  w.k = expand_param(name, "kernel_size", a[first].ints(), 2);
  w.s = a[first + 1].is_none() || a[first + 1].ints().empty() ? w.k : expand_param(name, "stride", a[first + 1].ints(), 2);
  w.pad = expand_param(name, "padding", a[first + 2].ints(), 2);
  w.d = dilated ? expand_param(name, "dilation", a[first + 3].ints(), 2) : IntList{1, 1};
  return w;
}

const char* cpp_type_name(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Float16: return "c10::Half";
    case DType::BFloat16: return "c10::BFloat16";
    case DType::Int64: return "long int";
    case DType::Int32: return "int";
    case DType::UInt8: return "unsigned char";
    case DType::Bool: return "bool";
  }
  return "?";
}

}  // namespace tc::cpu
