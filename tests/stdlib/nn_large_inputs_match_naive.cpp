// The nn kernels on inputs large enough to take their parallel paths (and OpenBLAS inside
// parallel_for for attention) agree with naive double-precision loops written here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tc/ops.h"

using namespace tc;

namespace {

// Deterministic pseudo-random values in [-2, 2).
Tensor noise(const Shape& shape, uint64_t seed, DType dt = DType::Float32) {
  Tensor t = Tensor::empty(shape, DType::Float64);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < t.numel(); i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.data<double>()[i] = (double)(s >> 11) * 0x1p-53 * 4 - 2;
  }
  return t.to(dt);
}

const double* d(const Tensor& t) {
  return t.data<double>();
}
Tensor f64(const Tensor& t) {
  return t.to(DType::Float64).contiguous();
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  Tensor g = f64(got);
  ASSERT_EQ((size_t)g.numel(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    ASSERT_NEAR(d(g)[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

TEST(NnLarge, LayerNormRows) {
  const int64_t rows = 300, n = 700;
  Tensor x = noise({rows, n}, 1), w = noise({n}, 2), b = noise({n}, 3);
  Tensor out = call1(Op::layer_norm, {x, IntList{n}, w, b});
  Tensor xd = f64(x), wd = f64(w), bd = f64(b);
  std::vector<double> want(rows * n);
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += d(xd)[r * n + i] / n;
    for (int64_t i = 0; i < n; i++) var += std::pow(d(xd)[r * n + i] - mean, 2) / n;
    for (int64_t i = 0; i < n; i++)
      want[r * n + i] = (d(xd)[r * n + i] - mean) / std::sqrt(var + 1e-5) * d(wd)[i] + d(bd)[i];
  }
  expect_close(out, want, 1e-5);
}

TEST(NnLarge, BatchNormTrainingChannels) {
  const int64_t n = 16, c = 40, s = 300;
  Tensor x = noise({n, c, s}, 4);
  Tensor out = call1(Op::batch_norm, {x, Value(), Value(), Value(), Value(), true});
  Tensor xd = f64(x);
  std::vector<double> want(n * c * s);
  for (int64_t ch = 0; ch < c; ch++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < s; j++) mean += d(xd)[(i * c + ch) * s + j] / (n * s);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < s; j++)
        var += std::pow(d(xd)[(i * c + ch) * s + j] - mean, 2) / (n * s);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < s; j++)
        want[(i * c + ch) * s + j] = (d(xd)[(i * c + ch) * s + j] - mean) / std::sqrt(var + 1e-5);
  }
  expect_close(out, want, 1e-5);
}

TEST(NnLarge, AttentionManyHeadsCausal) {
  const int64_t b = 24, l = 33, s = 33, e = 40, ev = 24;
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor q = noise({b, l, e}, 5, dt), k = noise({b, s, e}, 6, dt), v = noise({b, s, ev}, 7, dt);
    Tensor out = call1(Op::scaled_dot_product_attention, {q, k, v}, {{"is_causal", true}});
    Tensor qd = f64(q), kd = f64(k), vd = f64(v);
    std::vector<double> want(b * l * ev, 0.0), p(s);
    for (int64_t h = 0; h < b; h++)
      for (int64_t i = 0; i < l; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s; j++) {
          double dot = 0;
          for (int64_t t = 0; t < e; t++)
            dot += d(qd)[(h * l + i) * e + t] * d(kd)[(h * s + j) * e + t];
          p[j] = j > i ? -INFINITY : dot / std::sqrt((double)e);
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j < s; j++) sum += p[j] = std::exp(p[j] - mx);
        for (int64_t j = 0; j < s; j++)
          for (int64_t t = 0; t < ev; t++)
            want[(h * l + i) * ev + t] += p[j] / sum * d(vd)[(h * s + j) * ev + t];
      }
    expect_close(out, want, dt == DType::Float32 ? 1e-5 : 2e-2);
  }
}

TEST(NnLarge, CrossEntropyWithSmoothing) {
  const int64_t n = 2000, c = 37;
  Tensor x = noise({n, c}, 8);
  Tensor t = Tensor::empty({n}, DType::Int64);
  for (int64_t i = 0; i < n; i++) t.data<int64_t>()[i] = 1 + (i * 7) % c;
  Tensor out = call1(Op::cross_entropy, {x, t}, {{"label_smoothing", 0.1}, {"reduction", "sum"}});
  Tensor xd = f64(x);
  double want = 0;
  for (int64_t i = 0; i < n; i++) {
    double mx = -INFINITY, sum = 0, all = 0;
    for (int64_t j = 0; j < c; j++) mx = std::max(mx, d(xd)[i * c + j]);
    for (int64_t j = 0; j < c; j++) sum += std::exp(d(xd)[i * c + j] - mx);
    double lse = mx + std::log(sum);
    for (int64_t j = 0; j < c; j++) all += lse - d(xd)[i * c + j];
    want += 0.9 * (lse - d(xd)[i * c + t.data<int64_t>()[i] - 1]) + 0.1 / c * all;
  }
  expect_close(out, {want}, 1e-5);
}

TEST(NnLarge, BilinearResize) {
  Tensor x = noise({2, 3, 50, 70}, 9);
  Tensor out = call1(Op::interpolate, {x, IntList{123, 45}, Value(), "bilinear", true});
  Tensor xd = f64(x);
  std::vector<double> want;
  for (int64_t nc = 0; nc < 6; nc++)
    for (int64_t i = 0; i < 123; i++)
      for (int64_t j = 0; j < 45; j++) {
        double sh = i * 49.0 / 122, sw = j * 69.0 / 44;
        int64_t h0 = (int64_t)sh, w0 = (int64_t)sw, h1 = std::min<int64_t>(h0 + 1, 49),
                w1 = std::min<int64_t>(w0 + 1, 69);
        double lh = sh - h0, lw = sw - w0;
        auto at = [&](int64_t h, int64_t w) { return d(xd)[(nc * 50 + h) * 70 + w]; };
        want.push_back((1 - lh) * ((1 - lw) * at(h0, w0) + lw * at(h0, w1)) +
                       lh * ((1 - lw) * at(h1, w0) + lw * at(h1, w1)));
      }
  expect_close(out, want, 1e-4);  // source positions are computed in float32, like PyTorch
}

TEST(NnLarge, EmbeddingRows) {
  Tensor w = noise({1000, 64}, 10), ids = Tensor::empty({50, 40}, DType::Int64);
  for (int64_t i = 0; i < ids.numel(); i++) ids.data<int64_t>()[i] = 1 + (i * 37) % 1000;
  Tensor out = call1(Op::embedding, {ids, w});
  std::vector<double> want;
  Tensor wd = f64(w);
  for (int64_t i = 0; i < ids.numel(); i++)
    for (int64_t j = 0; j < 64; j++) want.push_back(d(wd)[(ids.data<int64_t>()[i] - 1) * 64 + j]);
  expect_close(out, want, 0);
}

}  // namespace
