// batch_norm with batch statistics and its gradient, in one of two forms.
// - Registers (channels of at most 16384 elements, 8192 in double): one block per channel of B
//   threads (32 to 1024), each holding its E <= 16 elements of the channel (j = t + k * B) in
//   registers from the sums to the output: one launch that reads each input once and writes the
//   output once. The block's sums are reduced by warp shuffles and then one warp.
// - Parts (larger channels): a channel's N * S elements are split over P blocks of 256 threads
//   (split_channels: about four blocks per SM in all, at least kChunk elements each); a sums pass
//   writes each block's partial sums, a second launch reads them (in one order: every block gets
//   the same statistics) and writes the output.
// Both sum the shifted values d = x - K (K: the channel's first element, or the running mean when
// the backward uses running statistics), d * d, and for the backward g and g * d, in double; the
// channel's first block updates the running statistics (unbiased variance, momentum) and
// num_batches_tracked, and writes the output with the CPU's scale-and-shift (and, fused with the
// relu that follows, relu's `v < 0 ? 0 : v` as it is stored) or the input gradient (grad_weight
// and grad_bias from the first block). The backward recomputes the statistics from the saved input
// (in the same pass as the gradient's sums). The general multi-launch path (stdlib/cuda/nn.cpp)
// remains for parameters of mixed dtypes or on the host.
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

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

constexpr int64_t kChunk = 2048;  // elements of a channel per block, at least

// How C channels of M elements each are spread: E > 0 is the register form (one block of
// `threads` threads per channel, E elements each: the smallest power-of-two block of at most 1024
// threads that leaves a thread at most 8 elements, or 16 for float32's 16384), else P blocks per
// channel of `threads` threads. On an H200 (DenseNet-121's training step, ncu per kernel) the
// earlier one-block form (two passes over the inputs, every thread adding all warps' sums) took
// 25-33 us for 16x(160..512)x16x16 and 32x32 backwards and 10 us for 16x1024x4x4.
struct Split {
  int64_t P;
  int threads;
  int E;
};
Split split_channels(int device, int64_t C, int64_t M, bool in_double) {
  const int64_t max_e = in_double ? 8 : 16;
  if (M <= 1024 * max_e) {
    int threads = 32;
    while (threads < 1024 && int64_t(threads) * 8 < M) threads *= 2;
    int E = 1;
    while (int64_t(threads) * E < M) E *= 2;
    return {1, threads, E};
  }
  const int64_t sms = int64_t(dev(device).sm_count);
  int64_t want = (4 * sms + C - 1) / C;
  return {std::max<int64_t>(1, std::min<int64_t>(want, M / kChunk)), 256, 0};
}

