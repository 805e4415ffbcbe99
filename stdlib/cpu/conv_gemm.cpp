// conv2d float32 as one blocked GEMM per group: Y[o, col] = sum_k W[o, k] * B[k, col], where
// col runs over (sample, oh, ow) of all samples and k over (channel, i, j). B is never formed:
// each work item packs KC x NC panels of it straight from the input (implicit im2col, AVX-512
// masked loads; strided convolutions gather), and an MR x 32 AVX-512 micro-kernel reads the
// weights in place (rows of W are contiguous in k). Results go to a per-item tile and from there
// to Y with the bias. Work items are column blocks x output-channel chunks, in parallel.
#include "cpu/conv_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tc/parallel.h"

#define TC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,bmi,bmi2")))

namespace tc::cpu {
namespace {

constexpr int NR = 32;        // columns per micro-tile (two zmm)
constexpr int MR = 12;        // output channels per micro-tile
constexpr int64_t KCMAX = 256;
constexpr int64_t SUBMAX = 8;  // micro-tile columns groups per work item (NC <= 256)

// A run of consecutive columns of one micro-tile that share (sample, output row): consecutive
// output columns ow0, ow0 + 1, ...
struct Seg {
  int32_t off, len;  // offset within the work item's columns, length (off % NR + len <= NR)
  int64_t n, oh, ow0;
};

// Columns [c0, c0 + nc) cut into segments that stay within one NR group and one output row.
void segments(const ConvGeom& g, int64_t c0, int64_t nc, std::vector<Seg>& out) {
  out.clear();
  int64_t L = g.OH * g.OW;
  int64_t c = c0, end = c0 + nc;
  while (c < end) {
    int64_t n = c / L, r = c % L, oh = r / g.OW, ow = r % g.OW;
    int64_t off = c - c0;
    int64_t len = std::min({g.OW - ow, end - c, NR - off % NR});
    out.push_back(Seg{(int32_t)off, (int32_t)len, n, oh, ow});
    c += len;
  }
}

TC_AVX512 inline __mmask16 lane_mask(int64_t lo, int64_t hi) {  // lanes t with lo <= t < hi (clamped to 0..16)
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << (hi - lo)) - 1u) << lo);
}

// Packs rows [k0, k0 + kc) of B for the item's columns: Bp[sub][k - k0][NR], zero where the
// window falls in the padding (columns past the last one are zeroed by the caller).
TC_AVX512 void pack_b(const ConvGeom& g, const float* xg, const Seg* segs, int64_t nseg, int64_t k0, int64_t kc,
                      float* Bp) {
  int64_t KK = g.KH * g.KW, HW = g.H * g.W, CHW = g.C * HW;
  const __m512i step = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32((int)g.sw));
  int64_t ch = k0 / KK, i = k0 % KK / g.KW, j = k0 % g.KW;  // (channel, kernel row, kernel col) of row k
  for (int64_t kk = 0; kk < kc; kk++) {
    float* row = Bp + kk * NR;
    const float* plane = xg + ch * HW;
    for (int64_t s = 0; s < nseg; s++) {
      const Seg& sg = segs[s];
      float* dst = row + (sg.off / NR) * kc * NR + sg.off % NR;
      int64_t ih = sg.oh * g.sh - g.ph + i * g.dh;
      int64_t len = sg.len;
      if (ih < 0 || ih >= g.H) {
        _mm512_mask_storeu_ps(dst, lane_mask(0, len), _mm512_setzero_ps());
        if (len > 16) _mm512_mask_storeu_ps(dst + 16, lane_mask(0, len - 16), _mm512_setzero_ps());
        continue;
      }
      const float* src = plane + sg.n * CHW + ih * g.W;
      int64_t iw0 = sg.ow0 * g.sw - g.pw + j * g.dw;
      if (g.sw == 1) {
        if (iw0 >= 0 && iw0 + len <= g.W) {  // all inside the row
          __mmask16 m0 = lane_mask(0, len);
          _mm512_mask_storeu_ps(dst, m0, _mm512_maskz_loadu_ps(m0, src + iw0));
          if (len > 16) {
            __mmask16 m1 = lane_mask(0, len - 16);
            _mm512_mask_storeu_ps(dst + 16, m1, _mm512_maskz_loadu_ps(m1, src + iw0 + 16));
          }
          continue;
        }
        for (int64_t h = 0; h < len; h += 16) {
          // lanes t: iw = iw0 + h + t must lie in [0, W)
          __mmask16 valid = lane_mask(-(iw0 + h), g.W - (iw0 + h)) & lane_mask(0, len - h);
          __m512 v = _mm512_maskz_loadu_ps(valid, src + iw0 + h);
          _mm512_mask_storeu_ps(dst + h, lane_mask(0, len - h), v);
        }
      } else {
        for (int64_t h = 0; h < len; h += 16) {
          int64_t base = iw0 + h * g.sw;  // lane t reads base + t*sw, valid when 0 <= base + t*sw < W
          int64_t lo = base >= 0 ? 0 : (-base + g.sw - 1) / g.sw;
          int64_t hi = g.W - base <= 0 ? 0 : (g.W - base + g.sw - 1) / g.sw;
          __mmask16 valid = lane_mask(lo, hi) & lane_mask(0, len - h);
          __m512i idx = _mm512_add_epi32(step, _mm512_set1_epi32((int)base));
          __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, idx, src, 4);
          _mm512_mask_storeu_ps(dst + h, lane_mask(0, len - h), v);
        }
      }
    }
    if (++j == g.KW) {
      j = 0;
      if (++i == g.KH) i = 0, ch++;
    }
  }
}

