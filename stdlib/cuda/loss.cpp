// Losses on CUDA, computed like the CPU kernels (stdlib/cpu/nn_loss.cpp): cross_entropy and
// nll_loss with class-index targets (weights, ignore_index, label smoothing; one thread per
// position computes max, log-sum-exp in double, the picked class and the smoothing term, targets
// checked on the device), mse_loss and l1_loss (broadcast input and target),
// binary_cross_entropy (input range checked on the device) and binary_cross_entropy_with_logits
// (weight, pos_weight). Sums for "mean" and "sum" are taken in double by one block.
// cross_entropy with class-probability targets (target shaped like the input) uses the same
// kernels: the per-position term is -sum_c w[c] * (t[c] (1 - s) + s / C) * logp[c].
#include "cpu/nn.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr unsigned kRed = 1024;  // threads of the one-block reductions

// The part of every loss program: block-wide sum of three doubles in thread 0's hands.
const char* kBlockSum3 =
    "__device__ void block_sum3(double& a, double& b, double& c) {\n"
    "  __shared__ double s[3][1024];\n"
    "  s[0][threadIdx.x] = a; s[1][threadIdx.x] = b; s[2][threadIdx.x] = c;\n"
    "  __syncthreads();\n"
    "  for (int h = blockDim.x / 2; h > 0; h >>= 1) {\n"
    "    if (threadIdx.x < h) for (int q = 0; q < 3; q++) s[q][threadIdx.x] += s[q][threadIdx.x + h];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  a = s[0][0]; b = s[1][0]; c = s[2][0];\n}\n";

Tensor expand_contig(const Tensor& t, const Shape& shape, DType dt, Device dev) {
  Shape st(shape.size(), 0);
  int64_t off = (int64_t)shape.size() - t.dim();
  for (int64_t d = 0; d < t.dim(); d++) st[d + off] = t.sizes()[d] == 1 ? 0 : t.strides()[d];
  Tensor v = t.as_strided(shape, st, t.offset());
  if (t.device().is_cpu()) {  // a wrapped number or CPU 0-dim tensor
    Tensor d = Tensor::empty(t.sizes(), t.dtype(), dev);
    d.copy_from(t);
    v = d.as_strided(shape, st, 0);
  }
  Tensor c = Tensor::empty(shape, dt, dev);
  copy_strided(c, v);
  return c;
}

bool distance(Op op, const Stack& a, const TensorMeta& m, Stack* result) {
  DType dt = m.dtype;
  if (!is_floating(dt)) return false;
  cpu::Reduction r = cpu::parse_reduction(a[2].str());
  Shape shape = broadcast_shapes(a[0].tensor().sizes(), a[1].tensor().sizes());
  Tensor out = empty_from_meta(m);
  *result = {Value(out)};
  int device = out.device().index;
  Tensor x = expand_contig(a[0].tensor(), shape, dt, out.device()), t = expand_contig(a[1].tensor(), shape, dt, out.device());
  int64_t n = x.numel();
  if (r == cpu::Reduction::None && n == 0) return true;
  std::string T = ctype(dt), A = mtype(dt);
  auto f = kernels(device, "distance_loss:" + T, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n" + kBlockSum3 +
           "extern \"C\" __global__ void dist(const T* __restrict__ x, const T* __restrict__ t, T* __restrict__ out, i64 n, int squared, int red) {\n"
           "  if (red == 0) {\n"
           "    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {\n"
           "      A d = ld(x[i]) - ld(t[i]);\n      out[i] = Cv<T>::f(squared ? d * d : m_fabs(d));\n    }\n"
           "    return;\n  }\n"
           "  double s = 0, u = 0, v = 0;\n"
           "  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {\n"
           "    A d = ld(x[i]) - ld(t[i]);\n    s += (double)(squared ? d * d : m_fabs(d));\n  }\n"
           "  block_sum3(s, u, v);\n"
           "  if (threadIdx.x == 0) out[0] = Cv<T>::f((A)(red == 2 ? s : s / (double)n));\n}\n";
  }, {"dist"})[0];
  const void* xp = x.data_ptr();
  const void* tp = t.data_ptr();
  void* op_ = out.data_ptr();
  int sq = op == Op::mse_loss ? 1 : 0, red = r == cpu::Reduction::None ? 0 : r == cpu::Reduction::Mean ? 1 : 2;
  void* args[] = {&xp, &tp, &op_, &n, &sq, &red};
  if (red == 0)
    launch(device, f, grid_for(n, device), 256,
           args);
  else
    launch(device, f, 1, kRed, args);
  return true;
}

