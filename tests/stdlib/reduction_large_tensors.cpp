// Reductions on inputs large enough for the parallel and chunked paths: accuracy of float32
// sums against double references, NaN and tie rules across chunk boundaries, results that do
// not depend on the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;

namespace {

Tensor randn(const Shape& shape, uint32_t seed, float mean = 0.f) {
  Tensor t = Tensor::empty(shape, DType::Float32);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(mean, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = dist(gen);
  return t;
}

double rel_err(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

float item(const Tensor& t) { return (float)t.item_double(); }

TEST(ReductionLarge, SumOfManyFloat32MatchesDoubleReference) {
  for (int64_t n : {100000, 1000003, 10000000}) {
    Tensor x = randn({n}, (uint32_t)n, 0.5f);
    const float* p = x.data<float>();
    double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += p[i];
    EXPECT_LT(rel_err(item(call1(Op::sum, {x})), ref), 1e-6) << "n=" << n;
    EXPECT_LT(rel_err(item(call1(Op::mean, {x})), ref / (double)n), 1e-6) << "n=" << n;
  }
}

TEST(ReductionLarge, SumOverLastDimAndOverLeadingDim) {
  Tensor x = randn({300, 5000}, 1, 0.25f);
  const float* p = x.data<float>();
  Tensor rows = call1(Op::sum, {x, IntList{2}});
  Tensor cols = call1(Op::mean, {x, IntList{1}}, {{"keepdim", true}});
  ASSERT_EQ(rows.sizes(), Shape({300}));
  ASSERT_EQ(cols.sizes(), Shape({1, 5000}));
  for (int64_t r = 0; r < 300; r++) {
    double ref = 0;
    for (int64_t c = 0; c < 5000; c++) ref += p[r * 5000 + c];
    ASSERT_LT(rel_err(rows.data<float>()[r], ref), 1e-5) << "row " << r;
  }
  for (int64_t c = 0; c < 5000; c++) {
    double ref = 0;
    for (int64_t r = 0; r < 300; r++) ref += p[r * 5000 + c];
    ASSERT_NEAR(cols.data<float>()[c], ref / 300, 1e-6) << "column " << c;
  }
}

TEST(ReductionLarge, ResultsDoNotDependOnThreadCount) {
  Tensor x = randn({4, 1 << 20}, 2);
  int saved = get_num_threads();
  set_num_threads(1);
  Tensor s1 = call1(Op::sum, {x}), v1 = call1(Op::var, {x, IntList{2}}), m1 = call1(Op::amax, {x});
  set_num_threads(2);
  Tensor s2 = call1(Op::sum, {x}), v2 = call1(Op::var, {x, IntList{2}}), m2 = call1(Op::amax, {x});
  set_num_threads(saved);
  EXPECT_EQ(item(s1), item(s2));
  EXPECT_EQ(item(m1), item(m2));
  EXPECT_EQ(std::memcmp(v1.data_ptr(), v2.data_ptr(), 4 * sizeof(float)), 0);
}

TEST(ReductionLarge, VarianceWithLargeMeanIsAccurate) {
  int64_t n = 2000000;
  Tensor x = randn({n}, 3, 1000.f);
  const float* p = x.data<float>();
  double mean = 0, m2 = 0;
  for (int64_t i = 0; i < n; i++) mean += p[i];
  mean /= (double)n;
  for (int64_t i = 0; i < n; i++) m2 += (p[i] - mean) * (p[i] - mean);
  Stack vm = call(Op::var_mean, bind(Op::var_mean, {x}, {}));
  EXPECT_LT(rel_err(item(vm[0].tensor()), m2 / (double)(n - 1)), 1e-5);
  EXPECT_LT(rel_err(item(vm[1].tensor()), mean), 1e-6);
  EXPECT_LT(rel_err(item(call1(Op::std, {x}, {{"correction", 0}})), std::sqrt(m2 / (double)n)), 1e-5);
}

TEST(ReductionLarge, NaNAndTiesAcrossChunks) {
  int64_t n = 3000000;
  Tensor x = randn({n}, 4);
  float* p = x.data<float>();
  p[1500000] = 100.f;  // tie between two chunks: the first wins
  p[2900000] = 100.f;
  EXPECT_EQ(call1(Op::argmax, {x}).item_int(), 1500001);
  EXPECT_EQ(item(call1(Op::amax, {x})), 100.f);
  p[2500000] = NAN;  // the first NaN wins over everything
  p[2600000] = NAN;
  EXPECT_EQ(call1(Op::argmax, {x}).item_int(), 2500001);
  EXPECT_EQ(call1(Op::argmin, {x}).item_int(), 2500001);
  EXPECT_TRUE(std::isnan(item(call1(Op::amax, {x}))));
  EXPECT_TRUE(std::isnan(item(call1(Op::amin, {x}))));
  EXPECT_TRUE(std::isnan(item(call1(Op::sum, {x}))));
  Stack mx = call(Op::max_dim, bind(Op::max_dim, {x.as_strided({1, n}, {n, 1}, 0), 2}, {}));
  EXPECT_EQ(mx[1].tensor().item_int(), 2500001);
}

TEST(ReductionLarge, ArgmaxOverRowsMatchesScan) {
  Tensor x = randn({2000, 700}, 5);
  Tensor xt = x.as_strided({700, 2000}, {1, 700}, 0);  // transposed view: reduce over x's rows
  Tensor idx = call1(Op::argmin, {xt, 2});
  const float* p = x.data<float>();
  for (int64_t c = 0; c < 700; c++) {
    int64_t best = 0;
    for (int64_t r = 1; r < 2000; r++)
      if (p[r * 700 + c] < p[best * 700 + c]) best = r;
    ASSERT_EQ(idx.data<int64_t>()[c], best + 1) << "column " << c;
  }
}

TEST(ReductionLarge, SoftmaxRowsSumToOneAndLogsumexpMatches) {
  Tensor x = randn({512, 3000}, 6);
  Tensor s = call1(Op::softmax, {x, -1});
  Tensor ls = call1(Op::log_softmax, {x, -1});
  Tensor lse = call1(Op::logsumexp, {x, IntList{2}});
  const float* p = x.data<float>();
  for (int64_t r = 0; r < 512; r += 37) {
    double sum = 0, ref = 0;
    for (int64_t c = 0; c < 3000; c++) {
      sum += s.data<float>()[r * 3000 + c];
      ref += std::exp((double)p[r * 3000 + c]);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_LT(rel_err(lse.data<float>()[r], std::log(ref)), 1e-6);
    EXPECT_NEAR(ls.data<float>()[r * 3000 + 5], p[r * 3000 + 5] - std::log(ref), 1e-5);
  }
}

TEST(ReductionLarge, CumsumAccumulatesInDouble) {
  int64_t n = 1000000;
  Tensor x = randn({n}, 7, 0.1f);
  Tensor c = call1(Op::cumsum, {x, 1});
  const float* p = x.data<float>();
  double acc = 0;
  for (int64_t i = 0; i < n; i++) acc += p[i];
  EXPECT_LT(rel_err(c.data<float>()[n - 1], acc), 1e-6);
}

TEST(ReductionLarge, SortAndTopkOfLongRows) {
  Tensor x = randn({3, 100000}, 8);
  Stack st = call(Op::sort, bind(Op::sort, {x}, {{"descending", true}}));
  Stack tk = call(Op::topk, bind(Op::topk, {x, 10}, {}));
  const float* v = st[0].tensor().data<float>();
  const int64_t* i = st[1].tensor().data<int64_t>();
  const float* p = x.data<float>();
  for (int64_t r = 0; r < 3; r++) {
    std::vector<bool> seen(100000, false);
    for (int64_t k = 0; k < 100000; k++) {
      int64_t j = i[r * 100000 + k] - 1;
      ASSERT_TRUE(j >= 0 && j < 100000 && !seen[j]);
      seen[j] = true;
      ASSERT_EQ(v[r * 100000 + k], p[r * 100000 + j]);
      if (k) ASSERT_GE(v[r * 100000 + k - 1], v[r * 100000 + k]);
    }
    for (int64_t k = 0; k < 10; k++) {
      EXPECT_EQ(tk[0].tensor().data<float>()[r * 10 + k], v[r * 100000 + k]);
      EXPECT_EQ(tk[1].tensor().data<int64_t>()[r * 10 + k], i[r * 100000 + k]);
    }
  }
}

TEST(ReductionLarge, IntegerSumsAreExactInt64) {
  int64_t n = 5000000;
  Tensor x = Tensor::empty({n}, DType::Int32);
  for (int64_t i = 0; i < n; i++) x.data<int32_t>()[i] = (int32_t)(i % 2001) * 1000;
  int64_t ref = 0;
  for (int64_t i = 0; i < n; i++) ref += x.data<int32_t>()[i];
  Tensor s = call1(Op::sum, {x});
  EXPECT_EQ(s.dtype(), DType::Int64);
  EXPECT_EQ(s.item_int(), ref);
}

}  // namespace
