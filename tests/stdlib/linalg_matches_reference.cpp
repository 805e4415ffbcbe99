// The linalg ops at sizes the PyTorch fixtures avoid, against naive loops written here: GEMMs
// with transposed and broadcast operands, batches small enough to run in parallel, grouped and
// strided convolutions, pools; plus the exact PyTorch-like messages (speed: bench/eager_cpu.cpp).
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tc/ops.h"

using namespace tc;

namespace {

Tensor randn(const Shape& s, DType dt = DType::Float32, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  Tensor d = Tensor::empty(s, DType::Float64);
  for (int64_t i = 0; i < d.numel(); i++) d.data<double>()[i] = nd(gen);
  return d.to(dt);
}

// Element at a multi-index of any (strided) CPU tensor, as double.
double at(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); d++) off += idx[d] * t.stride(d);
  return visit_dtype(t.dtype(), [&]<typename T>() { return (double)static_cast<opmath_t<T>>(t.data<T>()[off]); });
}

// A transposed view (last two dims) holding the same values as t.
Tensor transposed_copy(const Tensor& t) {
  int64_t r = t.dim();
  Shape s = t.sizes();
  std::swap(s[r - 1], s[r - 2]);
  Tensor base = Tensor::empty(s, t.dtype());
  Shape st = base.strides();
  std::swap(st[r - 1], st[r - 2]);
  Tensor view = base.as_strided(t.sizes(), st, 0);
  view.copy_from(t);
  return view;
}

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.sizes(), want.sizes());
  Tensor g = got.to(DType::Float64).contiguous(), w = want.to(DType::Float64).contiguous();
  int bad = 0;
  for (int64_t i = 0; i < g.numel() && bad < 5; i++) {
    double a = g.data<double>()[i], b = w.data<double>()[i];
    if (!(std::fabs(a - b) <= tol * (1 + std::fabs(b)))) {
      ADD_FAILURE() << "element " << i << ": got " << a << ", expected " << b;
      bad++;
    }
  }
}

// Naive [*, n, m] @ [*, m, p] with equal batch shapes (no broadcasting), in double.
Tensor ref_bmm(const Tensor& a, const Tensor& b) {
  int64_t r = a.dim(), n = a.size(r - 2), m = a.size(r - 1), p = b.size(r - 1);
  Shape s = a.sizes();
  s[r - 1] = p;
  Tensor out = Tensor::empty(s, DType::Float64);
  int64_t nb = out.numel() / std::max<int64_t>(1, n * p);
  Tensor a3 = a.contiguous().to(DType::Float64), b3 = b.contiguous().to(DType::Float64);
  for (int64_t k = 0; k < nb; k++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < p; j++) {
        double acc = 0;
        for (int64_t q = 0; q < m; q++) acc += a3.data<double>()[k * n * m + i * m + q] * b3.data<double>()[k * m * p + q * p + j];
        out.data<double>()[k * n * p + i * p + j] = acc;
      }
  return out;
}

TEST(LinalgMatchesReference, MatmulOfLargeMatricesInEveryLayout) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor a = randn({64, 96}, dt, 1), b = randn({96, 80}, dt, 2);
    Tensor want = ref_bmm(a, b);
    double tol = dt == DType::Float32 ? 1e-4 : 1e-12;
    expect_close(call1(Op::matmul, {a, b}), want, tol);
    expect_close(call1(Op::matmul, {transposed_copy(a), b}), want, tol);
    expect_close(call1(Op::matmul, {a, transposed_copy(b)}), want, tol);
    expect_close(call1(Op::mm, {transposed_copy(a), transposed_copy(b)}), want, tol);
  }
}

TEST(LinalgMatchesReference, HalfAndIntegerMatmulMatchTheFloatResult) {
  Tensor a = randn({33, 40}), b = randn({40, 17}, DType::Float32, 3);
  Tensor ab = a.to(DType::BFloat16), bb = b.to(DType::BFloat16), ah = a.to(DType::Float16), bh = b.to(DType::Float16);
  expect_close(call1(Op::matmul, {ab, bb}), ref_bmm(ab, bb), 1e-2);
  expect_close(call1(Op::matmul, {ah, transposed_copy(bh)}), ref_bmm(ah, bh), 1e-2);
  Tensor x = a.to(DType::Int64), y = b.to(DType::Int64);  // small integers
  expect_close(call1(Op::mm, {x, transposed_copy(y)}), ref_bmm(x, y), 0);
}

