// cuDNN's graph API path (stdlib/cuda/cudnn.cpp) builds one execution plan per convolution
// problem and reuses it: the same problem twice adds one plan, another shape, the transposed
// convolution or another float32 precision (TF32 allowed or not) each add their own, and every
// result matches the CPU in float64. Also checks eval-mode batch_norm's one-pass kernel
// (stdlib/cuda/nn.cpp) against the CPU with non-trivial running statistics. Skips without a GPU;
// the plan checks skip without cuDNN unless TC_EXPECT_CUDNN=1 (the GPU machine's run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/ops.h"
#include "compare_to_cpu.h"

using namespace tc;
using tc::test::convert;
using tc::test::max_rel_err;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

Tensor rand_tensor(const Shape& s, std::mt19937& rng, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(s, DType::Float64);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = d(rng);
  return t;
}

class CudnnPlans : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
    unsetenv("TC_CUDNN_DISABLE");
  }
  void TearDown() override {
    set_float32_matmul_precision("highest");
  }
};

TEST_F(CudnnPlans, OnePlanPerProblemAndResultsMatchCpu) {
  std::mt19937 rng(3);
  struct Conv {
    Op op;
    Shape x, w;
    int64_t stride, padding;
  };
  auto check = [&](const Conv& c, const char* precision, double tol) {
    set_float32_matmul_precision(precision);
    Tensor x = rand_tensor(c.x, rng), w = rand_tensor(c.w, rng);
    // inputs rounded to float32 first, so only the convolution's own error is measured
    Tensor xr = convert(convert(x, DType::Float32, Device{}), DType::Float64, Device{});
    Tensor wr = convert(convert(w, DType::Float32, Device{}), DType::Float64, Device{});
    auto run = [&](const Tensor& a, const Tensor& b) {
      return call1(c.op, {a, b, Value()}, {{"stride", Value(IntList{c.stride, c.stride})},
                                            {"padding", Value(IntList{c.padding, c.padding})}});
    };
    Tensor ref = run(xr, wr);
    Tensor y = run(convert(x, DType::Float32, kGpu), convert(w, DType::Float32, kGpu));
    EXPECT_LE(max_rel_err(ref, y), tol) << op_name(c.op) << " precision " << precision;
    return std::string(cuda::last_conv_impl());
  };
  const Conv a{Op::conv2d, {4, 8, 12, 12}, {16, 8, 3, 3}, 1, 1};
  const Conv b{Op::conv2d, {4, 8, 12, 12}, {16, 8, 1, 1}, 2, 0};
  const Conv t{Op::conv_transpose2d, {2, 8, 6, 6}, {8, 4, 3, 3}, 2, 1};
  int64_t n0 = cuda::cudnn_plan_count();
  if (check(a, "highest", 1e-5) != "cudnn") {
    const char* e = std::getenv("TC_EXPECT_CUDNN");
    ASSERT_FALSE(e && std::string(e) == "1") << "cuDNN was expected to run the convolution";
    GTEST_SKIP() << "cuDNN not available: the fallback ran";
  }
  EXPECT_EQ(cuda::cudnn_plan_count(), n0 + 1);
  EXPECT_EQ(check(a, "highest", 1e-5), "cudnn");
  EXPECT_EQ(cuda::cudnn_plan_count(), n0 + 1) << "the same problem must reuse its plan";
  EXPECT_EQ(check(b, "highest", 1e-5), "cudnn");
  EXPECT_EQ(cuda::cudnn_plan_count(), n0 + 2) << "another shape gets its own plan";
  EXPECT_EQ(check(a, "high", 2e-2), "cudnn");
  EXPECT_EQ(cuda::cudnn_plan_count(), n0 + 3) << "TF32 allowed is another problem";
  EXPECT_EQ(check(t, "highest", 1e-5), "cudnn");
  EXPECT_EQ(check(t, "highest", 1e-5), "cudnn");
  EXPECT_EQ(cuda::cudnn_plan_count(), n0 + 4) << "the transposed convolution gets one plan";
}

// batch_norm(training=false) with running statistics, weight and bias present or absent, for
// 2-d, 3-d and 4-d inputs, float32 and float64 (one-pass kernel) and float16 input with float32
// parameters (the general path).
TEST(BatchNormEval, MatchesCpu) {
  std::string why;
  if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  std::mt19937 rng(5);
  for (const Shape& xs : {Shape{7, 5}, Shape{3, 6, 11}, Shape{2, 4, 5, 7}}) {
    int64_t C = xs[1];
    for (int affine = 0; affine < 2; affine++) {
      for (DType dt : {DType::Float32, DType::Float64, DType::Float16}) {
        DType pt = dt == DType::Float16 ? DType::Float32 : dt;
        Tensor x = rand_tensor(xs, rng, -3, 3), rm = rand_tensor({C}, rng), rv = rand_tensor({C}, rng, 0.2, 2);
        Tensor w = rand_tensor({C}, rng), b = rand_tensor({C}, rng);
        auto run = [&](Device d, DType xt, DType p) {
          auto opt = [&](const Tensor& t) { return affine ? Value(convert(t, p, d)) : Value(); };
          return call1(Op::batch_norm,
                       {convert(x, xt, d), opt(w), opt(b), convert(rm, p, d), convert(rv, p, d), false, 0.1, 1e-5});
        };
        Tensor xr = convert(convert(x, dt, Device{}), DType::Float64, Device{});
        x = xr;
        Tensor ref = run(Device{}, DType::Float64, DType::Float64);
        Tensor y = run(kGpu, dt, pt);
        EXPECT_EQ(y.dtype(), dt);
        double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 1e-5 : 2e-3;
        EXPECT_LE(max_rel_err(ref, y), tol) << dtype_name(dt) << " affine " << affine << " dims " << xs.size();
      }
    }
  }
}

}  // namespace
