// Every algorithm path of CPU conv2d/conv1d against a float64 loop written here: the implicit-GEMM
// float32 path (stdlib/cpu/conv_gemm.cpp: padding, strides that gather, dilation, groups, 1x1
// planes read as one row, columns spanning samples, channel counts that leave partial
// micro-tiles, K split into several blocks, the work split over channels when columns are few)
// and the im2col + BLAS path it leaves to (thin groups, float64); and the separable max/avg pools
// (stdlib/cpu/pool.cpp). Error bound: float32 rounding of a K-term dot product, relative to
// sum |x*w| of each output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;

namespace {

Tensor randn(const Shape& s, DType dt, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  Tensor d = Tensor::empty(s, DType::Float64);
  for (int64_t i = 0; i < d.numel(); i++) d.data<double>()[i] = nd(gen);
  return d.to(dt);
}

struct Case {
  Shape x, w;  // x [N, C, H, W], w [O, C/groups, KH, KW]
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool bias;
};

// Checks conv2d(x, w, b) (dtype dt) against loops in float64: |got - ref| <= tol * sum|x*w| + tol.
void check(const Case& c, DType dt, double tol, uint32_t seed = 1) {
  SCOPED_TRACE(::testing::Message() << "x " << shape_string(c.x) << " w " << shape_string(c.w) << " stride " << c.sh
                                    << "," << c.sw << " pad " << c.ph << "," << c.pw << " dil " << c.dh << "," << c.dw
                                    << " groups " << c.groups << " threads " << get_num_threads());
  Tensor x = randn(c.x, dt, seed), w = randn(c.w, dt, seed + 1);
  Tensor b = c.bias ? randn({c.w[0]}, dt, seed + 2) : Tensor();
  Tensor y = call1(Op::conv2d, {x, w, c.bias ? Value(b) : Value(), IntList{c.sh, c.sw}, IntList{c.ph, c.pw},
                                IntList{c.dh, c.dw}, c.groups});
  int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], O = c.w[0], KH = c.w[2], KW = c.w[3];
  int64_t OH = (H + 2 * c.ph - c.dh * (KH - 1) - 1) / c.sh + 1, OW = (W + 2 * c.pw - c.dw * (KW - 1) - 1) / c.sw + 1;
  ASSERT_EQ(y.sizes(), (Shape{N, O, OH, OW}));
  Tensor xd = x.to(DType::Float64), wd = w.to(DType::Float64), yd = y.to(DType::Float64).contiguous();
  Tensor bd = c.bias ? b.to(DType::Float64) : Tensor();
  const double *X = xd.data<double>(), *Wt = wd.data<double>(), *Y = yd.data<double>();
  int64_t Cg = C / c.groups, Og = O / c.groups;
  int bad = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = c.bias ? bd.data<double>()[o] : 0, mag = std::fabs(acc);
          int64_t g = o / Og;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t i = 0; i < KH; i++)
              for (int64_t j = 0; j < KW; j++) {
                int64_t ih = oh * c.sh - c.ph + i * c.dh, iw = ow * c.sw - c.pw + j * c.dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                double p = X[((n * C + g * Cg + ci) * H + ih) * W + iw] * Wt[((o * Cg + ci) * KH + i) * KW + j];
                acc += p;
                mag += std::fabs(p);
              }
          double got = Y[((n * O + o) * OH + oh) * OW + ow];
          if (!(std::fabs(got - acc) <= tol * (mag + 1)) && bad++ < 5)
            ADD_FAILURE() << "y[" << n << "," << o << "," << oh << "," << ow << "] = " << got << ", expected " << acc;
        }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      // 3x3 padded, odd sizes, O not a multiple of the micro-tile, bias
      {{2, 5, 11, 13}, {13, 5, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},
      // columns of one tile spanning several samples (tiny planes), no bias
      {{5, 7, 3, 2}, {16, 7, 3, 3}, 1, 1, 1, 1, 1, 1, 1, false},
      // strides 2 and 3 (gathered packing), asymmetric padding
      {{2, 6, 17, 19}, {24, 6, 3, 3}, 2, 2, 1, 1, 1, 1, 1, true},
      {{1, 4, 23, 29}, {9, 4, 5, 4}, 3, 2, 2, 1, 1, 1, 1, true},
      // dilation with padding, and a stem-like 7x7 stride 2
      {{2, 8, 15, 16}, {12, 8, 3, 3}, 1, 1, 2, 2, 2, 2, 1, true},
      {{1, 3, 37, 40}, {16, 3, 7, 7}, 2, 2, 3, 3, 1, 1, 1, true},
      // 1x1: stride 1 (planes read as one row), strided, padded
      {{3, 40, 9, 7}, {30, 40, 1, 1}, 1, 1, 0, 0, 1, 1, 1, true},
      {{2, 16, 9, 10}, {20, 16, 1, 1}, 2, 2, 0, 0, 1, 1, 1, false},
      {{2, 16, 5, 6}, {20, 16, 1, 1}, 1, 1, 1, 1, 1, 1, 1, true},
      // 1x7 and 7x1 (Inception), K = 7*80 = 560 split into several blocks
      {{1, 80, 9, 11}, {24, 80, 1, 7}, 1, 1, 0, 3, 1, 1, 1, true},
      {{1, 80, 9, 11}, {24, 80, 7, 1}, 1, 1, 3, 0, 1, 1, 1, true},
      // K = 64*9 = 576 (3 blocks), many output channels, many columns (several column blocks)
      {{2, 64, 20, 21}, {50, 64, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},
      // groups: 8 and 12 channels per group take the fast path; 2 per group (and depthwise) the GEMM path
      {{2, 16, 10, 9}, {24, 8, 3, 3}, 1, 1, 1, 1, 1, 1, 2, true},
      {{2, 12, 8, 8}, {36, 4, 3, 3}, 2, 1, 0, 1, 1, 1, 3, true},
      {{2, 8, 10, 9}, {8, 2, 3, 3}, 1, 1, 1, 1, 1, 1, 4, true},
      {{2, 8, 10, 9}, {8, 1, 3, 3}, 1, 1, 1, 1, 1, 1, 8, false},
      // window wider than the input row (every lane masked on some rows)
      {{1, 8, 2, 3}, {8, 8, 5, 5}, 1, 1, 2, 2, 1, 1, 1, true},
  };
  return cs;
}