TEST(LinalgMatchesReference, BatchedMatmulBroadcastsAndRunsSmallBatchesInParallel) {
  // [16, 1, 8, 12] @ [3, 12, 8]: batch broadcast to [16, 3]
  Tensor a = randn({16, 1, 8, 12}), b = randn({3, 12, 8}, DType::Float32, 5);
  Tensor got = call1(Op::matmul, {a, b});
  ASSERT_EQ(got.sizes(), (Shape{16, 3, 8, 8}));
  for (int64_t i = 0; i < 16; i++)
    for (int64_t j = 0; j < 3; j++)
      for (int64_t r = 0; r < 8; r++)
        for (int64_t c = 0; c < 8; c++) {
          double acc = 0;
          for (int64_t k = 0; k < 12; k++) acc += at(a, {i, 0, r, k}) * at(b, {j, k, c});
          ASSERT_NEAR(at(got, {i, j, r, c}), acc, 1e-4);
        }
  Tensor x = randn({64, 8, 9}), y = randn({64, 9, 7}, DType::Float32, 7);
  expect_close(call1(Op::bmm, {transposed_copy(x), y}), ref_bmm(x, y), 1e-4);
}

TEST(LinalgMatchesReference, LinearAndBaddbmmApplyBiasAndScalars) {
  Tensor x = randn({4, 5, 32}), w = randn({24, 32}, DType::Float32, 2), bias = randn({24}, DType::Float32, 3);
  Tensor got = call1(Op::linear, {x, w, bias});
  ASSERT_EQ(got.sizes(), (Shape{4, 5, 24}));
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 5; j++)
      for (int64_t o = 0; o < 24; o++) {
        double acc = at(bias, {o});
        for (int64_t k = 0; k < 32; k++) acc += at(x, {i, j, k}) * at(w, {o, k});
        ASSERT_NEAR(at(got, {i, j, o}), acc, 1e-4);
      }
  Tensor s = randn({6, 1, 10}), b1 = randn({6, 7, 9}, DType::Float32, 4), b2 = randn({6, 9, 10}, DType::Float32, 5);
  Tensor r = call1(Op::baddbmm, {s, b1, b2}, {{"beta", 0.5}, {"alpha", 2.0}});
  Tensor prod = ref_bmm(b1, b2);
  for (int64_t i = 0; i < 6; i++)
    for (int64_t j = 0; j < 7; j++)
      for (int64_t k = 0; k < 10; k++)
        ASSERT_NEAR(at(r, {i, j, k}), 0.5 * at(s, {i, 0, k}) + 2 * at(prod, {i, j, k}), 1e-4);
}

TEST(LinalgMatchesReference, EinsumAttentionScoresMatchLoops) {
  Tensor q = randn({2, 3, 10, 16}), k = randn({2, 3, 12, 16}, DType::Float32, 9);
  Tensor got = call1(Op::einsum, {"bhqd,bhkd->bhqk", TensorList{q, k}});
  ASSERT_EQ(got.sizes(), (Shape{2, 3, 10, 12}));
  for (int64_t b = 0; b < 2; b++)
    for (int64_t h = 0; h < 3; h++)
      for (int64_t i = 0; i < 10; i++)
        for (int64_t j = 0; j < 12; j++) {
          double acc = 0;
          for (int64_t d = 0; d < 16; d++) acc += at(q, {b, h, i, d}) * at(k, {b, h, j, d});
          ASSERT_NEAR(at(got, {b, h, i, j}), acc, 1e-4);
        }
}

