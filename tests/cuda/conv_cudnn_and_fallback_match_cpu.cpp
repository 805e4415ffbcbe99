// conv1d/conv2d/conv_transpose2d on CUDA through both implementations — cuDNN (when the machine
// has it) and the im2col + cuBLAS fallback (forced with TC_CUDNN_DISABLE=1) — against the CPU in
// float64, over strides, padding, dilation, groups (depthwise too), bias or none, 1x1 kernels,
// unbatched input, sizes on both sides of the fallback's one-GEMM threshold, and float64,
// float32 (full precision and TF32), float16, bfloat16. tc::cuda::last_conv_impl() must name the
// path that ran. Skips without a GPU; without cuDNN only the fallback is checked, unless
// TC_EXPECT_CUDNN=1 (the GPU machine's run) makes that a failure.
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

struct Case {
  const char* name;
  Op op;
  Shape x, w;
  bool bias;
  IntList stride, padding, dilation, output_padding;
  int64_t groups;
};

Tensor run(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<std::pair<std::string, Value>> kw = {{"stride", Value(c.stride)}, {"padding", Value(c.padding)},
                                                   {"dilation", Value(c.dilation)}, {"groups", Value(c.groups)}};
  if (c.op == Op::conv_transpose2d) kw.push_back({"output_padding", Value(c.output_padding)});
  return call1(c.op, {x, w, b.defined() ? Value(b) : Value()}, kw);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {"conv2d_3x3_pad1_bias", Op::conv2d, {2, 3, 9, 9}, {4, 3, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, {}, 1},
      {"conv2d_3x2_stride2_groups2", Op::conv2d, {2, 4, 10, 7}, {6, 2, 3, 2}, false, {2, 2}, {1, 0}, {1, 1}, {}, 2},
      {"conv2d_depthwise_dil2", Op::conv2d, {1, 6, 8, 8}, {6, 1, 3, 3}, true, {1, 1}, {2, 2}, {2, 2}, {}, 6},
      {"conv2d_1x1", Op::conv2d, {3, 8, 5, 5}, {16, 8, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, {}, 1},
      {"conv2d_1x1_large_image", Op::conv2d, {2, 4, 48, 48}, {8, 4, 1, 1}, false, {1, 1}, {0, 0}, {1, 1}, {}, 1},
      {"conv2d_3x3_large_image", Op::conv2d, {2, 4, 48, 48}, {8, 4, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, {}, 1},
      {"conv2d_7x7_stride2", Op::conv2d, {4, 3, 33, 31}, {8, 3, 7, 7}, false, {2, 2}, {3, 3}, {1, 1}, {}, 1},
      {"conv2d_unbatched", Op::conv2d, {3, 9, 9}, {5, 3, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, {}, 1},
      {"conv1d_stride2_groups2", Op::conv1d, {2, 4, 20}, {6, 2, 3}, true, {2}, {1}, {1}, {}, 2},
      {"conv1d_unbatched", Op::conv1d, {4, 17}, {3, 4, 5}, false, {1}, {2}, {2}, {}, 1},
      {"conv_transpose2d_stride2_outpad", Op::conv_transpose2d, {2, 4, 5, 5}, {4, 3, 3, 3}, true, {2, 2}, {1, 1},
       {1, 1}, {1, 1}, 1},
      {"conv_transpose2d_groups2_dil2", Op::conv_transpose2d, {2, 4, 6, 5}, {4, 2, 3, 2}, false, {1, 2}, {0, 1},
       {2, 1}, {0, 1}, 2},
  };
  return cs;
}

class ConvPaths : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
  void TearDown() override {
    unsetenv("TC_CUDNN_DISABLE");
    set_float32_matmul_precision("highest");
  }
};

TEST_F(ConvPaths, BothPathsMatchCpu) {
  Device gpu{DeviceType::CUDA, 0};
  struct Dt {
    DType dt;
    const char* precision;
    double tol;
  };
  const Dt dts[] = {{DType::Float64, "highest", 1e-10},
                    {DType::Float32, "highest", 1e-5},
                    {DType::Float32, "high", 2e-2},
                    {DType::Float16, "highest", 2e-2},
                    {DType::BFloat16, "highest", 6e-2}};
  std::mt19937 rng(7);
  int cudnn_runs = 0, runs = 0;
  for (const Case& c : cases()) {
    Tensor x = test::randn_f64(c.x, rng), w = test::randn_f64(c.w, rng);
    Shape bs{c.op == Op::conv_transpose2d ? c.w[1] * c.groups : c.w[0]};
    Tensor b = c.bias ? test::randn_f64(bs, rng) : Tensor();
    Tensor ref = run(c, x, w, b);
    for (const Dt& d : dts) {
      set_float32_matmul_precision(d.precision);
      // inputs rounded to the dtype first, so only the convolution's own error is measured
      Tensor xr = convert(convert(x, d.dt, Device{}), DType::Float64, Device{});
      Tensor wr = convert(convert(w, d.dt, Device{}), DType::Float64, Device{});
      Tensor br = c.bias ? convert(convert(b, d.dt, Device{}), DType::Float64, Device{}) : Tensor();
      Tensor r = d.dt == DType::Float64 ? ref : run(c, xr, wr, br);
      Tensor xg = convert(x, d.dt, gpu), wg = convert(w, d.dt, gpu);
      Tensor bg = c.bias ? convert(b, d.dt, gpu) : Tensor();
      for (int disable = 0; disable < 2; disable++) {
        if (disable) setenv("TC_CUDNN_DISABLE", "1", 1);
        else unsetenv("TC_CUDNN_DISABLE");
        Tensor y = run(c, xg, wg, bg);
        std::string impl = cuda::last_conv_impl();
        runs++;
        if (impl == "cudnn") cudnn_runs++;
        ASSERT_TRUE(y.device().is_cuda());
        ASSERT_EQ(y.sizes(), r.sizes()) << c.name;
        ASSERT_EQ(y.dtype(), d.dt) << c.name;
        if (disable) {
          EXPECT_EQ(impl, "im2col+cublas") << c.name;
        }
        double err = max_rel_err(r, y);
        EXPECT_LE(err, d.tol) << c.name << " " << dtype_name(d.dt) << " precision " << d.precision << " via "
                              << impl;
      }
    }
  }
  unsetenv("TC_CUDNN_DISABLE");
  printf("convolutions on %s: %d runs, %d through cuDNN, %d through im2col+cublas\n", cuda::device_name().c_str(),
         runs, cudnn_runs, runs - cudnn_runs);
  if (const char* e = std::getenv("TC_EXPECT_CUDNN"); e && std::string(e) == "1") {
    EXPECT_EQ(cudnn_runs, runs / 2) << "cuDNN was expected to run every convolution it was not disabled for";
  }
}

}  // namespace
