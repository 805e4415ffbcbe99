// cuDNN's graph API path (stdlib/cuda/cudnn.cpp) builds one execution plan per convolution
// problem and reuses it: the same problem twice adds one plan, another shape, the transposed
// convolution or another float32 precision (TF32 allowed or not) each add their own, and every
// result matches the CPU in float64; so does the weight gradient (backward-filter). Also checks
// batch_norm's one-kernel paths (eval: stdlib/cuda/nn.cpp; training and its backward:
// stdlib/cuda/batch_norm.cpp) against the CPU with non-trivial running statistics. Skips without a GPU;
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

// Channels-last plans (opt-in; TC_CUDNN_LAYOUT=nhwc: forward convolutions take only those; the call copies
// x and w into channels-last buffers and the result back) equal the CPU in float64: stride,
// padding, dilation, groups, bias, non-square images, a 1x1 and a 7x7 kernel; cuDNN runs each
// (where it has channels-last engines for float32: channel counts that are multiples of 4 here).
// The transposed convolution keeps its NCHW plan.
TEST_F(CudnnPlans, ChannelsLastPlansMatchCpu) {
  std::mt19937 rng(17);
  struct Case {
    Shape x, w;
    int64_t stride, padding, dilation, groups;
    bool bias;
  };
  const Case cases[] = {
      {{4, 8, 12, 12}, {16, 8, 3, 3}, 1, 1, 1, 1, false},  {{3, 16, 9, 13}, {8, 16, 3, 3}, 2, 1, 1, 1, true},
      {{2, 32, 8, 8}, {32, 32, 1, 1}, 1, 0, 1, 1, false},  {{2, 8, 10, 10}, {8, 4, 3, 3}, 1, 2, 2, 2, true},
      {{2, 4, 20, 20}, {8, 4, 7, 7}, 2, 3, 1, 1, false},
  };
  setenv("TC_CUDNN_LAYOUT", "nhwc", 1);
  set_float32_matmul_precision("highest");
  for (const Case& c : cases) {
    Tensor x = rand_tensor(c.x, rng), w = rand_tensor(c.w, rng), b = rand_tensor({c.w[0]}, rng);
    auto run = [&](Device d, DType dt) {
      return call1(Op::conv2d, {convert(x, dt, d), convert(w, dt, d), c.bias ? Value(convert(b, dt, d)) : Value()},
                   {{"stride", Value(IntList{c.stride, c.stride})},
                    {"padding", Value(IntList{c.padding, c.padding})},
                    {"dilation", Value(IntList{c.dilation, c.dilation})},
                    {"groups", Value(c.groups)}});
    };
    Tensor xr = convert(convert(x, DType::Float32, Device{}), DType::Float64, Device{});
    Tensor wr = convert(convert(w, DType::Float32, Device{}), DType::Float64, Device{});
    Tensor br = convert(convert(b, DType::Float32, Device{}), DType::Float64, Device{});
    x = xr, w = wr, b = br;
    Tensor ref = run(Device{}, DType::Float64);
    Tensor y = run(kGpu, DType::Float32);
    EXPECT_LE(max_rel_err(ref, y), 1e-5) << "x " << c.x[1] << "x" << c.x[2] << "x" << c.x[3] << " kernel " << c.w[2];
    const char* e = std::getenv("TC_EXPECT_CUDNN");
    if (e && std::string(e) == "1") {
      EXPECT_EQ(std::string(cuda::last_conv_impl()), "cudnn") << "kernel " << c.w[2];
    }
  }
  unsetenv("TC_CUDNN_LAYOUT");
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

// _conv2d_weight_backward (conv2d's weight gradient): cuDNN's backward-filter (one plan per
// problem) and the formula in ops (asymmetric "same" padding) equal the CPU's formula in float64,
// with stride, padding, dilation and groups, and conv_transpose2d's use of it (dy larger than the
// kernel reaches: output_padding).
TEST_F(CudnnPlans, WeightGradientMatchesCpu) {
  std::mt19937 rng(11);
  struct Case {
    Shape x, g, w;
    int64_t stride, dil, groups;
    Value padding;
  };
  const Case cases[] = {
      {{4, 8, 12, 12}, {4, 16, 12, 12}, {16, 8, 3, 3}, 1, 1, 1, Value(IntList{1})},
      {{4, 8, 12, 12}, {4, 16, 6, 6}, {16, 8, 1, 1}, 2, 1, 1, Value(IntList{0})},
      {{2, 6, 9, 9}, {2, 4, 4, 4}, {4, 3, 3, 3}, 2, 1, 2, Value(IntList{1})},
      {{2, 4, 10, 10}, {2, 4, 6, 6}, {4, 4, 3, 3}, 1, 2, 1, Value(IntList{0})},
      {{2, 4, 9, 9}, {2, 5, 5, 5}, {5, 4, 3, 3}, 2, 1, 1, Value(IntList{1})},  // dy 5 from 9: (9+2-3)/2+1
      {{2, 4, 7, 7}, {2, 3, 7, 7}, {3, 4, 4, 4}, 1, 1, 1, Value(std::string("same"))},  // pads 1 and 2
  };
  set_float32_matmul_precision("highest");
  for (const Case& c : cases) {
    Tensor x = rand_tensor(c.x, rng), g = rand_tensor(c.g, rng);
    auto run = [&](const Tensor& gt, const Tensor& xt) {
      return call1(Op::_conv2d_weight_backward, {gt, xt, IntList(c.w.begin(), c.w.end()), IntList{c.stride}, c.padding,
                                                 IntList{c.dil}, c.groups});
    };
    Tensor xr = convert(convert(x, DType::Float32, Device{}), DType::Float64, Device{});
    Tensor gr = convert(convert(g, DType::Float32, Device{}), DType::Float64, Device{});
    Tensor ref = run(gr, xr);
    int64_t plans = cuda::cudnn_plan_count();
    Tensor dw = run(convert(g, DType::Float32, kGpu), convert(x, DType::Float32, kGpu));
    EXPECT_EQ(dw.sizes(), c.w);
    EXPECT_LE(max_rel_err(ref, dw), 1e-5) << shape_string(c.x) << " -> " << shape_string(c.g);
    if (c.padding.is_int_list() && std::string(cuda::last_conv_impl()) == "cudnn") {
      run(convert(g, DType::Float32, kGpu), convert(x, DType::Float32, kGpu));
      EXPECT_EQ(cuda::cudnn_plan_count(), plans + 1) << "one backward-filter plan per problem";
    }
  }
}

// batch_norm with batch statistics on CUDA (one kernel when the parameters share a dtype) equals
// the CPU: output, running mean and unbiased running variance after the momentum update, and
// num_batches_tracked incremented once; float32, float64 and float16 (float16 parameters too),
// with and without affine parameters, 2-d to 4-d inputs.
TEST(BatchNormTrain, OneKernelMatchesCpu) {
  std::string why;
  if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  std::mt19937 rng(7);
  for (const Shape& xs : {Shape{7, 5}, Shape{3, 6, 11}, Shape{16, 8, 4, 4}, Shape{2, 3, 40, 40}}) {
    int64_t C = xs[1];
    for (int affine = 0; affine < 2; affine++) {
      for (DType dt : {DType::Float32, DType::Float64, DType::Float16}) {
        Tensor x = rand_tensor(xs, rng, -2, 3), rm = rand_tensor({C}, rng), rv = rand_tensor({C}, rng, 0.2, 2);
        Tensor w = rand_tensor({C}, rng), b = rand_tensor({C}, rng);
        x = convert(convert(x, dt, Device{}), DType::Float64, Device{});
        // returns the output; running stats and counter (3 before) in rmo, rvo, nbt; launches made
        auto run = [&](Device d, DType t, Tensor* rmo, Tensor* rvo, Tensor* nbt, int64_t* launches) {
          auto opt = [&](const Tensor& p) { return affine ? Value(convert(p, t, d)) : Value(); };
          *rmo = convert(rm, t, d);
          *rvo = convert(rv, t, d);
          *nbt = convert(Tensor::scalar_int(3), DType::Int64, d);
          Stack args{convert(x, t, d), opt(w), opt(b), *rmo, *rvo, true, 0.1, 1e-5};
          int64_t l0 = cuda::launch_count();
          Tensor y = call1(Op::batch_norm, args, {{"num_batches_tracked", Value(*nbt)}});
          *launches = cuda::launch_count() - l0;
          return y;
        };
        Tensor rm_ref, rv_ref, n_ref, rm_gpu, rv_gpu, n_gpu;
        int64_t launches = 0;
        Tensor ref = run(Device{}, DType::Float64, &rm_ref, &rv_ref, &n_ref, &launches);
        Tensor y = run(kGpu, dt, &rm_gpu, &rv_gpu, &n_gpu, &launches);
        EXPECT_EQ(launches, 1) << "batch_norm in training is one launch";
        double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 1e-5 : 4e-3;
        std::string what = std::string(dtype_name(dt)) + " affine " + std::to_string(affine) + " " + shape_string(xs);
        EXPECT_LE(max_rel_err(ref, y), tol) << what;
        EXPECT_LE(max_rel_err(rm_ref, rm_gpu), tol) << what;
        EXPECT_LE(max_rel_err(rv_ref, rv_gpu), tol) << what;
        EXPECT_EQ(convert(n_gpu, DType::Int64, Device{}).item_int(), 4) << what;
        EXPECT_EQ(n_ref.item_int(), 4) << what;
      }
    }
  }
}

// _batch_norm_backward on CUDA (one kernel) equals the CPU kernel: grad_input, grad_weight and
// grad_bias with batch statistics and with running statistics, with and without a weight.
TEST(BatchNormBackward, OneKernelMatchesCpu) {
  std::string why;
  if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  std::mt19937 rng(9);
  for (const Shape& xs : {Shape{7, 5}, Shape{16, 8, 4, 4}, Shape{2, 3, 33, 40}}) {
    int64_t C = xs[1];
    for (int training = 0; training < 2; training++) {
      for (int affine = 0; affine < 2; affine++) {
        for (DType dt : {DType::Float32, DType::Float64}) {
          Tensor x = rand_tensor(xs, rng, -2, 3), g = rand_tensor(xs, rng), w = rand_tensor({C}, rng);
          Tensor rm = rand_tensor({C}, rng), rv = rand_tensor({C}, rng, 0.2, 2);
          x = convert(convert(x, dt, Device{}), DType::Float64, Device{});
          g = convert(convert(g, dt, Device{}), DType::Float64, Device{});
          int64_t launches = 0;
          auto run = [&](Device d, DType t) {
            Stack args = bind(Op::_batch_norm_backward, {convert(g, t, d), convert(x, t, d),
                                                         affine ? Value(convert(w, t, d)) : Value(), convert(rm, t, d),
                                                         convert(rv, t, d), training == 1, 1e-5}, {});
            int64_t l0 = cuda::launch_count();
            Stack r = call(Op::_batch_norm_backward, args);
            launches = cuda::launch_count() - l0;
            return r;
          };
          Stack ref = run(Device{}, DType::Float64);
          Stack got = run(kGpu, dt);
          EXPECT_EQ(launches, 1) << "the backward is one launch";
          double tol = dt == DType::Float64 ? 1e-11 : 1e-4;
          for (int i = 0; i < 3; i++)
            EXPECT_LE(max_rel_err(ref[i].tensor(), got[i].tensor()), tol)
                << "output " << i << " " << dtype_name(dt) << " training " << training << " affine " << affine << " "
                << shape_string(xs);
        }
      }
    }
  }
}

// The batch_norm kernels of every dtype compile with NVRTC: in compile-only mode (no GPU needed,
// nothing launches) where there is no GPU, for real otherwise.
TEST(BatchNormKernels, CompileWithNvrtc) {
  bool gpu = cuda::is_available();
  if (!gpu) cuda::set_compile_only(true);
  try {
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      std::mt19937 rng(1);
      auto t = [&](const Shape& s) { return convert(rand_tensor(s, rng, 0.5, 1), dt, kGpu); };
      Tensor x = t({4, 3, 2, 2}), rm = t({3}), rv = t({3});
      Tensor n = convert(Tensor::scalar_int(0), DType::Int64, kGpu);
      call1(Op::batch_norm, {x, t({3}), t({3}), rm, rv, true, 0.1, 1e-5}, {{"num_batches_tracked", Value(n)}});
      Stack r = call(Op::_batch_norm_backward,
                     bind(Op::_batch_norm_backward, {t({4, 3, 2, 2}), x, t({3}), rm, rv, true, 1e-5}, {}));
      EXPECT_EQ(r.size(), 3u);
    }
  } catch (const Error& e) {
    cuda::set_compile_only(false);
    if (e.kind() == ErrorKind::DeviceError) GTEST_SKIP() << "NVRTC cannot be loaded: " << e.what();
    FAIL() << e.what();
  }
  cuda::set_compile_only(false);
}

}  // namespace
