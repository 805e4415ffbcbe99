// batch_norm with batch statistics and its gradient, one kernel each: a block of 256 threads per
// channel walks the channel's N * S elements (two passes for the mean and the sum of squared
// deviations in double, as the CPU), thread 0 updates the running statistics (unbiased variance,
// momentum) and num_batches_tracked, and a last pass writes the normalised output with the CPU's
// scale-and-shift; the backward recomputes the statistics the same way (one more read of the
// input instead of saved ones) and writes grad_input, grad_weight and grad_bias. The general
// multi-launch path (stdlib/cuda/nn.cpp) remains for parameters of mixed dtypes or on the host.
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kBlock = 256;

// Whether the per-channel parameters at `idx` that are given (weight, bias, running stats) are
// contiguous vectors of C elements on `device` of one floating dtype, stored in *pt.
bool params_of(const Stack& a, std::initializer_list<int> idx, int64_t C, int device, DType* pt) {
  bool first = true;
  for (int i : idx) {
    if (a[i].is_none()) continue;
    const Tensor& t = a[i].tensor();
    if (!is_floating(t.dtype()) || !t.device().is_cuda() || t.device().index != device || !t.is_contiguous() ||
        t.numel() != C)
      return false;
    if (first) *pt = t.dtype();
    if (t.dtype() != *pt) return false;
    first = false;
  }
  return true;
}

const void* ptr(const Value& v) { return v.is_none() ? nullptr : v.tensor().data_ptr(); }

// Element j of channel c of a contiguous [N, C, S] tensor: x[(j / S) * C * S + c * S + j % S].
const char* kChannelLoop =
    "#define FOR_CHANNEL(j, at) for (I j = threadIdx.x, at; j < M && (at = (j / S) * CS + c * S + j % S, true); "
    "j += 256)\n";

std::string types(DType dt, DType pt, const char* I) {
  std::string A = dt == DType::Float64 || pt == DType::Float64 ? "double" : "float";
  return std::string("typedef ") + ctype(dt) + " T;\ntypedef " + ctype(pt) + " P;\ntypedef " + A + " A;\ntypedef " +
         I + " I;\n";
}

}  // namespace

bool batch_norm_train(const Tensor& x, const Stack& a, const Tensor& out) {
  int device = out.device().index;
  int64_t N = x.sizes()[0], C = x.sizes()[1], S = 1;
  for (int64_t d = 2; d < x.dim(); d++) S *= x.sizes()[d];
  DType pt = x.dtype();
  if (!params_of(a, {1, 2, 3, 4}, C, device, &pt) || !out.is_contiguous()) return false;
  const Tensor* nbt = a.size() > 8 && !a[8].is_none() ? &a[8].tensor() : nullptr;
  bool count_here = nbt && nbt->dtype() == DType::Int64 && nbt->device() == out.device();
  if (nbt && !count_here) return false;
  if (C == 0) return true;
  const char* I = x.numel() < (int64_t(1) << 31) ? "unsigned" : "u64";
  auto f = kernels(device, std::string("bntrain:") + ctype(x.dtype()) + ctype(pt) + I, [&] {
    return prelude() + block_sum_src() + types(x.dtype(), pt, I) + kChannelLoop +
           "extern \"C\" __global__ void __launch_bounds__(256) bntrain(const T* __restrict__ x, T* __restrict__ y, "
           "P* rm, P* rv, const P* __restrict__ w, const P* __restrict__ b, i64* nbt, i64 N64, i64 C64, i64 S64, "
           "double momentum, double eps) {\n"
           "  __shared__ double sm[9];\n"
           "  I S = (I)S64, CS = (I)C64 * S, M = (I)N64 * S, c = blockIdx.x;\n"
           "  double t = 0;\n"
           "  FOR_CHANNEL(j, at) t += (double)cvt<A>(x[at]);\n"
           "  double mean = block_sum(t, sm) / (double)M;\n"
           "  double q = 0;\n"
           "  FOR_CHANNEL(j, at) { double d = (double)cvt<A>(x[at]) - mean; q += d * d; }\n"
           "  q = block_sum(q, sm);\n"
           "  if (threadIdx.x == 0) {\n"
           "    if (rm) rm[c] = Cv<P>::f(momentum * mean + (1 - momentum) * (double)cvt<A>(rm[c]));\n"
           "    if (rv) rv[c] = Cv<P>::f(momentum * q / (double)(M - 1) + (1 - momentum) * (double)cvt<A>(rv[c]));\n"
           "    if (nbt && c == 0) nbt[0] += 1;\n"
           "  }\n"
           "  double sc = 1.0 / sqrt(q / (double)M + eps) * (w ? (double)cvt<A>(w[c]) : 1.0);\n"
           "  A scale = (A)sc, shift = (A)((b ? (double)cvt<A>(b[c]) : 0.0) - mean * sc);\n"
           "  FOR_CHANNEL(j, at) y[at] = Cv<T>::f(cvt<A>(x[at]) * scale + shift);\n"
           "}\n";
  }, {"bntrain"})[0];
  const void *xp = x.data_ptr(), *wp = ptr(a[1]), *bp = ptr(a[2]);
  void *yp = out.data_ptr(), *rmp = const_cast<void*>(ptr(a[3])), *rvp = const_cast<void*>(ptr(a[4]));
  void* np = count_here ? nbt->data_ptr() : nullptr;
  double momentum = a[6].to_double(), eps = a[7].to_double();
  void* args[] = {&xp, &yp, &rmp, &rvp, &wp, &bp, &np, &N, &C, &S, &momentum, &eps};
  launch(device, f, (unsigned)C, kBlock, args);
  for (int i : {3, 4, 8})
    if (i < (int)a.size() && !a[i].is_none()) Tensor(a[i].tensor()).bump_version();
  return true;
}