// The kernels' common part (BN_B threads per block): the element range of block p of NP in a
// channel, the element at index j of channel c of a contiguous [N, C, S] tensor, per-block sums
// of NS doubles, and the shifted sums of one range (sums<G>: v[0] = sum d, v[1] = sum d * d, and
// with G v[2] = sum g, v[3] = sum g * d; d = x - K), four loads in flight per thread.
const char* kChannelSums = R"CUDA(
#define BN_AT(j) (((j) / S) * CS + c * S + (j) % S)
// relu's derivative folded into the backward's output gradient: g * (ym > 0), as mul(g, gt(ym, 0))
// computes it (ym: relu's result, or null: g itself)
__device__ __forceinline__ A masked(A g, const T* __restrict__ ym, I at) {
  return ym ? g * (cvt<A>(ym[at]) > (A)0 ? (A)1 : (A)0) : g;
}
#define BN_WARPS (BN_B / 32)
// The block's sums of NS values in every thread (sm: NS * (BN_WARPS + 1) doubles); xor shuffles
// leave every lane of a warp the same sum, one warp adds the warps' sums.
template <int NS> __device__ void block_sums(double* v, double* sm) {
  for (int k = 0; k < NS; k++)
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  if (BN_WARPS == 1) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    for (int k = 0; k < NS; k++) sm[k * BN_WARPS + warp] = v[k];
  __syncthreads();
  if (warp == 0)
    for (int k = 0; k < NS; k++) {
      double t = lane < BN_WARPS ? sm[k * BN_WARPS + lane] : 0.0;
      for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
      if (lane == 0) sm[NS * BN_WARPS + k] = t;
    }
  __syncthreads();
  for (int k = 0; k < NS; k++) v[k] = sm[NS * BN_WARPS + k];
}
template <bool G> __device__ void sums(const T* __restrict__ x, const T* __restrict__ g, const T* __restrict__ ym, I c, I lo,
                                       I hi, I S, I CS, double K, double* v) {
  for (I j0 = lo + threadIdx.x; j0 < hi; j0 += 4 * BN_B) {
    A xs[4], gs[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      I j = j0 + u * BN_B;
      bool in = j < hi;
      I at = in ? BN_AT(j) : 0;
      xs[u] = in ? cvt<A>(x[at]) : (A)0;
      gs[u] = G && in ? masked(cvt<A>(g[at]), ym, at) : (A)0;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      double d = j0 + u * BN_B < hi ? (double)xs[u] - K : 0.0;
      v[0] += d;
      v[1] += d * d;
      if (G) {
        double gv = (double)gs[u];
        v[2] += gv;
        v[3] += gv * d;
      }
    }
  }
}
// The register form's walk over thread t's elements j = t + u * BN_B (u < BN_E, j < M) of channel
// c: f(u, at) with the element's offset in the [N, C, S] tensor, its (n, s) advanced by the
// block's stride without a division per element.
template <typename F> __device__ __forceinline__ void walk(I c, I M, I S, I CS, F f) {
  if (M == 0) return;
  I n = threadIdx.x / S, s = threadIdx.x % S;
  const I qn = BN_B / S, qs = BN_B % S;
#pragma unroll
  for (int u = 0; u < BN_E; u++) {
    if (threadIdx.x + u * BN_B < M) f(u, n * CS + c * S + s);
    n += qn;
    s += qs;
    if (s >= S) s -= S, n++;
  }
}
// Block p's part of a channel of M elements split in NP parts: [*lo, *hi).
__device__ __forceinline__ void part(I M, I p, I NP, I* lo, I* hi) {
  I chunk = (M + NP - 1) / NP;
  *lo = min(M, p * chunk);
  *hi = min(M, *lo + chunk);
}
// The channel's sums: this block's (NP == 1: the whole channel, phase 2), or its NP partial sums
// added in order (phase 1).
template <int NS, bool G> __device__ void channel_sums(const T* x, const T* g, const T* ym, const double* ws, I c, I NP, I M,
                                                       I S, I CS, double K, int phase, double* v, double* sm) {
  for (int k = 0; k < NS; k++) v[k] = 0;
  if (phase == 1) {
    for (I q = 0; q < NP; q++)
      for (int k = 0; k < NS; k++) v[k] += ws[((size_t)c * NP + q) * NS + k];
    return;
  }
  sums<G>(x, g, ym, c, 0, M, S, CS, K, v);
  block_sums<NS>(v, sm);
}
)CUDA";

std::string types(DType dt, DType pt, const char* I, Split sp) {
  std::string A = dt == DType::Float64 || pt == DType::Float64 ? "double" : "float";
  return std::string("typedef ") + ctype(dt) + " T;\ntypedef " + ctype(pt) + " P;\ntypedef " + A + " A;\ntypedef " +
         I + " I;\n#define BN_B " + std::to_string(sp.threads) + "\n#define BN_E " + std::to_string(sp.E) + "\n";
}