// C[r][0..32) (+)= sum_k A[r*lda + k] * B[k][0..32) for r < M.
template <int M>
TC_AVX512 void micro(int64_t kc, const float* A, int64_t lda, const float* B, float* C, int64_t ldc, bool acc) {
  __m512 c0[M], c1[M];
  const float* a[M];
  for (int r = 0; r < M; r++) {
    a[r] = A + r * lda;
    c0[r] = acc ? _mm512_load_ps(C + r * ldc) : _mm512_setzero_ps();
    c1[r] = acc ? _mm512_load_ps(C + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(B + k * NR), b1 = _mm512_load_ps(B + k * NR + 16);
    for (int r = 0; r < M; r++) {
      __m512 av = _mm512_set1_ps(a[r][k]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < M; r++) {
    _mm512_store_ps(C + r * ldc, c0[r]);
    _mm512_store_ps(C + r * ldc + 16, c1[r]);
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, bool);
constexpr MicroFn micro_fns[MR + 1] = {nullptr,   micro<1>, micro<2>, micro<3>, micro<4>,  micro<5>, micro<6>,
                                       micro<7>,  micro<8>, micro<9>, micro<10>, micro<11>, micro<12>};

// Y rows [o0, o1) of group `grp` for the item's columns, from the tile C[o - o0][col].
TC_AVX512 void store_out(const ConvGeom& g, int64_t grp, int64_t o0, int64_t o1, const Seg* segs, int64_t nseg,
                         const float* C, int64_t ldc, const float* bias, float* y) {
  int64_t Og = g.O / g.groups, L = g.OH * g.OW;
  for (int64_t o = o0; o < o1; o++) {
    int64_t oc = grp * Og + o;
    __m512 b = _mm512_set1_ps(bias ? bias[oc] : 0.0f);
    const float* crow = C + (o - o0) * ldc;
    for (int64_t s = 0; s < nseg; s++) {
      const Seg& sg = segs[s];
      float* dst = y + (sg.n * g.O + oc) * L + sg.oh * g.OW + sg.ow0;
      for (int64_t h = 0; h < sg.len; h += 16) {
        __mmask16 m = lane_mask(0, sg.len - h);
        _mm512_mask_storeu_ps(dst + h, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, crow + sg.off + h), b));
      }
    }
  }
}

struct Plan {
  int64_t P, K, Og, Cg, mr;  // mr: output channels per micro-tile (<= MR)
  int64_t nsub, ncb, subs_per_cb, noc, oc_size, nkb, kcb;
};

struct Scratch {
  float* p = nullptr;
  size_t n = 0;
  ~Scratch() { std::free(p); }
  float* get(size_t want) {
    if (want > n) {
      std::free(p);
      n = want;
      p = static_cast<float*>(std::aligned_alloc(64, (want * sizeof(float) + 63) / 64 * 64));
    }
    return p;
  }
};

void run_item(const ConvGeom& g, const Plan& pl, int64_t item, const float* x, const float* w, const float* bias,
              float* y) {
  static thread_local Scratch sbuf, cbuf;
  static thread_local std::vector<Seg> segs;
  int64_t grp = item / (pl.ncb * pl.noc), rest = item % (pl.ncb * pl.noc);
  int64_t cb = rest / pl.noc, oc = rest % pl.noc;
  int64_t sub0 = cb * pl.subs_per_cb, sub1 = std::min(pl.nsub, sub0 + pl.subs_per_cb);
  int64_t o0 = oc * pl.oc_size, o1 = std::min(pl.Og, o0 + pl.oc_size);
  if (sub0 >= sub1 || o0 >= o1) return;
  int64_t c0 = sub0 * NR, nc = std::min(pl.P, sub1 * NR) - c0, nsub = sub1 - sub0;
  segments(g, c0, nc, segs);
  float* Bp = sbuf.get((size_t)(pl.kcb * nsub * NR));
  int64_t ldc = nsub * NR;
  float* C = cbuf.get((size_t)((o1 - o0) * ldc));
  const float* xg = x + grp * pl.Cg * g.H * g.W;
  const float* wg = w + (grp * pl.Og) * pl.K;
  for (int64_t kb = 0; kb < pl.nkb; kb++) {
    int64_t k0 = kb * pl.kcb, kc = std::min(pl.K, k0 + pl.kcb) - k0;
    if (nc < nsub * NR)  // the tail of the last micro-tile: zero columns
      for (int64_t kk = 0; kk < kc; kk++)
        std::memset(Bp + (nsub - 1) * kc * NR + kk * NR, 0, sizeof(float) * NR);
    pack_b(g, xg, segs.data(), (int64_t)segs.size(), k0, kc, Bp);
    for (int64_t s = 0; s < nsub; s++)
      for (int64_t o = o0; o < o1; o += pl.mr) {
        int64_t m = std::min<int64_t>(pl.mr, o1 - o);
        micro_fns[m](kc, wg + o * pl.K + k0, pl.K, Bp + s * kc * NR, C + (o - o0) * ldc + s * NR, ldc, kb > 0);
      }
  }
  store_out(g, grp, o0, o1, segs.data(), (int64_t)segs.size(), C, ldc, bias, y);
}

}  // namespace

bool conv_fast_available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
  }();
  return ok;
}