struct ConvArgs {
  int64_t stride[2], pad[2], dil[2], groups;
};

Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvArgs& c) {
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), KH = w.size(2), KW = w.size(3);
  int64_t OH = (H + 2 * c.pad[0] - c.dil[0] * (KH - 1) - 1) / c.stride[0] + 1;
  int64_t OW = (W + 2 * c.pad[1] - c.dil[1] * (KW - 1) - 1) / c.stride[1] + 1;
  int64_t Cg = C / c.groups, Og = O / c.groups;
  Tensor out = Tensor::empty({N, O, OH, OW}, DType::Float64);
  double* y = out.data<double>();
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = bias.defined() ? at(bias, {o}) : 0;
          int64_t g = o / Og;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t i = 0; i < KH; i++)
              for (int64_t j = 0; j < KW; j++) {
                int64_t ih = oh * c.stride[0] - c.pad[0] + i * c.dil[0], iw = ow * c.stride[1] - c.pad[1] + j * c.dil[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += at(x, {n, g * Cg + ci, ih, iw}) * at(w, {o, ci, i, j});
              }
          *y++ = acc;
        }
  return out;
}

TEST(LinalgMatchesReference, GroupedStridedDilatedConv2dMatchesLoops) {
  Tensor x = randn({2, 8, 17, 19});
  std::vector<std::pair<ConvArgs, Shape>> cases = {
      {{{1, 1}, {1, 1}, {1, 1}, 2}, {6, 4, 3, 3}},  // groups
      {{{2, 1}, {0, 2}, {1, 2}, 4}, {8, 2, 3, 5}},  // everything
      {{{1, 1}, {0, 0}, {1, 1}, 1}, {5, 8, 1, 1}},  // 1x1: no im2col
      {{{2, 2}, {0, 0}, {1, 1}, 1}, {5, 8, 1, 1}},  // 1x1 strided
      {{{1, 1}, {2, 2}, {1, 1}, 8}, {8, 1, 5, 5}},  // depthwise
  };
  for (auto& [c, ws] : cases) {
    Tensor w = randn(ws, DType::Float32, 11), bias = randn({ws[0]}, DType::Float32, 12);
    Tensor got = call1(Op::conv2d, {x, w, bias, IntList{c.stride[0], c.stride[1]}, IntList{c.pad[0], c.pad[1]},
                                    IntList{c.dil[0], c.dil[1]}, c.groups});
    expect_close(got, ref_conv2d(x, w, bias, c), 1e-4);
  }
  // a large per-sample GEMM (the sequential path with OpenBLAS threads), float64
  Tensor xl = randn({2, 16, 24, 24}, DType::Float64), wl = randn({32, 16, 3, 3}, DType::Float64, 13);
  ConvArgs c{{1, 1}, {1, 1}, {1, 1}, 1};
  expect_close(call1(Op::conv2d, {xl, wl, Value(), IntList{1}, IntList{1}}), ref_conv2d(xl, wl, Tensor(), c), 1e-10);
}

TEST(LinalgMatchesReference, ConvTranspose2dIsTheAdjointOfConv2d) {
  // <conv2d(x, w), y> == <x, conv_transpose2d(y, w)> for matching stride/padding/dilation/groups
  Tensor x = randn({2, 6, 12, 13}, DType::Float64), w = randn({4, 3, 3, 2}, DType::Float64, 3);
  IntList stride{2, 1}, pad{1, 0}, dil{1, 2};
  Tensor y = call1(Op::conv2d, {x, w, Value(), stride, pad, dil, 2});
  Tensor g = randn(y.sizes(), DType::Float64, 4);
  // output_padding 1 recovers the row the stride dropped (12 -> 6 -> 12)
  Tensor xt = call1(Op::conv_transpose2d, {g, w, Value(), stride, pad, IntList{1, 0}, 2, dil});
  ASSERT_EQ(xt.sizes(), x.sizes());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < y.numel(); i++) lhs += y.data<double>()[i] * g.data<double>()[i];
  for (int64_t i = 0; i < x.numel(); i++) rhs += x.data<double>()[i] * xt.data<double>()[i];
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(lhs)));
}