// Launches f over C channels in sp.P parts per channel of sp.threads threads: with P > 1 a sums
// pass (phase 0, partial sums of NS doubles into a workspace) then the pass that uses them
// (phase 1), else one fused launch (phase 2). args: the kernel's arguments up to (not including) ws, P, phase.
void launch_parts(int device, CUfunction f, int64_t C, Split sp, int NS, std::vector<void*> args) {
  const int64_t P = sp.P;
  // (freed stream-ordered when this returns: the next user of its memory runs after these kernels)
  Tensor wst = P > 1 ? Tensor::empty({C * P * NS}, DType::Float64, Device{DeviceType::CUDA, device}) : Tensor();
  void* ws = P > 1 ? wst.data_ptr() : nullptr;
  unsigned p32 = unsigned(P);
  int phase = P > 1 ? 0 : 2;
  args.push_back(&ws);
  args.push_back(&p32);
  args.push_back(&phase);
  launch(device, f, unsigned(C * P), sp.threads, args.data());
  if (P > 1) {
    phase = 1;
    launch(device, f, unsigned(C * P), sp.threads, args.data());
  }
}

}  // namespace

bool batch_norm_train(const Tensor& x, const Stack& a, const Tensor& out, bool relu) {
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
  const Split sp = split_channels(device, C, N * S, x.dtype() == DType::Float64 || pt == DType::Float64);
  auto f = kernels(device, std::string("bntrain4:") + ctype(x.dtype()) + ctype(pt) + I + (relu ? ":relu:" : ":") + std::to_string(sp.threads) + ":" + std::to_string(sp.E), [&] {
    const std::string head =
        "extern \"C\" __global__ void __launch_bounds__(BN_B) bntrain(const T* __restrict__ x, T* __restrict__ y, "
        "P* rm, P* rv, const P* __restrict__ w, const P* __restrict__ b, i64* nbt, i64 N64, i64 C64, i64 S64, "
        "double momentum, double eps, double* ws, unsigned P32, int phase) {\n"
        "  __shared__ double sm[2 * BN_WARPS + 2];\n"
        "  I S = (I)S64, CS = (I)C64 * S, M = (I)N64 * S, NP = P32, c = blockIdx.x / NP, p = blockIdx.x % NP, lo, hi;\n"
        "  part(M, p, NP, &lo, &hi);\n"
        "  double K = M ? (double)cvt<A>(x[c * S]) : 0.0, v[2] = {0, 0};\n";
    // the statistics from v, the running ones updated by the channel's first block, scale and shift
    const std::string stats =
        "  double dm = v[0] / (double)M, mean = K + dm, q = fmax(v[1] - v[0] * dm, 0.0);\n"
        "  if (threadIdx.x == 0 && p == 0) {\n"
        "    if (rm) rm[c] = Cv<P>::f(momentum * mean + (1 - momentum) * (double)cvt<A>(rm[c]));\n"
        "    if (rv) rv[c] = Cv<P>::f(momentum * q / (double)(M - 1) + (1 - momentum) * (double)cvt<A>(rv[c]));\n"
        "    if (nbt && c == 0) nbt[0] += 1;\n"
        "  }\n"
        "  double sc = 1.0 / sqrt(q / (double)M + eps) * (w ? (double)cvt<A>(w[c]) : 1.0);\n"
        "  A scale = (A)sc, shift = (A)((b ? (double)cvt<A>(b[c]) : 0.0) - mean * sc);\n"
        "#define BN_OUT(at, xv) { A o = (xv) * scale + shift; y[at] = Cv<T>::f(BN_RELU && o < (A)0 ? (A)0 : o); }\n";
    const std::string body = sp.E ?
        "  A xs[BN_E];\n"
        "  walk(c, M, S, CS, [&](int u, I at) { xs[u] = cvt<A>(x[at]); });\n"
        "  walk(c, M, S, CS, [&](int u, I) { double d = (double)xs[u] - K; v[0] += d; v[1] += d * d; });\n"
        "  block_sums<2>(v, sm);\n" + stats +
        "  walk(c, M, S, CS, [&](int u, I at) BN_OUT(at, xs[u]));\n"
        "}\n" :
        "  if (phase == 0) {\n"
        "    sums<false>(x, x, nullptr, c, lo, hi, S, CS, K, v);\n"
        "    block_sums<2>(v, sm);\n"
        "    if (threadIdx.x == 0) for (int k = 0; k < 2; k++) ws[((size_t)c * NP + p) * 2 + k] = v[k];\n"
        "    return;\n"
        "  }\n"
        "  channel_sums<2, false>(x, x, nullptr, ws, c, NP, M, S, CS, K, phase, v, sm);\n" + stats +
        "  if (phase == 2) lo = 0, hi = M;\n"
        "  for (I j = lo + threadIdx.x; j < hi; j += BN_B) {\n"
        "    I at = BN_AT(j);\n"
        "    BN_OUT(at, cvt<A>(x[at]));\n"
        "  }\n"
        "}\n";
    return prelude() + types(x.dtype(), pt, I, sp) + "#define BN_RELU " + (relu ? "1" : "0") + "\n" + kChannelSums + head + body;
  }, {"bntrain"})[0];
  const void *xp = x.data_ptr(), *wp = ptr(a[1]), *bp = ptr(a[2]);
  void *yp = out.data_ptr(), *rmp = const_cast<void*>(ptr(a[3])), *rvp = const_cast<void*>(ptr(a[4]));
  void* np = count_here ? nbt->data_ptr() : nullptr;
  double momentum = a[6].to_double(), eps = a[7].to_double();
  launch_parts(device, f, C, sp, 2,
               {&xp, &yp, &rmp, &rvp, &wp, &bp, &np, &N, &C, &S, &momentum, &eps});
  for (int i : {3, 4, 8})
    if (i < (int)a.size() && !a[i].is_none()) Tensor(a[i].tensor()).bump_version();
  return true;
}

