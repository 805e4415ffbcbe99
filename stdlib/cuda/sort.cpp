// sort and topk on CUDA. Every element becomes the CPU kernel's order-preserving unsigned key
// (stdlib/cpu/reduction_sort.cpp: NaN above +inf, -0.0 equal to 0.0; flipped for descending)
// with its position as the tie-break, so the order — stable sort, topk's "equal values by
// position" — is the CPU's exactly. topk sorts the whole row and keeps the first k.
//   Rows of up to kMaxRow elements: one thread block per row, a bitonic network over (key,
//   position) pairs in shared memory.
//   Longer rows: a least-significant-digit radix sort of all rows at once, 8 bits per pass (one
//   pass for uint8/bool keys). Each pass histograms tiles of kTile elements (a tile never spans
//   two rows), scans the histograms in (row, digit, tile) order — which also keeps the rows
//   apart — and scatters each tile stably: ranks within a warp from __match_any_sync, across
//   warps from per-warp digit counts, into shared memory sorted by digit, from where runs of one
//   digit are written to consecutive addresses. Equal keys keep their position order.
// A 0-dim input is one row of one element.
#include "cuda/scan.h"

namespace tc::cuda {
namespace {

constexpr int64_t kMaxRow = 4096;  // pairs of a 64-bit key and a 32-bit position: 48 KiB of shared memory
constexpr int64_t kTile = 1024;    // elements per block and pass of the radix sort (4 rounds of 256)

// The radix sort's kernels (K, T and skey defined by the caller): keys and positions, tile
// histograms, the stable scatter of one pass, and the gather of the first k of every row.
const char* radix_src() {
  return R"CUDA(
extern "C" __global__ void rinit(const T* __restrict__ x, K* __restrict__ k, int* __restrict__ v, i64 total, i64 n, K flip) {
  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < total; i += (i64)gridDim.x * 256) { k[i] = skey(x[i]) ^ flip; v[i] = (int)(i % n); }
}
extern "C" __global__ void __launch_bounds__(256) rhist(const K* __restrict__ k, i64 n, int tpr, int shift, i64* __restrict__ hist) {
  __shared__ unsigned h[256];
  h[threadIdx.x] = 0;
  __syncthreads();
  i64 row = blockIdx.x / tpr, t = blockIdx.x % tpr, b = t * 1024, e = b + 1024 < n ? b + 1024 : n;
  const K* kr = k + row * n;
  int lane = threadIdx.x & 31;
  for (i64 s = b; s < e; s += 256) {  // one shared atomic per digit and warp
    i64 i = s + threadIdx.x;
    unsigned d = i < e ? (unsigned)(kr[i] >> shift) & 255u : 256u;
    unsigned peers = __match_any_sync(0xffffffffu, d);
    if (d < 256u && lane == __ffs(peers) - 1) atomicAdd(&h[d], (unsigned)__popc(peers));
  }
  __syncthreads();
  hist[(row * 256 + threadIdx.x) * tpr + t] = h[threadIdx.x];
}
extern "C" __global__ void __launch_bounds__(256) rscatter(const K* __restrict__ kin, const int* __restrict__ vin, K* __restrict__ kout,
                                                           int* __restrict__ vout, i64 n, int tpr, int shift, const i64* __restrict__ offs,
                                                           i64 entries, i64 total) {
  __shared__ i64 gbase[256];   // where digit d of this tile starts in the output
  __shared__ int lstart[256];  // where it starts in the tile sorted by digit
  __shared__ int wc[8][256];   // per warp and digit: count, then the exclusive prefix over warps
  __shared__ K sk[1024];
  __shared__ int sv[1024];
  i64 row = blockIdx.x / tpr, t = blockIdx.x % tpr, b = t * 1024, e = b + 1024 < n ? b + 1024 : n;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  i64 h = (row * 256 + threadIdx.x) * tpr + t, tot;
  gbase[threadIdx.x] = offs[h];
  i64 count = (h + 1 < entries ? offs[h + 1] : total) - offs[h];  // the scan is exclusive
  int run = (int)block_exclusive(count, &tot);  // thread d: the local start of digit d
  lstart[threadIdx.x] = run;
  // rank every element of the tile stably by digit into shared memory
  for (i64 s = b; s < e; s += 256) {
    for (int q = 0; q < 8; q++) wc[q][threadIdx.x] = 0;
    __syncthreads();
    i64 i = s + threadIdx.x;
    bool ok = i < e;
    K key = ok ? kin[row * n + i] : (K)0;
    int val = ok ? vin[row * n + i] : 0;
    unsigned d = ok ? (unsigned)(key >> shift) & 255u : 256u;
    unsigned peers = __match_any_sync(0xffffffffu, d);
    int rank = __popc(peers & ((1u << lane) - 1u));
    if (ok && rank == 0) wc[w][d] = __popc(peers);
    __syncthreads();
    int c = 0;
    for (int q = 0; q < 8; q++) { int v = wc[q][threadIdx.x]; wc[q][threadIdx.x] = run + c; c += v; }
    __syncthreads();
    if (ok) { int p = wc[w][d] + rank; sk[p] = key; sv[p] = val; }
    run += c;
    __syncthreads();
  }
  // write the digit-sorted tile: runs of one digit go to consecutive addresses
  for (int i = threadIdx.x; i < (int)(e - b); i += 256) {
    K key = sk[i];
    unsigned d = (unsigned)(key >> shift) & 255u;
    i64 p = gbase[d] + (i - lstart[d]);
    kout[p] = key; vout[p] = sv[i];
  }
}
extern "C" __global__ void rgather(const T* __restrict__ x, const int* __restrict__ v, T* __restrict__ y, i64* __restrict__ yi,
                                   i64 total, i64 n, i64 k) {
  for (i64 j = (i64)blockIdx.x * 256 + threadIdx.x; j < total; j += (i64)gridDim.x * 256) {
    i64 r = j / k, p = v[r * n + j % k];
    y[j] = x[r * n + p]; yi[j] = p + 1;
  }
}
)CUDA";
}

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
  return prelude() + block_exclusive_src() + "typedef " + T + " T;\ntypedef " + (wide ? "u64" : "unsigned") + " K;\n" +
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
         "  }\n}\n" + radix_src();
}

