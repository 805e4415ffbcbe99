// Fused scaled-dot-product attention for float32 (flash-attention style): one launch reads q, k
// and v once per tile and never materializes the [L, S] scores. Two kernels: on tensor cores
// (flash_mma_source: sm_80 and later, head dims a multiple of 8 up to 64, 3xTF32, float32's
// accuracy class; GPT-2's heads) and on CUDA cores (flash_source: any head dim that is a multiple
// of 4 up to 128, plain float32 FMA). The CUDA-core kernel: each block takes 64 queries of one
// (batch, head) and walks the keys in tiles of 64: scores in registers (4 x 4 per thread), an
// online softmax per row (running max and sum, combined across the 16 threads of a row with warp
// shuffles), probabilities through shared memory into the [64, E] output accumulator; shared
// memory is read 16 bytes at a time (rows padded to keep them aligned and free of bank
// conflicts). Causal masks skip the key tiles past the block's last query. q, k, v and out may be
// strided views (head views of a projection read in place, out written in a heads-merged layout).
#include <cmath>
#include <mutex>
#include <set>

#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kBQ = 64, kBK = 64, kBKMma = 32, kThreads = 256, kMaxE = 128;

std::string flash_source(int64_t e) {
  return "#define E " + std::to_string(e) + "\n" + R"(
#define EP (E + 4)
#define BQ 64
#define BK 64
#define PS (BK + 4)
#define G ((E + 63) / 64)
#define NEG_INF (-__int_as_float(0x7f800000))
typedef long long i64;
// key and value tiles: rows k0 .. k0 + BK - 1 into shared memory (rows `kp` and `vp` floats apart), zeros past S
__device__ __forceinline__ void load_kv(const float* __restrict__ k, const float* __restrict__ v, float* Ks, float* Vs,
                                        int kp, int vp, i64 k0, i64 S, i64 ks2, i64 vs2) {
  for (int i = threadIdx.x; i < BK * E; i += blockDim.x) {
    const int r = i / E, d = i % E;
    const i64 key = k0 + r;
    const bool in = key < S;
    Ks[r * kp + d] = in ? k[key * ks2 + d] : 0.f;
    Vs[r * vp + d] = in ? v[key * vs2 + d] : 0.f;
  }
}
extern "C" __global__ void __launch_bounds__(256) flash_fwd(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ o,
    i64 L, i64 S, i64 nb1, i64 qs0, i64 qs1, i64 qs2, i64 ks0, i64 ks1, i64 ks2, i64 vs0, i64 vs1, i64 vs2,
    i64 os0, i64 os1, i64 os2, float scale, int causal, int vec /* flash_mma's; unused */) {
  extern __shared__ float4 sm4[];
  float* sm = (float*)sm4;
  float* Qs = sm;            // BQ x EP (rows 16-byte aligned: E % 4 == 0)
  float* Ks = Qs + BQ * EP;  // BK x EP
  float* Vs = Ks + BK * EP;  // BK x E
  float* Ps = Vs + BK * E;   // BQ x PS
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const i64 z = blockIdx.x, b0 = z / nb1, b1 = z % nb1;
  // the last query tiles first: under a causal mask they walk the most key tiles
  const i64 q0 = (i64)(gridDim.y - 1 - blockIdx.y) * BQ;
  q += b0 * qs0 + b1 * qs1;
  k += b0 * ks0 + b1 * ks1;
  v += b0 * vs0 + b1 * vs1;
  o += b0 * os0 + b1 * os1;
  for (int i = tid; i < BQ * E; i += 256) {
    const int r = i / E, d = i % E;
    const i64 row = q0 + r;
    Qs[r * EP + d] = row < L ? q[row * qs2 + d] : 0.f;
  }
  // scores: rows ty*4 + r, keys tx + 16*c; output: rows ty*4 + r, columns g*64 + tx*4 + (0..3)
  float m[4], l[4], acc[4][G][4];
#pragma unroll
  for (int r = 0; r < 4; r++) {
    m[r] = NEG_INF;
    l[r] = 0.f;
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc[r][g][j] = 0.f;
  }
  i64 kend = S;
  if (causal && q0 + BQ < kend) kend = q0 + BQ;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    __syncthreads();
    load_kv(k, v, Ks, Vs, EP, E, k0, S, ks2, vs2);
    __syncthreads();
    float s[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++) s[r][c] = 0.f;
#pragma unroll 4
    for (int d = 0; d < E; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int r = 0; r < 4; r++) qv[r] = *(const float4*)&Qs[(ty * 4 + r) * EP + d];
#pragma unroll
      for (int c = 0; c < 4; c++) kv[c] = *(const float4*)&Ks[(tx + 16 * c) * EP + d];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          s[r][c] = fmaf(qv[r].x, kv[c].x, s[r][c]);
          s[r][c] = fmaf(qv[r].y, kv[c].y, s[r][c]);
          s[r][c] = fmaf(qv[r].z, kv[c].z, s[r][c]);
          s[r][c] = fmaf(qv[r].w, kv[c].w, s[r][c]);
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const i64 row = q0 + ty * 4 + r;
      float mx = NEG_INF;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const i64 key = k0 + tx + 16 * c;
        float x = s[r][c] * scale;
        if (key >= S || (causal && key > row)) x = NEG_INF;
        s[r][c] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float mnew = fmaxf(m[r], mx);
      const bool none = mnew == NEG_INF;
      const float alpha = none ? 1.f : expf(m[r] - mnew);
      float rs = 0.f;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const float p = none ? 0.f : expf(s[r][c] - mnew);
        Ps[(ty * 4 + r) * PS + tx + 16 * c] = p;
        rs += p;
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) rs += __shfl_xor_sync(0xffffffffu, rs, off);
      l[r] = l[r] * alpha + rs;
      m[r] = mnew;
#pragma unroll
      for (int g = 0; g < G; g++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[r][g][j] *= alpha;
    }
    __syncthreads();
#pragma unroll 2
    for (int key = 0; key < BK; key += 4) {
      float4 pv[4];
#pragma unroll
      for (int r = 0; r < 4; r++) pv[r] = *(const float4*)&Ps[(ty * 4 + r) * PS + key];
#pragma unroll
      for (int g = 0; g < G; g++) {
        const int c = g * 64 + tx * 4;
        if (c < E) {
#pragma unroll
          for (int kk = 0; kk < 4; kk++) {
            const float4 vv = *(const float4*)&Vs[(key + kk) * E + c];
#pragma unroll
            for (int r = 0; r < 4; r++) {
              const float p = kk == 0 ? pv[r].x : kk == 1 ? pv[r].y : kk == 2 ? pv[r].z : pv[r].w;
              acc[r][g][0] = fmaf(p, vv.x, acc[r][g][0]);
              acc[r][g][1] = fmaf(p, vv.y, acc[r][g][1]);
              acc[r][g][2] = fmaf(p, vv.z, acc[r][g][2]);
              acc[r][g][3] = fmaf(p, vv.w, acc[r][g][3]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; r++) {
    const i64 row = q0 + ty * 4 + r;
    if (row >= L) continue;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int g = 0; g < G; g++) {
      const int c = g * 64 + tx * 4;
      if (c < E) {
#pragma unroll
        for (int j = 0; j < 4; j++) o[row * os2 + c + j] = acc[r][g][j] * inv;
      }
    }
  }
}
)";
}

// The same attention on tensor cores (sm_80 and later, head dims a multiple of 8 up to 64): 4
// warps of 16 queries each, key tiles of 32; scores and the output accumulated by mma.sync
// m16n8k8 TF32 in 3xTF32 form: each operand split into a TF32 high part and a TF32 remainder,
// three products summed in float32 (a_lo b_hi + a_hi b_lo + a_hi b_hi): float32's accuracy class,
// as PyTorch's float32 attention (CUTLASS's OpMultiplyAddFastF32). The splits are integer
// rounding (add half a TF32 unit, clear the low 13 bits: cvt.rna's result, at full ALU rate);
// each key and value is split once per block, into shared memory (hi and lo planes), the
// queries once, into registers (pre-scaled by scale * log2(e): exponentials in base 2). The
// probabilities never leave registers: the score fragment's columns 2t and 2t + 1 serve as the
// A fragment's columns t and t + 4 of P.V when the value rows are read in that order too. Each
// thread keeps its two rows' running max and partial sums. The products are issued so that
// independent accumulators follow each other (all key blocks' scores for one slice of the head
// dim, then all of the output's column blocks for one key block): mma.sync's latency is hidden
// within the warp. Under a causal mask, 8-key blocks past a warp's last query are not computed
// (the block count is a template argument) and masks are applied only on tiles that need them.
// The next tile's keys and values are loaded into registers while this one is computed. GPT-2's
// heads on an H100: 31 us (35 loading each tile after the one before was computed, 43 with one
// chain of dependent products per key block and 64-key tiles; a cp.async copy of the next tile
// into a staging buffer gained nothing).
std::string flash_mma_source(int64_t e) {
  return "#define E " + std::to_string(e) + "\n" + R"(
#define BQ 64
#define BK 32
#define KP (E + 4)
#define NEG_INF (-__int_as_float(0x7f800000))
typedef long long i64;
typedef unsigned u32;
__device__ __forceinline__ u32 tf32_round(u32 b) { return (b + 0x1000u) & 0xffffe000u; }
__device__ __forceinline__ void split(float x, u32& hi, u32& lo) {
  hi = tf32_round(__float_as_uint(x));
  lo = tf32_round(__float_as_uint(x - __uint_as_float(hi)));
}
__device__ __forceinline__ void split4(float4 a, u32* hi, u32* lo) {
  uint4 h, l;
  split(a.x, h.x, l.x);
  split(a.y, h.y, l.y);
  split(a.z, h.z, l.z);
  split(a.w, h.w, l.w);
  *(uint4*)hi = h;
  *(uint4*)lo = l;
}
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Keys and values 16 bytes at a time where every row is aligned (vec): each thread's share of
// rows k0 .. k0 + BK - 1 is fetched into registers (zeros past S) while the tile before is
// computed, then split into the hi and lo planes (rows KP apart). Otherwise one tile at a time,
// element by element.
#define NU ((BK * E / 4 + 127) / 128)  // float4s of k (and of v) per thread and tile
__device__ __forceinline__ void fetch(const float* __restrict__ k, const float* __restrict__ v, float4 (&a)[NU],
                                      float4 (&b)[NU], i64 k0, i64 S, i64 ks2, i64 vs2) {
#pragma unroll
  for (int u = 0; u < NU; u++) {
    const int i = threadIdx.x + u * 128, r = i / (E / 4), d = (i % (E / 4)) * 4;
    const i64 key = k0 + r;
    a[u] = b[u] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < BK * E / 4 && key < S) {
      a[u] = *(const float4*)&k[key * ks2 + d];
      b[u] = *(const float4*)&v[key * vs2 + d];
    }
  }
}
__device__ __forceinline__ void put_split(const float4 (&a)[NU], const float4 (&b)[NU], u32* Kh, u32* Kl, u32* Vh,
                                          u32* Vl) {
#pragma unroll
  for (int u = 0; u < NU; u++) {
    const int i = threadIdx.x + u * 128, r = i / (E / 4), d = (i % (E / 4)) * 4;
    if (i < BK * E / 4) {
      split4(a[u], &Kh[r * KP + d], &Kl[r * KP + d]);
      split4(b[u], &Vh[r * KP + d], &Vl[r * KP + d]);
    }
  }
}
__device__ __forceinline__ void load_split(const float* __restrict__ k, const float* __restrict__ v, u32* Kh, u32* Kl,
                                           u32* Vh, u32* Vl, i64 k0, i64 S, i64 ks2, i64 vs2) {
  for (int i = threadIdx.x; i < BK * E; i += 128) {
    const int r = i / E, d = i % E;
    const i64 key = k0 + r;
    const bool in = key < S;
    split(in ? k[key * ks2 + d] : 0.f, Kh[r * KP + d], Kl[r * KP + d]);
    split(in ? v[key * vs2 + d] : 0.f, Vh[r * KP + d], Vl[r * KP + d]);
  }
}
// One key tile for this warp's 16 queries (this thread's rows ra and rb): key blocks 0 .. JN - 1
// of the tile; `mask`: keys past S or (causal) past a row are masked.
template <int JN>
__device__ __forceinline__ void tile(float (&acc)[E / 8][4], float& m0, float& m1, float& l0, float& l1,
                                     const u32 (&qh)[E / 8][4], const u32 (&ql)[E / 8][4], const u32* Kh, const u32* Kl,
                                     const u32* Vh, const u32* Vl, i64 k0, i64 S, i64 ra, i64 rb, bool mask, int causal,
                                     int g, int t) {
  float s[JN][4];
#pragma unroll
  for (int j = 0; j < JN; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int c = 0; c < E / 8; c++) {
    u32 kh[JN][2], kl[JN][2];
#pragma unroll
    for (int j = 0; j < JN; j++) {
      const int at = (j * 8 + g) * KP + c * 8 + t;
      kh[j][0] = Kh[at];
      kh[j][1] = Kh[at + 4];
      kl[j][0] = Kl[at];
      kl[j][1] = Kl[at + 4];
    }
    // 3xTF32, small terms first
#pragma unroll
    for (int j = 0; j < JN; j++) mma(s[j], ql[c], kh[j][0], kh[j][1]);
#pragma unroll
    for (int j = 0; j < JN; j++) mma(s[j], qh[c], kl[j][0], kl[j][1]);
#pragma unroll
    for (int j = 0; j < JN; j++) mma(s[j], qh[c], kh[j][0], kh[j][1]);
  }
  float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
  for (int j = 0; j < JN; j++)
#pragma unroll
    for (int c = 0; c < 2; c++) {
      if (mask) {
        const i64 key = k0 + j * 8 + 2 * t + c;
        if (key >= S || (causal && key > ra)) s[j][c] = NEG_INF;
        if (key >= S || (causal && key > rb)) s[j][2 + c] = NEG_INF;
      }
      x0 = fmaxf(x0, s[j][c]);
      x1 = fmaxf(x1, s[j][2 + c]);
    }
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
  const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
  const float a0 = n0 == NEG_INF ? 1.f : exp2f(m0 - n0), a1 = n1 == NEG_INF ? 1.f : exp2f(m1 - n1);
  m0 = n0;
  m1 = n1;
  l0 *= a0;
  l1 *= a1;
#pragma unroll
  for (int c = 0; c < E / 8; c++) {
    acc[c][0] *= a0;
    acc[c][1] *= a0;
    acc[c][2] *= a1;
    acc[c][3] *= a1;
  }
#pragma unroll
  for (int j = 0; j < JN; j++) {
    // P's A fragment for keys j*8 ..: columns t and t + 4 are keys 2t and 2t + 1
    const float p0 = n0 == NEG_INF ? 0.f : exp2f(s[j][0] - n0), p1 = n0 == NEG_INF ? 0.f : exp2f(s[j][1] - n0);
    const float p2 = n1 == NEG_INF ? 0.f : exp2f(s[j][2] - n1), p3 = n1 == NEG_INF ? 0.f : exp2f(s[j][3] - n1);
    l0 += p0 + p1;
    l1 += p2 + p3;
    u32 ph[4], pl[4];
    split(p0, ph[0], pl[0]);
    split(p2, ph[1], pl[1]);
    split(p1, ph[2], pl[2]);
    split(p3, ph[3], pl[3]);
    const int r0 = (j * 8 + 2 * t) * KP + g, r1 = r0 + KP;
    u32 vh0[E / 8], vh1[E / 8], vl0[E / 8], vl1[E / 8];
#pragma unroll
    for (int c = 0; c < E / 8; c++) {
      vh0[c] = Vh[r0 + c * 8];
      vh1[c] = Vh[r1 + c * 8];
      vl0[c] = Vl[r0 + c * 8];
      vl1[c] = Vl[r1 + c * 8];
    }
#pragma unroll
    for (int c = 0; c < E / 8; c++) mma(acc[c], pl, vh0[c], vh1[c]);
#pragma unroll
    for (int c = 0; c < E / 8; c++) mma(acc[c], ph, vl0[c], vl1[c]);
#pragma unroll
    for (int c = 0; c < E / 8; c++) mma(acc[c], ph, vh0[c], vh1[c]);
  }
}
extern "C" __global__ void __launch_bounds__(128) flash_mma(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ o,
    i64 L, i64 S, i64 nb1, i64 qs0, i64 qs1, i64 qs2, i64 ks0, i64 ks1, i64 ks2, i64 vs0, i64 vs1, i64 vs2,
    i64 os0, i64 os1, i64 os2, float scale, int causal, int vec) {
  extern __shared__ float4 sm4[];
  u32* Kh = (u32*)sm4;  // BK x KP each
  u32* Kl = Kh + BK * KP;
  u32* Vh = Kl + BK * KP;
  u32* Vl = Vh + BK * KP;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const i64 z = blockIdx.x, b0 = z / nb1, b1 = z % nb1;
  // the last query tiles first: under a causal mask they walk the most key tiles
  const i64 q0 = (i64)(gridDim.y - 1 - blockIdx.y) * BQ;
  q += b0 * qs0 + b1 * qs1;
  k += b0 * ks0 + b1 * ks1;
  v += b0 * vs0 + b1 * vs1;
  o += b0 * os0 + b1 * os1;
  const i64 ra = q0 + w * 16 + g, rb = ra + 8, rfirst = q0 + w * 16, rlast = rfirst + 15;
  float4 ka[NU], va[NU];  // the next tile's keys and values (vec)
  if (vec) fetch(k, v, ka, va, 0, S, ks2, vs2);
  // this warp's A fragments of q (rows ra and rb, columns c + t and c + t + 4), split
  u32 qh[E / 8][4], ql[E / 8][4];
  {
    const float qscale = scale * 1.4426950408889634f;
#pragma unroll
    for (int c = 0; c < E / 8; c++) {
      const float x0 = ra < L ? q[ra * qs2 + c * 8 + t] : 0.f, x1 = rb < L ? q[rb * qs2 + c * 8 + t] : 0.f;
      const float x2 = ra < L ? q[ra * qs2 + c * 8 + t + 4] : 0.f, x3 = rb < L ? q[rb * qs2 + c * 8 + t + 4] : 0.f;
      split(x0 * qscale, qh[c][0], ql[c][0]);
      split(x1 * qscale, qh[c][1], ql[c][1]);
      split(x2 * qscale, qh[c][2], ql[c][2]);
      split(x3 * qscale, qh[c][3], ql[c][3]);
    }
  }
  float acc[E / 8][4];
#pragma unroll
  for (int j = 0; j < E / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;  // rows ra and rb: max and this thread's part of the sum
  i64 kend = S;
  if (causal && q0 + BQ < kend) kend = q0 + BQ;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    __syncthreads();
    if (vec)
      put_split(ka, va, Kh, Kl, Vh, Vl);
    else
      load_split(k, v, Kh, Kl, Vh, Vl, k0, S, ks2, vs2);
    __syncthreads();
    if (vec && k0 + BK < kend) fetch(k, v, ka, va, k0 + BK, S, ks2, vs2);
    int jn = BK / 8;  // the key blocks of 8 this warp needs: under a causal mask none past its last query
    if (causal) {
      const i64 d = rlast - k0;
      jn = d < 0 ? 0 : (int)(d / 8 + 1 < BK / 8 ? d / 8 + 1 : BK / 8);
    }
    const bool mask = k0 + BK > S || (causal && k0 + BK - 1 > rfirst);
    if (jn > 2)
      tile<4>(acc, m0, m1, l0, l1, qh, ql, Kh, Kl, Vh, Vl, k0, S, ra, rb, mask, causal, g, t);
    else if (jn > 0)
      tile<2>(acc, m0, m1, l0, l1, qh, ql, Kh, Kl, Vh, Vl, k0, S, ra, rb, mask, causal, g, t);
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
  for (int j = 0; j < E / 8; j++) {
    const int c = j * 8 + 2 * t;
    if (ra < L) {
      o[ra * os2 + c] = acc[j][0] * i0;
      o[ra * os2 + c + 1] = acc[j][1] * i0;
    }
    if (rb < L) {
      o[rb * os2 + c] = acc[j][2] * i1;
      o[rb * os2 + c + 1] = acc[j][3] * i1;
    }
  }
}
)";
}

// The batch dims of t (dims before the last two) as (size of dim 1 of the batch, strides of the
// two batch dims): 3-D tensors have one batch dim.
bool batch_layout(const Tensor& t, int64_t* nb1, int64_t* s0, int64_t* s1) {
  if (t.dim() == 3) {
    *nb1 = 1, *s0 = t.strides()[0], *s1 = 0;
    return true;
  }
  if (t.dim() == 4) {
    *nb1 = t.sizes()[1], *s0 = t.strides()[0], *s1 = t.strides()[1];
    return true;
  }
  return false;
}

}  // namespace

bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out) {
  static const bool off = [] {
    const char* e = std::getenv("TC_FLASH_ATTENTION_DISABLE");
    return e && *e && *e != '0';
  }();
  if (off) return false;
  for (const Tensor* t : {&q, &k, &v, &out})
    if (t->dtype() != DType::Float32 || !t->device().is_cuda() || t->dim() != q.dim() || t->dim() < 3 || t->dim() > 4 ||
        (t->strides().back() != 1 && t->sizes().back() != 1))
      return false;
  const int64_t nd = q.dim(), L = q.sizes()[nd - 2], S = k.sizes()[nd - 2], E = q.sizes()[nd - 1];
  if (E == 0 || E % 4 != 0 || E > kMaxE || L == 0 || S == 0 || k.sizes()[nd - 1] != E || v.sizes()[nd - 1] != E ||
      v.sizes()[nd - 2] != S || out.sizes()[nd - 2] != L || out.sizes()[nd - 1] != E)
    return false;
  for (int64_t d = 0; d < nd - 2; d++)
    if (k.sizes()[d] != q.sizes()[d] || v.sizes()[d] != q.sizes()[d] || out.sizes()[d] != q.sizes()[d]) return false;
  int64_t batch = 1;
  for (int64_t d = 0; d < nd - 2; d++) batch *= q.sizes()[d];
  if (batch == 0) return true;
  if (batch > 0x7fffffff || (L + kBQ - 1) / kBQ > 65535) return false;
  int64_t nb1, qs0, qs1, ks0, ks1, vs0, vs1, os0, os1, unused;
  batch_layout(q, &nb1, &qs0, &qs1);
  batch_layout(k, &unused, &ks0, &ks1);
  batch_layout(v, &unused, &vs0, &vs1);
  batch_layout(out, &unused, &os0, &os1);
  int64_t qs2 = q.strides()[nd - 2], ks2 = k.strides()[nd - 2], vs2 = v.strides()[nd - 2], os2 = out.strides()[nd - 2];
  const int device = q.device().index;
  // The tensor-core kernel where the device has TF32 mma and the head dim fits its registers
  // (a multiple of 8 up to 64), else the CUDA-core one; TC_FLASH_ATTENTION_MMA=0: always the
  // CUDA-core kernel. In compile-only mode both are built (NVRTC checks them without a GPU).
  static const bool use_mma = [] {
    const char* e = std::getenv("TC_FLASH_ATTENTION_MMA");
    return !(e && *e == '0');
  }();
  auto mma_kernel = [&] {
    return kernels(device, "flash_mma:" + std::to_string(E), [&] { return flash_mma_source(E); }, {"flash_mma"})[0];
  };
  auto fma_kernel = [&] {
    return kernels(device, "flash_fwd:" + std::to_string(E), [&] { return flash_source(E); }, {"flash_fwd"})[0];
  };
  const bool mma_fits = E % 8 == 0 && E <= 64;
  if (compile_only()) {
    fma_kernel();
    if (mma_fits) mma_kernel();
    return true;
  }
  const bool mma = use_mma && mma_fits && dev(device).cc_major >= 8;
  CUfunction f = mma ? mma_kernel() : fma_kernel();
  const unsigned smem = mma ? (unsigned)(sizeof(float) * 4 * kBKMma * (E + 4))
                            : (unsigned)(sizeof(float) * ((kBQ + kBK) * (E + 4) + kBK * E + kBQ * (kBK + 4)));
  {
    static std::mutex mu;
    static std::set<CUfunction> raised;
    std::lock_guard<std::mutex> lock(mu);
    if (raised.insert(f).second)
      check(drv().FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
            "raising the attention kernel's shared memory");
  }
  const void* qp = q.data_ptr();
  const void* kp = k.data_ptr();
  const void* vp = v.data_ptr();
  void* op = out.data_ptr();
  float sc = (float)scale;
  int ca = causal ? 1 : 0;
  int64_t Lv = L, Sv = S;
  // the tensor-core kernel loads keys and values 16 bytes at a time where every row is aligned
  auto aligned = [](const void* p, std::initializer_list<int64_t> strides) {
    bool ok = reinterpret_cast<uintptr_t>(p) % 16 == 0;
    for (int64_t st : strides) ok = ok && st % 4 == 0;
    return ok;
  };
  int vec = aligned(kp, {ks0, ks1, ks2}) && aligned(vp, {vs0, vs1, vs2}) ? 1 : 0;
  void* args[] = {&qp, &kp, &vp, &op, &Lv, &Sv, &nb1, &qs0, &qs1, &qs2, &ks0, &ks1, &ks2,
                  &vs0, &vs1, &vs2, &os0, &os1, &os2, &sc, &ca, &vec};
  launch3(device, f, (unsigned)batch, (unsigned)((L + kBQ - 1) / kBQ), 1, mma ? 128 : kThreads, args, smem);
  return true;
}

}  // namespace tc::cuda