bool batch_norm_backward(const Stack& a, const Metas& m, Stack* result, const Tensor& relu_result) {
  const Tensor& x0 = a[1].tensor();
  DType dt = x0.dtype();
  int device = m[0].device.index;
  int64_t N = x0.sizes()[0], C = x0.sizes()[1], S = 1;
  for (int64_t d = 2; d < x0.dim(); d++) S *= x0.sizes()[d];
  DType pt = m[1].dtype;
  if (!params_of(a, {2, 3, 4}, C, device, &pt) || (!a[2].is_none() && pt != m[1].dtype)) return false;
  bool use_batch = a[5].to_bool() || a[3].is_none() || a[4].is_none();
  Tensor g = contiguous_as(a[0].tensor(), dt), x = contiguous_as(x0, dt);
  Tensor ym = relu_result.defined() ? contiguous_as(relu_result, dt) : Tensor();
  Tensor gx = empty_from_meta(m[0]), gw = empty_from_meta(m[1]), gb = empty_from_meta(m[2]);
  *result = {Value(gx), Value(gw), Value(gb)};
  if (C == 0) return true;
  const char* I = x.numel() < (int64_t(1) << 31) ? "unsigned" : "u64";
  const Split sp = split_channels(device, C, N * S, dt == DType::Float64 || pt == DType::Float64);
  auto f = kernels(device, std::string("bnbackward5:") + ctype(dt) + ctype(pt) + ctype(m[1].dtype) + I + ":" + std::to_string(sp.threads) + ":" + std::to_string(sp.E), [&] {
    const std::string head =
        "extern \"C\" __global__ void __launch_bounds__(BN_B) bnbackward(const T* __restrict__ g, "
        "const T* __restrict__ ym, const T* __restrict__ x, T* __restrict__ gx, const P* __restrict__ w, const P* __restrict__ rm, "
        "const P* __restrict__ rv, D* gw, D* gb, i64 N64, i64 C64, i64 S64, int use_batch, double eps, double* ws, "
        "unsigned P32, int phase) {\n"
        "  __shared__ double sm[4 * BN_WARPS + 4];\n"
        "  I S = (I)S64, CS = (I)C64 * S, M = (I)N64 * S, NP = P32, c = blockIdx.x / NP, p = blockIdx.x % NP, lo, hi;\n"
        "  part(M, p, NP, &lo, &hi);\n"
        "  double K = !use_batch ? (double)cvt<A>(rm[c]) : M ? (double)cvt<A>(x[c * S]) : 0.0;\n"
        "  double v[4] = {0, 0, 0, 0};\n";
    // the statistics from v, grad_weight and grad_bias from the channel's first block, and the
    // input gradient of (g, x) as BN_GX
    const std::string stats =
        "  double mean, invstd, sg = v[2], sgx;\n"
        "  if (use_batch) {\n"
        "    double dm = v[0] / (double)M;\n"
        "    mean = K + dm;\n"
        "    invstd = 1.0 / sqrt(fmax(v[1] - v[0] * dm, 0.0) / (double)M + eps);\n"
        "    sgx = v[3] - dm * sg;\n"
        "  } else {\n"
        "    mean = K;\n"
        "    invstd = 1.0 / sqrt((double)cvt<A>(rv[c]) + eps);\n"
        "    sgx = v[3];\n"
        "  }\n"
        "  if (threadIdx.x == 0 && p == 0) { gw[c] = Cv<D>::f(sgx * invstd); gb[c] = Cv<D>::f(sg); }\n"
        "  double k = (w ? (double)cvt<A>(w[c]) : 1.0) * invstd;\n"
        "  A kk = (A)k, mu = (A)mean, mg = use_batch ? (A)(sg / (double)M) : (A)0, "
        "proj = use_batch ? (A)(invstd * invstd * sgx / (double)M) : (A)0;\n"
        "#define BN_GX(gv, xv) Cv<T>::f(use_batch ? kk * ((gv) - mg - ((xv) - mu) * proj) : (gv) * kk)\n";
    const std::string body = sp.E ?
        "  A xs[BN_E], gs[BN_E];\n"
        "  walk(c, M, S, CS, [&](int u, I at) { xs[u] = cvt<A>(x[at]); gs[u] = masked(cvt<A>(g[at]), ym, at); });\n"
        "  walk(c, M, S, CS, [&](int u, I) {\n"
        "    double d = (double)xs[u] - K, gv = (double)gs[u];\n"
        "    v[0] += d; v[1] += d * d; v[2] += gv; v[3] += gv * d;\n"
        "  });\n"
        "  block_sums<4>(v, sm);\n" + stats +
        "  walk(c, M, S, CS, [&](int u, I at) { gx[at] = BN_GX(gs[u], xs[u]); });\n"
        "}\n" :
        "  if (phase == 0) {\n"
        "    sums<true>(x, g, ym, c, lo, hi, S, CS, K, v);\n"
        "    block_sums<4>(v, sm);\n"
        "    if (threadIdx.x == 0) for (int k = 0; k < 4; k++) ws[((size_t)c * NP + p) * 4 + k] = v[k];\n"
        "    return;\n"
        "  }\n"
        "  channel_sums<4, true>(x, g, ym, ws, c, NP, M, S, CS, K, phase, v, sm);\n" + stats +
        "  if (phase == 2) lo = 0, hi = M;\n"
        "  for (I j = lo + threadIdx.x; j < hi; j += BN_B) {\n"
        "    I at = BN_AT(j);\n"
        "    gx[at] = BN_GX(masked(cvt<A>(g[at]), ym, at), cvt<A>(x[at]));\n"
        "  }\n"
        "}\n";
    return prelude() + types(dt, pt, I, sp) + "typedef " + ctype(m[1].dtype) + " D;\n" + kChannelSums + head + body;
  }, {"bnbackward"})[0];
  const void *gp = g.data_ptr(), *yp = ym.defined() ? ym.data_ptr() : nullptr, *xp = x.data_ptr(), *wp = ptr(a[2]), *rmp = ptr(a[3]), *rvp = ptr(a[4]);
  void *gxp = gx.data_ptr(), *gwp = gw.data_ptr(), *gbp = gb.data_ptr();
  int ub = use_batch ? 1 : 0;
  double eps = a[6].to_double();
  launch_parts(device, f, C, sp, 4,
               {&gp, &yp, &xp, &gxp, &wp, &rmp, &rvp, &gwp, &gbp, &N, &C, &S, &ub, &eps});
  return true;
}

}  // namespace tc::cuda
