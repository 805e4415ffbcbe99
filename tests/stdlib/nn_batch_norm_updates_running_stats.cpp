// batch_norm in training mode writes running_mean/running_var in place like PyTorch 1.13
// (momentum, unbiased variance); evaluation mode reads them and leaves them alone. Expected values
// were computed with torch.nn.functional.batch_norm.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tc/ops.h"

using namespace tc;

namespace {

Tensor tensor(const Shape& shape, const std::vector<double>& v, DType dt = DType::Float32) {
  Tensor t = Tensor::empty(shape, DType::Float64);
  for (size_t i = 0; i < v.size(); i++) t.data<double>()[i] = v[i];
  return t.to(dt);
}

std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// x: [3, 2, 2] (N, C, L)
Tensor input(DType dt = DType::Float32) {
  return tensor({3, 2, 2}, {1.0, 2.0, 0.5, -1.0, 3.0, -2.0, 4.0, 0.0, 0.0, 1.5, 2.5, 1.0}, dt);
}

Tensor batch_norm(const Tensor& x, const Value& w, const Value& b, const Tensor& rm,
                  const Tensor& rv, bool training, double momentum) {
  return call1(Op::batch_norm, {x, w, b, rm, rv, training, momentum, 1e-5});
}

TEST(BatchNorm, TrainingUpdatesRunningStatsInPlace) {
  Tensor rm = tensor({2}, {0.5, -0.5}), rv = tensor({2}, {2.0, 0.5});
  Tensor out =
      batch_norm(input(), tensor({2}, {1.5, 0.5}), tensor({2}, {0.1, -0.2}), rm, rv, true, 0.1);
  expect_near(values(rm), {0.5416666269302368, -0.3333333134651184});
  expect_near(values(rv), {2.1041665077209473, 0.7766667008399963});
  expect_near(values(out),
              {0.17851340770721436, 1.1206746101379395, -0.4020301401615143, -0.8565979599952698,
               2.062835693359375, -2.647970199584961, 0.6586281061172485, -0.5535527467727661,
               -0.7636477947235107, 0.6495940089225769, 0.20406028628349304, -0.25050753355026245});
}

TEST(BatchNorm, UpdatesAccumulateOverCallsWithTheirMomentum) {
  Tensor rm = tensor({2}, {0.5, -0.5}), rv = tensor({2}, {2.0, 0.5});
  uint64_t version = rm.version();
  batch_norm(input(), Value(), Value(), rm, rv, true, 0.1);
  Tensor x2 = tensor(
      {3, 2, 2}, {2.0, 4.0, 1.0, -2.0, 6.0, -4.0, 8.0, 0.0, 0.0, 3.0, 5.0, 2.0});  // 2 * input()
  batch_norm(x2, Value(), Value(), rm, rv, true, 0.5);
  expect_near(values(rm), {1.1875, 1.0});
  expect_near(values(rv), {7.135416030883789, 6.921667098999023});
  EXPECT_GT(rm.version(), version);
}

TEST(BatchNorm, BFloat16InputUpdatesFloat32Stats) {
  Tensor rm = tensor({2}, {0.5, -0.5}), rv = tensor({2}, {2.0, 0.5});
  batch_norm(input(DType::BFloat16), Value(), Value(), rm, rv, true, 0.1);
  EXPECT_EQ(rm.dtype(), DType::Float32);
  expect_near(values(rm), {0.5416666269302368, -0.3333333134651184});
  expect_near(values(rv), {2.1041665077209473, 0.7766666412353516});
}

TEST(BatchNorm, NonContiguousRunningStatsAreWrittenThroughTheView) {
  Tensor buf = tensor({4}, {0.5, 9.0, -0.5, 9.0}), var_buf = tensor({2, 2}, {2.0, 9.0, 0.5, 9.0});
  Tensor rm = buf.as_strided({2}, {2}, 0),
         rv = var_buf.as_strided({2}, {2}, 0);  // every other element
  batch_norm(input(), Value(), Value(), rm, rv, true, 0.1);
  expect_near(values(buf), {0.5416666269302368, 9.0, -0.3333333134651184, 9.0});
  expect_near(values(var_buf), {2.1041665077209473, 9.0, 0.7766667008399963, 9.0});
}

TEST(BatchNorm, EvaluationLeavesRunningStatsAlone) {
  Tensor rm = tensor({2}, {0.5, -0.5}), rv = tensor({2}, {2.0, 0.5});
  uint64_t version = rm.version();
  Tensor out = batch_norm(input(), Value(), Value(), rm, rv, false, 0.1);
  expect_near(values(rm), {0.5, -0.5});
  expect_near(values(rv), {2.0, 0.5});
  EXPECT_EQ(rm.version(), version);
  EXPECT_NEAR(values(out)[0], (1.0 - 0.5) / std::sqrt(2.0 + 1e-5), 1e-6);
}

TEST(BatchNorm, MetaRuleOnFakeTensorsLeavesStatsAlone) {
  Tensor x = Tensor::fake({3, 2, 2}, contiguous_strides({3, 2, 2}), DType::Float32);
  Tensor rm = tensor({2}, {0.5, -0.5}), rv = tensor({2}, {2.0, 0.5});
  Tensor out = batch_norm(x, Value(), Value(), rm, rv, true, 0.1);
  EXPECT_TRUE(out.is_fake());
  EXPECT_EQ(out.sizes(), (Shape{3, 2, 2}));
  expect_near(values(rm), {0.5, -0.5});
}

}  // namespace