TEST(LinalgMatchesReference, PoolsMatchLoops) {
  Tensor x = randn({3, 5, 23, 21});
  Tensor mp = call1(Op::max_pool2d, {x, IntList{3}, IntList{2}, IntList{1}, IntList{2}, true});
  Tensor ap = call1(Op::avg_pool2d, {x, IntList{4, 3}, IntList{3, 2}, IntList{2, 1}, true, false});
  for (int64_t n = 0; n < 3; n++)
    for (int64_t c = 0; c < 5; c++) {
      for (int64_t oh = 0; oh < mp.size(2); oh++)
        for (int64_t ow = 0; ow < mp.size(3); ow++) {
          double best = -INFINITY;
          for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 3; j++) {
              int64_t h = oh * 2 - 1 + i * 2, w = ow * 2 - 1 + j * 2;
              if (h >= 0 && h < 23 && w >= 0 && w < 21) best = std::max(best, at(x, {n, c, h, w}));
            }
          ASSERT_EQ(at(mp, {n, c, oh, ow}), best);
        }
      for (int64_t oh = 0; oh < ap.size(2); oh++)
        for (int64_t ow = 0; ow < ap.size(3); ow++) {
          double sum = 0;
          int cnt = 0;
          for (int64_t h = oh * 3 - 2; h < oh * 3 - 2 + 4; h++)
            for (int64_t w = ow * 2 - 1; w < ow * 2 - 1 + 3; w++)
              if (h >= 0 && h < 23 && w >= 0 && w < 21) sum += at(x, {n, c, h, w}), cnt++;
          ASSERT_NEAR(at(ap, {n, c, oh, ow}), sum / cnt, 1e-5);
        }
    }
}

void expect_error(Op op, Stack args, ErrorKind kind, const std::string& msg) {
  try {
    call1(op, std::move(args));
    ADD_FAILURE() << "no error for " << op_name(op);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind);
    EXPECT_EQ(std::string(e.what()), msg);
  }
}

TEST(LinalgMatchesReference, ErrorsReadLikePytorch) {
  expect_error(Op::mm, {randn({10, 10}), randn({5, 3})}, ErrorKind::ShapeError,
               "mat1 and mat2 shapes cannot be multiplied (10x10 and 5x3)");
  expect_error(Op::matmul, {randn({2, 4, 5}), randn({3, 6})}, ErrorKind::ShapeError,
               "mat1 and mat2 shapes cannot be multiplied (8x5 and 3x6)");
  expect_error(Op::linear, {randn({6, 4}), randn({3, 5})}, ErrorKind::ShapeError,
               "mat1 and mat2 shapes cannot be multiplied (6x4 and 5x3)");
  expect_error(Op::mm, {randn({2, 3}), randn({3, 4}, DType::Float64)}, ErrorKind::DTypeError,
               "expected m1 and m2 to have the same dtype, but got: float != double");
  expect_error(Op::conv2d, {randn({2, 5, 8, 8}), randn({4, 3, 3, 3})}, ErrorKind::ShapeError,
               "Given groups=1, weight of size [4, 3, 3, 3], expected input[2, 5, 8, 8] to have 3 channels, but got 5 channels instead");
}

TEST(LinalgMatchesReference, MetaRulesRunOnFakeTensors) {
  auto fake = [](const Shape& s) { return Tensor::fake(s, contiguous_strides(s), DType::Float32); };
  EXPECT_EQ(call1(Op::conv2d, {fake({2, 4, 9, 8}), fake({6, 2, 2, 4}), Value(), IntList{1}, "same", IntList{1}, 2}).sizes(),
            (Shape{2, 6, 9, 8}));
  EXPECT_EQ(call1(Op::einsum, {"b...,b->...", TensorList{fake({3, 2, 4}), fake({3})}}).sizes(), (Shape{2, 4}));
  EXPECT_EQ(call1(Op::matmul, {fake({5}), fake({7, 1, 5, 3})}).sizes(), (Shape{7, 1, 3}));
  EXPECT_EQ(call1(Op::max_pool2d, {fake({3, 9, 10}), IntList{3}, IntList{2}, IntList{1}, IntList{1}, true}).sizes(),
            (Shape{3, 5, 6}));
}

}  // namespace
