// sort and topk on CUDA: one thread block per row sorts (key, position) pairs with a bitonic
// network in shared memory, for rows of up to kMaxRow elements. The key is the CPU kernel's
// order-preserving unsigned key (stdlib/cpu/reduction_sort.cpp: NaN above +inf, -0.0 equal to
// 0.0; flipped for descending), ties broken by position, so the order — stable sort, topk's
// "equal values by position" — is the CPU's exactly. topk sorts the whole row and keeps the
// first k. Longer rows (and 0-dim input) stay on the host fallback: a row that does not fit in
// shared memory would need a multi-pass (radix) sort, which eager models have not needed.
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int64_t kMaxRow = 4096;  // pairs of a 64-bit key and a 32-bit position: 48 KiB of shared memory

std::string sort_source(DType dt) {
  std::string T = ctype(dt);
  bool wide = dt == DType::Float64 || dt == DType::Int64;
  std::string key;
  switch (dt) {
    case DType::Float64:
      key = "  double v = x; if (v != v) return ~0ull; if (v == 0) v = 0;\n"
            "  K b = (K)__double_as_longlong(v); return (b >> 63) ? ~b : (b | (1ull << 63));\n";
      break;
    case DType::Float32: case DType::Float16: case DType::BFloat16:
      key = "  float v = ld(x); if (v != v) return ~0u; if (v == 0) v = 0;\n"
            "  K b = __float_as_uint(v); return (b >> 31) ? ~b : (b | 0x80000000u);\n";
      break;
    case DType::Int64: key = "  return (K)x ^ (1ull << 63);\n"; break;
    case DType::Int32: key = "  return (K)x ^ 0x80000000u;\n"; break;
    default: key = "  return (K)x;\n"; break;
  }
  return prelude() + "typedef " + T + " T;\ntypedef " + (wide ? "u64" : "unsigned") + " K;\n" +
         "__device__ __forceinline__ K skey(T x) {\n" + key + "}\n"
         "extern \"C\" __global__ void sort_rows(const T* __restrict__ x, T* __restrict__ y, i64* __restrict__ yi,\n"
         "                                      i64 rows, int n, int P, int k, int descending) {\n"
         "  extern __shared__ __align__(8) unsigned char sm[];\n"
         "  K* sk = (K*)sm;\n  int* si = (int*)(sk + P);\n"
         "  K flip = descending ? ~(K)0 : (K)0;\n"
         "  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {\n"
         "    const T* xr = x + row * n;\n"
         "    for (int i = threadIdx.x; i < P; i += blockDim.x) {\n"
         "      if (i < n) { sk[i] = skey(xr[i]) ^ flip; si[i] = i; } else { sk[i] = ~(K)0; si[i] = 0x7fffffff; }\n"
         "    }\n"
         "    __syncthreads();\n"
         "    for (int s = 2; s <= P; s <<= 1) {\n"
         "      for (int j = s >> 1; j > 0; j >>= 1) {\n"
         "        for (int i = threadIdx.x; i < P; i += blockDim.x) {\n"
         "          int o = i ^ j;\n"
         "          if (o > i) {\n"
         "            K a = sk[i], b = sk[o]; int ia = si[i], ib = si[o];\n"
         "            bool gt = a > b || (a == b && ia > ib);\n"
         "            if (gt == ((i & s) == 0)) { sk[i] = b; sk[o] = a; si[i] = ib; si[o] = ia; }\n"
         "          }\n"
         "        }\n"
         "        __syncthreads();\n"
         "      }\n"
         "    }\n"
         "    for (int i = threadIdx.x; i < k; i += blockDim.x) {\n"
         "      int j = si[i];\n"
         "      y[row * k + i] = xr[j];\n      yi[row * k + i] = (i64)j + 1;\n"
         "    }\n"
         "    __syncthreads();\n"
         "  }\n}\n";
}

}  // namespace

bool sort_topk(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& t = a[0].tensor();
  bool topk = op == Op::topk;
  if (t.dim() == 0) return false;
  int64_t d = wrap_dim(a[topk ? 2 : 1].to_int(), t.dim());
  int64_t n = t.sizes()[d];
  if (n > kMaxRow) return false;  // host fallback (see the file comment)
  int64_t k = topk ? a[1].to_int() : n;
  bool descending = topk ? a[3].to_bool() : a[2].to_bool();
  DType dt = t.dtype();
  Tensor values = empty_from_meta(m[0]), indices = empty_from_meta(m[1]);
  *result = {Value(values), Value(indices)};
  if (values.numel() == 0 || n == 0) return true;
  int device = values.device().index;
  // rows along the last dim: move dim d last (a view), then contiguous
  int64_t last = t.dim() - 1;
  auto swap_last = [&](const Tensor& u) {
    Shape sz = u.sizes(), st = u.strides();
    std::swap(sz[d], sz[last]);
    std::swap(st[d], st[last]);
    return u.as_strided(sz, st, u.offset());
  };
  Tensor in = contiguous_as(d == last ? t : swap_last(t), dt);
  int64_t rows = in.numel() / n;
  bool direct = d == last && values.is_contiguous() && indices.is_contiguous();
  Shape osz = in.sizes();
  osz.back() = k;
  Tensor v = direct ? values : Tensor::empty(osz, dt, values.device());
  Tensor vi = direct ? indices : Tensor::empty(osz, DType::Int64, values.device());
  int P = 1;
  while (P < n) P <<= 1;
  bool wide = dt == DType::Float64 || dt == DType::Int64;
  unsigned smem = (unsigned)(P * ((wide ? 8 : 4) + 4));
  auto f = kernels(device, std::string("sort_rows:") + ctype(dt), [&] { return sort_source(dt); }, {"sort_rows"})[0];
  const void* xp = in.data_ptr();
  void* yp = v.data_ptr();
  void* ip = vi.data_ptr();
  int ni = (int)n, ki = (int)k, desc = descending ? 1 : 0;
  void* args[] = {&xp, &yp, &ip, &rows, &ni, &P, &ki, &desc};
  unsigned block = (unsigned)std::min<int>(512, std::max(32, P / 2));
  launch(device, f, (unsigned)std::min<int64_t>(rows, 1 << 20), block, args, smem);
  if (!direct) {
    copy_strided(d == last ? values : swap_last(values), v);
    copy_strided(d == last ? indices : swap_last(indices), vi);
  }
  return true;
}

}  // namespace tc::cuda