bool class_loss(Op op, const Stack& a, const TensorMeta& m, Stack* result) {
  bool ce = op == Op::cross_entropy;
  const Tensor& x0 = a[0].tensor();
  if (!x0.device().is_cuda()) return false;
  auto on_device = [&](const Tensor& t) {  // a wrapped number or CPU 0-dim target or weight
    if (t.device() == x0.device()) return t;
    Tensor c = Tensor::empty(t.sizes(), t.dtype(), x0.device());
    c.copy_from(t);
    return c;
  };
  Tensor t0 = on_device(a[1].tensor());
  bool prob = ce && t0.sizes() == x0.sizes();  // class probabilities (the meta rule checked the rest)
  DType dt = m.dtype;
  cpu::Reduction r = cpu::parse_reduction(a[3].str());
  int64_t c = x0.dim() == 1 ? x0.sizes()[0] : x0.sizes()[1], nb = x0.dim() == 1 ? 1 : x0.sizes()[0], d = 1;
  for (int64_t i = 2; i < x0.dim(); i++) d *= x0.sizes()[i];
  int64_t npos = nb * d, ignore = a[4].to_int();
  double smoothing = ce ? std::max(0.0, a[5].to_double()) : 0.0;
  Tensor out = empty_from_meta(m);
  *result = {Value(out)};
  int device = out.device().index;
  Tensor x = contiguous_as(x0, x0.dtype()), t = contiguous_as(t0, prob ? DType::Float64 : DType::Int64);
  Tensor w = a[2].is_none() ? Tensor() : contiguous_as(on_device(a[2].tensor()), DType::Float64);
  Tensor terms = Tensor::empty({std::max<int64_t>(1, npos) * 3}, DType::Float64, out.device());
  std::string T = ctype(x.dtype()), A = mtype(x.dtype()), O = ctype(dt);
  auto fs = kernels(device, "class_loss:" + T + ":" + O, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\ntypedef " + O + " O;\n" + kBlockSum3 +
           "__device__ __forceinline__ double logp(const T* row, i64 j, i64 d, int lsm, A lse) {\n"
           "  A v = ld(row[j * d]);\n  return lsm ? (double)ld(Cv<T>::f(v - lse)) : (double)v;\n}\n"
           "extern \"C\" __global__ void terms(const T* __restrict__ x, const i64* __restrict__ tg, const double* __restrict__ tp,\n"
           "    const double* __restrict__ w, double* __restrict__ o, i64 npos, i64 c, i64 d, i64 ignore, int lsm, int smooth,\n"
           "    double ls, i64* err) {\n"
           "  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < npos; i += (i64)gridDim.x * blockDim.x) {\n"
           "    double* oi = o + 3 * i;\n    oi[0] = 0; oi[1] = 0; oi[2] = 0;\n"
           "    i64 k = 0;\n"
           "    if (!tp) {\n"
           "      k = tg[i];\n      if (k == ignore) continue;\n"
           "      if (k < 1 || k > c) { flag_error(err, " + std::to_string(kFlagTarget) + ", k); continue; }\n      k -= 1;\n    }\n"
           "    const T* row = x + (i / d) * c * d + i % d;\n    A lse = 0;\n"
           "    if (lsm) {\n"
           "      A mx = -m_inf<A>();\n"
           "      for (i64 j = 0; j < c; j++) { A v = ld(row[j * d]); mx = mx < v ? v : mx; }\n"
           "      if (mx == m_inf<A>() || mx == -m_inf<A>()) mx = 0;\n"
           "      double s = 0;\n      for (i64 j = 0; j < c; j++) s += (double)m_exp(ld(row[j * d]) - mx);\n"
           "      lse = mx + (A)log(s);\n    }\n"
           "    if (tp) {\n"
           "      const double* trow = tp + (i / d) * c * d + i % d;\n      double s = 0;\n"
           "      for (i64 j = 0; j < c; j++) s -= (w ? w[j] : 1.0) * (trow[j * d] * (1 - ls) + ls / (double)c) * logp(row, j, d, lsm, lse);\n"
           "      oi[0] = s;\n      continue;\n    }\n"
           "    double wk = w ? w[k] : 1.0;\n"
           "    oi[0] = -wk * logp(row, k, d, lsm, lse);\n    oi[2] = wk;\n"
           "    if (smooth) {\n      double s = 0;\n"
           "      for (i64 j = 0; j < c; j++) s -= (w ? w[j] : 1.0) * logp(row, j, d, lsm, lse);\n      oi[1] = s;\n    }\n"
           "  }\n}\n"
           "extern \"C\" __global__ void finish(const double* __restrict__ o, O* __restrict__ out, i64 npos, int red, double eps,\n"
           "    double c, int has_w, int prob) {\n"
           "  typedef decltype(ld(O())) OA;\n"
           "  if (red == 0) {\n"
           "    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < npos; i += (i64)gridDim.x * blockDim.x)\n"
           "      out[i] = Cv<O>::f((OA)((1 - eps) * o[3 * i] + eps / c * o[3 * i + 1]));\n"
           "    return;\n  }\n"
           "  double a = 0, b = 0, q = 0;\n"
           "  for (i64 i = threadIdx.x; i < npos; i += blockDim.x) { a += o[3 * i]; b += o[3 * i + 1]; q += o[3 * i + 2]; }\n"
           "  block_sum3(a, b, q);\n"
           "  if (threadIdx.x == 0) {\n"
           "    if (red == 1 && prob) a /= (double)npos;\n"
           "    else if (red == 1) { a /= q; b /= has_w ? q : (double)npos; }\n"
           "    out[0] = Cv<O>::f((OA)((1 - eps) * a + (eps > 0 ? eps / c * b : 0.0)));\n  }\n}\n";
  }, {"terms", "finish"});
  const void* xp = x.data_ptr();
  const void* tg = prob ? nullptr : t.data_ptr();
  const void* tp = prob ? t.data_ptr() : nullptr;
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  void* op_ = terms.data_ptr();
  void* err = reinterpret_cast<void*>(dev(device).error_word);
  int lsm = ce ? 1 : 0, sm = smoothing > 0 && !prob ? 1 : 0;
  void* args[] = {&xp, &tg, &tp, &wp, &op_, &npos, &c, &d, &ignore, &lsm, &sm, &smoothing, &err};
  unsigned grid = grid_for(npos, device, 128);
  launch(device, fs[0], grid, 128, args);
  check_device_errors(device, [ce, c](int64_t code, int64_t bad) {
    if (code != kFlagTarget || (bad >= 1 && bad <= c)) return;  // another check's flag
    TC_FAIL(IndexError, "%s(): target %lld is out of bounds (targets are 1-based, %lld classes)",
            ce ? "cross_entropy" : "nll_loss", (long long)bad, (long long)c);
  });
  int red = r == cpu::Reduction::None ? 0 : r == cpu::Reduction::Mean ? 1 : 2, hw = w.defined() ? 1 : 0, pr = prob ? 1 : 0;
  double eps = prob ? 0.0 : smoothing, cd = (double)c;
  const void* tp2 = terms.data_ptr();
  void* outp = out.data_ptr();
  void* args2[] = {&tp2, &outp, &npos, &red, &eps, &cd, &hw, &pr};
  if (red == 0)
    launch(device, fs[1], grid, 128, args2);
  else
    launch(device, fs[1], 1, kRed, args2);
  return true;
}