TEST(ConvPathsMatchReference, Float32EachPathAndThreadCount) {
  int saved = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const Case& c : cases()) check(c, DType::Float32, 1e-5);
  }
  set_num_threads(saved);
}

TEST(ConvPathsMatchReference, Float64AndHalfTypes) {
  for (const Case& c : cases()) check(c, DType::Float64, 1e-12);
  for (size_t i = 0; i < cases().size(); i += 3) check(cases()[i], DType::BFloat16, 1e-2);
}

TEST(ConvPathsMatchReference, NonContiguousInputAndConv1d) {
  // a transposed (H <-> W) view of the input goes through .contiguous() first
  Tensor base = randn({2, 6, 9, 8}, DType::Float32, 5), w = randn({10, 6, 3, 3}, DType::Float32, 6);
  Tensor xt = base.as_strided({2, 6, 8, 9}, {6 * 72, 72, 1, 8}, 0);
  Tensor got = call1(Op::conv2d, {xt, w, Value(), IntList{1}, IntList{1}});
  Tensor want = call1(Op::conv2d, {xt.contiguous(), w, Value(), IntList{1}, IntList{1}});
  ASSERT_EQ(got.sizes(), want.sizes());
  for (int64_t i = 0; i < got.numel(); i++) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]);
  // conv1d is conv2d of height 1: compare with the 2-D form of the same data
  Tensor x1 = randn({3, 10, 31}, DType::Float32, 7), w1 = randn({14, 10, 5}, DType::Float32, 8);
  Tensor y1 = call1(Op::conv1d, {x1, w1, Value(), IntList{2}, IntList{2}, IntList{1}});
  Tensor y2 = call1(Op::conv2d, {x1.as_strided({3, 10, 1, 31}, {310, 31, 31, 1}, 0), w1.as_strided({14, 10, 1, 5}, {50, 5, 5, 1}, 0), Value(), IntList{1, 2},
                                 IntList{0, 2}});
  ASSERT_EQ(y1.numel(), y2.numel());
  for (int64_t i = 0; i < y1.numel(); i++) ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]);
}

