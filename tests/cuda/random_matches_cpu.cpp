// The random ops on CUDA draw the CPU's Philox stream (tc/random.h): for the same seed, rand,
// randint, bernoulli, dropout and uniform_ give bit-identical values on both devices, randn and
// normal_ agree to the last bit except in rare double-rounding cases of libm vs CUDA's math (at
// most a float ulp here). Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tc/cuda.h"
#include "tc/ops.h"
#include "tc/random.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class RandomMatchesCpu : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

// Runs make(device) on each device after the same seed; counts elements that differ by more
// than `ulps` relative steps of the dtype (0: bit-identical).
void expect_same(const char* what, const std::function<Tensor(Device)>& make, double rel_tol) {
  manual_seed(1234);
  Tensor a = make(Device{});
  RngState after_cpu = get_rng_state();
  manual_seed(1234);
  Tensor b = make(kCuda);
  EXPECT_EQ(get_rng_state().offset, after_cpu.offset) << what << ": the stream advanced differently";
  ASSERT_TRUE(b.device().is_cuda()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  Tensor ad = a.to(DType::Float64).contiguous(), bd = Tensor::empty(b.sizes(), DType::Float64);
  bd.copy_from(b);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < ad.numel(); i++) {
    double x = ad.data<double>()[i], y = bd.data<double>()[i];
    bool ok = rel_tol == 0 ? (x == y || (std::isnan(x) && std::isnan(y))) : std::fabs(x - y) <= rel_tol * std::fabs(x);
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ad.numel() << " elements differ, first at " << first << " ("
                    << ad.data<double>()[std::max<int64_t>(first, 0)] << " vs " << bd.data<double>()[std::max<int64_t>(first, 0)] << ")";
}

TEST_F(RandomMatchesCpu, EveryRandomOpAndDtype) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    std::string n = dtype_name(dt);
    double normal_tol = dt == DType::Float64 ? 1e-15 : dt == DType::Float32 ? 1.2e-7 : 0;
    expect_same(("rand " + n).c_str(), [&](Device d) { return call1(Op::rand, {(int64_t)1001, (int64_t)7}, {{"dtype", Value(dt)}, {"device", Value(d)}}); }, 0);
    expect_same(("randn " + n).c_str(), [&](Device d) { return call1(Op::randn, {(int64_t)3001}, {{"dtype", Value(dt)}, {"device", Value(d)}}); }, normal_tol);
    expect_same(("uniform_ " + n).c_str(), [&](Device d) {
      Tensor t = Tensor::empty({513}, dt, d);
      return call1(Op::uniform_, {t, -2.5, 3.0});
    }, 0);
    expect_same(("normal_ " + n).c_str(), [&](Device d) {
      Tensor t = Tensor::empty({515}, dt, d);
      return call1(Op::normal_, {t, 1.0, 0.5});
    }, normal_tol * 2);
    expect_same(("bernoulli " + n).c_str(), [&](Device d) {
      Tensor t = Tensor::empty({999}, dt, d);
      return call1(Op::bernoulli, {t, 0.3});
    }, 0);
    expect_same(("dropout " + n).c_str(), [&](Device d) {
      Tensor x = call1(Op::ones, {(int64_t)37, (int64_t)41}, {{"dtype", Value(dt)}, {"device", Value(d)}});
      return call1(Op::dropout, {x, 0.25, true});
    }, 0);
  }
  for (DType dt : {DType::Int64, DType::Int32, DType::UInt8, DType::Float32}) {
    int64_t low = dt == DType::UInt8 ? 3 : -5;
    expect_same("randint", [&](Device d) { return call1(Op::randint, {low, (int64_t)200, IntList{77, 13}}, {{"dtype", Value(dt)}, {"device", Value(d)}}); }, 0);
  }
  expect_same("randint wide", [&](Device d) { return call1(Op::randint, {(int64_t)0, (int64_t)1 << 40, IntList{1000}}, {{"device", Value(d)}}); }, 0);
  expect_same("bernoulli tensor p", [&](Device d) {
    Tensor p = call1(Op::linspace, {0.0, 1.0, (int64_t)257}, {{"dtype", Value(DType::Float64)}, {"device", Value(d)}});
    return call1(Op::bernoulli, {p});
  }, 0);
}

TEST_F(RandomMatchesCpu, CreationOpsRunNatively) {
  int64_t fb = cuda::fallback_op_count();
  for (Op op : {Op::zeros, Op::ones, Op::rand, Op::randn})
    call1(op, {(int64_t)4, (int64_t)5}, {{"device", Value(kCuda)}});
  call1(Op::full, {IntList{3}, 2.5}, {{"device", Value(kCuda)}});
  call1(Op::eye, {(int64_t)4}, {{"device", Value(kCuda)}});
  EXPECT_EQ(cuda::fallback_op_count(), fb);
  Tensor e = call1(Op::eye, {(int64_t)3, (int64_t)4}, {{"device", Value(kCuda)}});
  Tensor h = Tensor::empty({3, 4}, DType::Float32);
  h.copy_from(e);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) EXPECT_EQ(h.data<float>()[i * 4 + j], i == j ? 1.0f : 0.0f);
}

}  // namespace