// binary_cross_entropy (logits = false: input holds probabilities) and ..._with_logits.
bool binary(bool logits, const Stack& a, const TensorMeta& m, Stack* result) {
  DType dt = m.dtype;
  if (!is_floating(dt)) return false;
  cpu::Reduction r = cpu::parse_reduction(a[3].str());
  Tensor out = empty_from_meta(m);
  *result = {Value(out)};
  int device = out.device().index;
  const Shape& shape = a[0].tensor().sizes();
  auto expand = [&](const Value& v) {
    return v.is_none() ? Tensor() : expand_contig(v.tensor(), shape, dt, out.device());
  };
  Tensor x = expand(a[0]), t = expand(a[1]), w = expand(a[2]), pw = logits ? expand(a[4]) : Tensor();
  int64_t n = x.numel();
  if (r == cpu::Reduction::None && n == 0) return true;
  std::string T = ctype(dt), A = mtype(dt);
  auto f = kernels(device, "binary_loss:" + T, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n" + kBlockSum3 +
           "__device__ __forceinline__ A mx(A a, A b) { return a < b ? b : a; }\n"
           "__device__ __forceinline__ A term(const T* x, const T* t, const T* w, const T* pw, i64 i, int logits, i64* err) {\n"
           "  A xv = ld(x[i]), tv = ld(t[i]);\n"
           "  if (!logits) {\n"
           "    if (!(xv >= (A)0 && xv <= (A)1)) flag_error(err, " + std::to_string(kFlagProbability) + ", 0);\n"
           "    A l = (tv - (A)1) * mx(m_log1p(-xv), (A)-100) - tv * mx(m_log(xv), (A)-100);\n"
           "    return w ? (A)ld(Cv<T>::f(l)) * (A)ld(w[i]) : l;\n"
           "  }\n"
           "  A mv = mx(-xv, (A)0);\n"
           "  A lw = pw ? ((A)ld(pw[i]) - (A)1) * tv + (A)1 : (A)1;\n"
           "  A l = ((A)1 - tv) * xv + lw * (m_log(m_exp(-mv) + m_exp(-xv - mv)) + mv);\n"
           "  return w ? l * (A)ld(w[i]) : l;\n}\n"
           "extern \"C\" __global__ void bce(const T* __restrict__ x, const T* __restrict__ t, const T* w, const T* pw,\n"
           "    T* __restrict__ out, i64 n, int logits, int red, i64* err) {\n"
           "  if (red == 0) {\n"
           "    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)\n"
           "      out[i] = Cv<T>::f(term(x, t, w, pw, i, logits, err));\n"
           "    return;\n  }\n"
           "  double s = 0, u = 0, v = 0;\n"
           "  for (i64 i = threadIdx.x; i < n; i += blockDim.x) s += (double)term(x, t, w, pw, i, logits, err);\n"
           "  block_sum3(s, u, v);\n"
           "  if (threadIdx.x == 0) out[0] = Cv<T>::f((A)(red == 2 ? s : s / (double)n));\n}\n";
  }, {"bce"})[0];
  const void* xp = x.data_ptr();
  const void* tp = t.data_ptr();
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const void* pp = pw.defined() ? pw.data_ptr() : nullptr;
  void* op_ = out.data_ptr();
  void* err = reinterpret_cast<void*>(dev(device).error_word);
  int lg = logits ? 1 : 0, red = r == cpu::Reduction::None ? 0 : r == cpu::Reduction::Mean ? 1 : 2;
  void* args[] = {&xp, &tp, &wp, &pp, &op_, &n, &lg, &red, &err};
  if (red == 0)
    launch(device, f, grid_for(n, device), 256,
           args);
  else
    launch(device, f, 1, kRed, args);
  if (!logits)
    check_device_errors(device, [](int64_t code, int64_t detail) {
      if (code == kFlagProbability)
        TC_FAIL(ValueError, "binary_cross_entropy(): all elements of input should be between 0 and 1");
    });
  return true;
}

}  // namespace

bool loss(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::mse_loss: case Op::l1_loss: return distance(op, a, m[0], result);
    case Op::cross_entropy: case Op::nll_loss: return class_loss(op, a, m[0], result);
    case Op::binary_cross_entropy: return binary(false, a, m[0], result);
    case Op::binary_cross_entropy_with_logits: return binary(true, a, m[0], result);
    default: return false;
  }
}

}  // namespace tc::cuda