// Sorts the `rows` contiguous rows of length n of `in` (radix, see the file comment) and writes
// the first k of every row to v (values) and vi (1-based positions), both contiguous rows x k.
void radix_sort_rows(const Tensor& in, int64_t rows, int64_t n, int64_t k, bool descending, const Tensor& v,
                     const Tensor& vi, const std::vector<CUfunction>& f) {
  TC_CHECK(n <= INT32_MAX, NotImplementedError, "sort on CUDA: rows longer than %d elements are not supported", INT32_MAX);
  DType dt = in.dtype();
  Device d = in.device();
  int device = d.index;
  bool wide = dt == DType::Float64 || dt == DType::Int64;
  int bits = dt == DType::UInt8 || dt == DType::Bool ? 8 : wide ? 64 : 32;
  DType kt = wide ? DType::Int64 : DType::Int32;  // storage for the unsigned keys
  int64_t total = rows * n;
  Tensor keys[2] = {Tensor::empty({total}, kt, d), Tensor::empty({total}, kt, d)};
  Tensor pos[2] = {Tensor::empty({total}, DType::Int32, d), Tensor::empty({total}, DType::Int32, d)};
  int tpr = (int)((n + kTile - 1) / kTile);
  Tensor hist = Tensor::empty({rows * 256 * tpr}, DType::Int64, d);
  unsigned grid = grid_for(total, device);
  const void* xp = in.data_ptr();
  void *k0 = keys[0].data_ptr(), *p0 = pos[0].data_ptr(), *hp = hist.data_ptr();
  uint64_t flip64 = descending ? ~0ull : 0;
  uint32_t flip32 = descending ? ~0u : 0;
  void* flip = wide ? (void*)&flip64 : (void*)&flip32;
  void* a0[] = {&xp, &k0, &p0, &total, &n, flip};
  launch(device, f[1], grid, 256, a0);
  unsigned blocks = (unsigned)(rows * tpr);
  int cur = 0;
  for (int shift = 0; shift < bits; shift += 8, cur ^= 1) {
    void *ki = keys[cur].data_ptr(), *pi = pos[cur].data_ptr(), *ko = keys[cur ^ 1].data_ptr(), *po = pos[cur ^ 1].data_ptr();
    void* a1[] = {&ki, &n, &tpr, &shift, &hp};
    launch(device, f[2], blocks, 256, a1);
    exclusive_scan(hp, hist.numel(), device);
    int64_t entries = hist.numel();
    void* a2[] = {&ki, &pi, &ko, &po, &n, &tpr, &shift, &hp, &entries, &total};
    launch(device, f[3], blocks, 256, a2);
  }
  void *pp = pos[cur].data_ptr(), *yp = v.data_ptr(), *ip = vi.data_ptr();
  int64_t outs = rows * k;
  void* a3[] = {&xp, &pp, &yp, &ip, &outs, &n, &k};
  if (outs) launch(device, f[4], grid_for(outs, device), 256, a3);
}

}  // namespace

bool sort_topk(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& t = a[0].tensor();
  bool topk = op == Op::topk;
  Tensor values = empty_from_meta(m[0]), indices = empty_from_meta(m[1]);
  *result = {Value(values), Value(indices)};
  if (t.dim() == 0) {  // one row of one element (topk with k = 0 too, as on the CPU)
    copy_strided(values, t);
    fill(indices, 0, 1, true);
    return true;
  }
  int64_t d = wrap_dim(a[topk ? 2 : 1].to_int(), t.dim());
  int64_t n = t.sizes()[d];
  int64_t k = topk ? a[1].to_int() : n;
  bool descending = topk ? a[3].to_bool() : a[2].to_bool();
  DType dt = t.dtype();
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
  auto f = kernels(device, std::string("sort_rows:") + ctype(dt), [&] { return sort_source(dt); },
                   {"sort_rows", "rinit", "rhist", "rscatter", "rgather"});
  if (n > kMaxRow) {
    radix_sort_rows(in, rows, n, k, descending, v, vi, f);
  } else {
    int P = 1;
    while (P < n) P <<= 1;
    bool wide = dt == DType::Float64 || dt == DType::Int64;
    unsigned smem = (unsigned)(P * ((wide ? 8 : 4) + 4));
    const void* xp = in.data_ptr();
    void* yp = v.data_ptr();
    void* ip = vi.data_ptr();
    int ni = (int)n, ki = (int)k, desc = descending ? 1 : 0;
    void* args[] = {&xp, &yp, &ip, &rows, &ni, &P, &ki, &desc};
    unsigned block = (unsigned)std::min<int>(512, std::max(32, P / 2));
    launch(device, f[0], (unsigned)std::min<int64_t>(rows, 1 << 20), block, args, smem);
  }
  if (!direct) {
    copy_strided(d == last ? values : swap_last(values), v);
    copy_strided(d == last ? indices : swap_last(indices), vi);
  }
  return true;
}

}  // namespace tc::cuda