// max_pool2d / avg_pool2d (float32 and float64 take the separable path) against window loops,
// with padding, ceil mode, dilation, count_include_pad, divisor_override, and NaN propagation.
TEST(ConvPathsMatchReference, SeparablePoolsMatchWindowLoops) {
  struct P {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil, include_pad;
    int64_t divisor;
  };
  std::vector<P> ps = {{3, 3, 2, 2, 1, 1, 1, 1, false, true, 0}, {3, 3, 2, 2, 0, 0, 1, 1, true, true, 0},
                       {2, 2, 2, 2, 0, 0, 1, 1, false, true, 0}, {3, 3, 1, 1, 1, 1, 1, 1, false, true, 0},
                       {3, 3, 1, 1, 1, 1, 1, 1, false, false, 0}, {4, 3, 3, 2, 2, 1, 2, 3, true, false, 0},
                       {5, 2, 2, 3, 2, 1, 3, 1, true, true, 7}};
  for (DType dt : {DType::Float32, DType::Float64})
    for (const P& q : ps) {
      Tensor x = randn({2, 3, 13, 11}, dt, 9);
      Tensor xd = x.to(DType::Float64).contiguous();
      double* xv = xd.data<double>();
      xv[5 * 11 + 4] = NAN;  // one NaN in plane 0
      x = xd.to(dt);
      Tensor mp = call1(Op::max_pool2d, {x, IntList{q.kh, q.kw}, IntList{q.sh, q.sw}, IntList{q.ph, q.pw},
                                         IntList{q.dh, q.dw}, q.ceil});
      Tensor ap = call1(Op::avg_pool2d, {x, IntList{q.kh, q.kw}, IntList{q.sh, q.sw}, IntList{q.ph, q.pw}, q.ceil,
                                         q.include_pad, q.divisor ? Value(q.divisor) : Value()});
      Tensor mpd = mp.to(DType::Float64).contiguous(), apd = ap.to(DType::Float64).contiguous();
      int64_t OH = mp.size(2), OW = mp.size(3), AH = ap.size(2), AW = ap.size(3);
      for (int64_t pl = 0; pl < 6; pl++) {
        const double* in = xv + pl * 13 * 11;
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            double best = -INFINITY;
            for (int64_t i = 0; i < q.kh; i++)
              for (int64_t j = 0; j < q.kw; j++) {
                int64_t h = oh * q.sh - q.ph + i * q.dh, w = ow * q.sw - q.pw + j * q.dw;
                if (h < 0 || h >= 13 || w < 0 || w >= 11) continue;
                if (in[h * 11 + w] > best || std::isnan(in[h * 11 + w])) best = in[h * 11 + w];
                if (std::isnan(best)) break;
              }
            double got = mpd.data<double>()[(pl * OH + oh) * OW + ow];
            ASSERT_TRUE(std::isnan(best) ? std::isnan(got) : got == best) << "max plane " << pl << " " << oh << "," << ow;
          }
        if (q.dh != 1 || q.dw != 1) continue;  // avg_pool2d has no dilation
        for (int64_t oh = 0; oh < AH; oh++)
          for (int64_t ow = 0; ow < AW; ow++) {
            int64_t h0 = oh * q.sh - q.ph, w0 = ow * q.sw - q.pw;
            int64_t h1 = std::min(h0 + q.kh, 13 + q.ph), w1 = std::min(w0 + q.kw, 11 + q.pw);
            int64_t cnt = (h1 - h0) * (w1 - w0), valid = 0;
            double sum = 0;
            for (int64_t h = std::max<int64_t>(h0, 0); h < std::min<int64_t>(h1, 13); h++)
              for (int64_t w = std::max<int64_t>(w0, 0); w < std::min<int64_t>(w1, 11); w++) sum += in[h * 11 + w], valid++;
            double want = sum / (q.divisor ? q.divisor : q.include_pad ? cnt : valid);
            double got = apd.data<double>()[(pl * AH + oh) * AW + ow];
            ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want)))
                << "avg plane " << pl << " " << oh << "," << ow << ": " << got << " vs " << want;
          }
      }
    }
}

}  // namespace