void conv2d_f32_fast(const ConvGeom& g0, const float* x, const float* w, const float* bias, float* y) {
  ConvGeom g = g0;
  // A 1x1 stride-1 unpadded convolution reads each plane as one long row.
  if (g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && g.OH == g.H && g.OW == g.W) {
    g.W = g.OW = g.H * g.W;
    g.H = g.OH = 1;
  }
  Plan pl{};
  pl.Cg = g.C / g.groups;
  pl.Og = g.O / g.groups;
  pl.K = pl.Cg * g.KH * g.KW;
  pl.P = g.N * g.OH * g.OW;
  pl.mr = pl.Og % MR == 0 || pl.Og % 8 != 0 ? MR : 8;  // no partial micro-tile where 8 divides Og
  pl.nsub = (pl.P + NR - 1) / NR;
  pl.nkb = (pl.K + KCMAX - 1) / KCMAX;
  pl.kcb = (pl.K + pl.nkb - 1) / pl.nkb;
  // Below ~2M multiply-adds (a few tens of microseconds) waking the pool costs more than it saves.
  int64_t T = g.groups * pl.Og * pl.K * pl.P < (int64_t(1) << 21) ? 1 : get_num_threads();
  pl.ncb = (pl.nsub + SUBMAX - 1) / SUBMAX;
  if (T > 1 && pl.ncb * g.groups < T) pl.ncb = std::min(pl.nsub, T);
  pl.subs_per_cb = (pl.nsub + pl.ncb - 1) / pl.ncb;
  pl.ncb = (pl.nsub + pl.subs_per_cb - 1) / pl.subs_per_cb;
  pl.noc = 1;
  if (T > 1 && pl.ncb * g.groups < T)
    pl.noc = std::min((pl.Og + pl.mr - 1) / pl.mr, (T + pl.ncb * g.groups - 1) / (pl.ncb * g.groups));
  pl.oc_size = ((pl.Og + pl.noc - 1) / pl.noc + pl.mr - 1) / pl.mr * pl.mr;
  pl.noc = (pl.Og + pl.oc_size - 1) / pl.oc_size;
  int64_t items = g.groups * pl.ncb * pl.noc;
  parallel_for(0, items, T == 1 ? items : 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) run_item(g, pl, i, x, w, bias, y);
  });
}

}  // namespace tc::cpu
