// dropout in training mode zeroes each element with probability p and scales the others by
// 1/(1-p); without training, or with p = 0, it returns the input's values.
#include <gtest/gtest.h>

#include "tc/ops.h"

using namespace tc;

namespace {

Tensor filled(int64_t n, double v, DType dt) {
  Tensor t = Tensor::empty({n}, DType::Float64);
  for (int64_t i = 0; i < n; i++) t.data<double>()[i] = v + (double)(i % 7);
  return t.to(dt);
}

class Dropout : public testing::TestWithParam<DType> {};

TEST_P(Dropout, ZeroesAboutPAndScalesTheRest) {
  const int64_t n = 20000;
  const double p = 0.3;
  Tensor x = filled(n, 1.0, GetParam());
  Tensor out = call1(Op::dropout, {x, p, true}).to(DType::Float64);
  Tensor xd = x.to(DType::Float64);
  ASSERT_EQ(out.sizes(), x.sizes());
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; i++) {
    double o = out.data<double>()[i], want = xd.data<double>()[i] / (1 - p);
    if (o == 0) {
      zeros++;
    } else {
      EXPECT_NEAR(o, want, 1e-2 * want) << "element " << i;
    }
  }
  EXPECT_NEAR((double)zeros / n, p, 0.02);
}

TEST_P(Dropout, EvalAndZeroPReturnTheInput) {
  Tensor x = filled(100, -3.0, GetParam());
  for (Tensor out : {call1(Op::dropout, {x, 0.5, false}), call1(Op::dropout, {x, 0.0, true})}) {
    Tensor a = out.to(DType::Float64), b = x.to(DType::Float64);
    for (int64_t i = 0; i < 100; i++) EXPECT_EQ(a.data<double>()[i], b.data<double>()[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, Dropout,
                         testing::Values(DType::Float32, DType::Float64, DType::Float16,
                                         DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