bool batch_norm_backward(const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x0 = a[1].tensor();
  DType dt = x0.dtype();
  int device = m[0].device.index;
  int64_t N = x0.sizes()[0], C = x0.sizes()[1], S = 1;
  for (int64_t d = 2; d < x0.dim(); d++) S *= x0.sizes()[d];
  DType pt = m[1].dtype;
  if (!params_of(a, {2, 3, 4}, C, device, &pt) || (!a[2].is_none() && pt != m[1].dtype)) return false;
  bool use_batch = a[5].to_bool() || a[3].is_none() || a[4].is_none();
  Tensor g = contiguous_as(a[0].tensor(), dt), x = contiguous_as(x0, dt);
  Tensor gx = empty_from_meta(m[0]), gw = empty_from_meta(m[1]), gb = empty_from_meta(m[2]);
  *result = {Value(gx), Value(gw), Value(gb)};
  if (C == 0) return true;
  const char* I = x.numel() < (int64_t(1) << 31) ? "unsigned" : "u64";
  auto f = kernels(device, std::string("bnbackward:") + ctype(dt) + ctype(pt) + ctype(m[1].dtype) + I, [&] {
    return prelude() + block_sum_src() + types(dt, pt, I) + "typedef " + ctype(m[1].dtype) + " D;\n" + kChannelLoop +
           "extern \"C\" __global__ void __launch_bounds__(256) bnbackward(const T* __restrict__ g, "
           "const T* __restrict__ x, T* __restrict__ gx, const P* __restrict__ w, const P* __restrict__ rm, "
           "const P* __restrict__ rv, D* gw, D* gb, i64 N64, i64 C64, i64 S64, int use_batch, double eps) {\n"
           "  __shared__ double sm[9];\n"
           "  I S = (I)S64, CS = (I)C64 * S, M = (I)N64 * S, c = blockIdx.x;\n"
           "  double mean, invstd;\n"
           "  if (use_batch) {\n"
           "    double t = 0;\n"
           "    FOR_CHANNEL(j, at) t += (double)cvt<A>(x[at]);\n"
           "    mean = block_sum(t, sm) / (double)M;\n"
           "    double q = 0;\n"
           "    FOR_CHANNEL(j, at) { double d = (double)cvt<A>(x[at]) - mean; q += d * d; }\n"
           "    invstd = 1.0 / sqrt(block_sum(q, sm) / (double)M + eps);\n"
           "  } else {\n"
           "    mean = (double)cvt<A>(rm[c]);\n"
           "    invstd = 1.0 / sqrt((double)cvt<A>(rv[c]) + eps);\n"
           "  }\n"
           "  double sg = 0, sgx = 0;\n"
           "  FOR_CHANNEL(j, at) { double gv = (double)cvt<A>(g[at]); sg += gv; sgx += gv * ((double)cvt<A>(x[at]) - mean); }\n"
           "  sg = block_sum(sg, sm);\n"
           "  sgx = block_sum(sgx, sm);\n"
           "  if (threadIdx.x == 0) { gw[c] = Cv<D>::f(sgx * invstd); gb[c] = Cv<D>::f(sg); }\n"
           "  double k = (w ? (double)cvt<A>(w[c]) : 1.0) * invstd;\n"
           "  A kk = (A)k, mu = (A)mean;\n"
           "  if (use_batch) {\n"
           "    A mg = (A)(sg / (double)M), proj = (A)(invstd * invstd * sgx / (double)M);\n"
           "    FOR_CHANNEL(j, at) gx[at] = Cv<T>::f(kk * (cvt<A>(g[at]) - mg - (cvt<A>(x[at]) - mu) * proj));\n"
           "  } else {\n"
           "    FOR_CHANNEL(j, at) gx[at] = Cv<T>::f(cvt<A>(g[at]) * kk);\n"
           "  }\n"
           "}\n";
  }, {"bnbackward"})[0];
  const void *gp = g.data_ptr(), *xp = x.data_ptr(), *wp = ptr(a[2]), *rmp = ptr(a[3]), *rvp = ptr(a[4]);
  void *gxp = gx.data_ptr(), *gwp = gw.data_ptr(), *gbp = gb.data_ptr();
  int ub = use_batch ? 1 : 0;
  double eps = a[6].to_double();
  void* args[] = {&gp, &xp, &gxp, &wp, &rmp, &rvp, &gwp, &gbp, &N, &C, &S, &ub, &eps};
  launch(device, f, (unsigned)C, kBlock, args);
  return true;
}

}  // namespace tc::cuda
