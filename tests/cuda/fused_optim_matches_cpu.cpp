// The optimizer-step ops (_fused_sgd_ ... _fused_adagrad_) on CUDA equal the CPU kernel over 150
// parameters of mixed shapes (zero-size ones, one over a chunk, a non-contiguous one), every
// algorithm with its options on, three steps, in a few kernel launches (64 parameters per launch:
// 3 here, not one per parameter per op); the step count and the learning rate may be CUDA tensors. Without a GPU the
// kernels of every dtype are still compiled (compile-only mode, NVRTC alone).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tc/cuda.h"
#include "tc/ops.h"
#include "compare_to_cpu.h"

using namespace tc;
using tc::test::convert;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

struct Case {
  Op op;
  std::vector<std::pair<std::string, Value>> options;
  int states;  // state lists after params and grads
  bool step;   // takes a step count
};

std::vector<Case> cases() {
  return {
      {Op::_fused_sgd_, {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", true}}, 1, false},
      {Op::_fused_sgd_, {{"lr", 0.1}, {"momentum", 0.8}, {"dampening", 0.3}, {"maximize", true}}, 1, false},
      {Op::_fused_adam_, {{"lr", 0.01}, {"weight_decay", 0.1}, {"amsgrad", true}}, 3, true},
      {Op::_fused_adamw_, {{"lr", 0.01}, {"beta1", 0.8}, {"maximize", true}}, 3, true},
      {Op::_fused_rmsprop_, {{"lr", 0.01}, {"momentum", 0.5}, {"centered", true}, {"weight_decay", 0.1}}, 3, false},
      {Op::_fused_adagrad_, {{"lr", 0.1}, {"lr_decay", 0.05}, {"weight_decay", 0.1}}, 1, true},
  };
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int i = 0; i < 147; i++) out.push_back(i % 3 == 0 ? Shape{int64_t(1 + i % 7), 5} : Shape{int64_t(3 + i)});
  out.push_back({0});
  out.push_back({40000});  // more than one chunk
  out.push_back({6, 4});   // given transposed below: a non-contiguous parameter
  return out;
}

Tensor random(const Shape& s, std::mt19937& rng, double lo) {
  Tensor t = Tensor::empty(s, DType::Float64);
  std::uniform_real_distribution<double> u(lo, 1.0);
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = u(rng);
  return t;
}

// params, grads and the state lists of one case, on `dev` in `dt` (the same values on both devices)
std::vector<TensorList> make_lists(const Case& c, DType dt, Device dev) {
  std::mt19937 rng(7);
  std::vector<TensorList> lists(2 + c.states);
  for (const Shape& s : shapes()) {
    for (size_t l = 0; l < lists.size(); l++) {
      // states in [0.5, 1) (square averages stay positive), RMSprop's grad_avgs (list 4) small:
      // its centered average sqrt(square_avg - grad_avg^2) stays away from cancellation
      Tensor t = random(s, rng, l >= 2 ? 0.5 : -1.0);
      if (c.op == Op::_fused_rmsprop_ && l == 4) t = call1(Op::mul, {t, 0.1});
      t = convert(t, dt, dev);
      if (s == Shape{6, 4}) t = t.as_strided({4, 6}, {1, 4}, 0);
      lists[l].push_back(t);
    }
  }
  return lists;
}

Stack args(const Case& c, const std::vector<TensorList>& l, const Value& step) {
  Stack pos;
  for (const TensorList& t : l) pos.push_back(Value(t));
  if (c.step) pos.push_back(step);
  return bind(c.op, pos, c.options);
}

class FusedOptimOnCuda : public testing::Test {
 protected:
  void SetUp() override {
    gpu_ = cuda::is_available();
    if (!gpu_) {
      cuda::set_compile_only(true);
      try {
        call1(Op::neg, {Tensor::empty({4}, DType::Float32, kGpu)});
      } catch (const Error& e) {
        cuda::set_compile_only(false);
        if (e.kind() == ErrorKind::DeviceError) GTEST_SKIP() << "neither a GPU nor NVRTC";
      }
    }
  }
  void TearDown() override { cuda::set_compile_only(false); }
  bool gpu_ = false;
};

TEST_F(FusedOptimOnCuda, EveryAlgorithmEqualsTheCpuKernelInAFewLaunches) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Case& c : cases()) {
      std::string what = std::string(op_name(c.op)) + " " + dtype_name(dt);
      std::vector<TensorList> cpu = make_lists(c, dt, Device{}), gpu = make_lists(c, dt, kGpu);
      for (int step = 1; step <= 3; step++) {
        Stack ca = args(c, cpu, Value(int64_t(step))), ga = args(c, gpu, Value(int64_t(step)));
        if (c.op == Op::_fused_sgd_) ca.back() = ga.back() = Value(step == 1);  // first_step
        call(c.op, ca);
        int64_t before = cuda::launch_count();
        call(c.op, ga);
        int64_t launches = cuda::launch_count() - before;
        if (gpu_ && dt == DType::Float32 && step == 1) printf("%s: %lld launches\n", what.c_str(), (long long)launches);
        if (gpu_)  // 150 parameters: 3 launches, plus copies in and out of the non-contiguous one
          EXPECT_LE(launches, 3 + 2 * (2 + c.states)) << what;
      }
      if (!gpu_) continue;
      double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 1e-5 : 2e-2;
      for (size_t l = 0; l < cpu.size(); l++) {
        if (l == 1) continue;
        for (size_t i = 0; i < cpu[l].size(); i++) {
          Tensor a = convert(cpu[l][i], DType::Float64, Device{}), b = convert(gpu[l][i], DType::Float64, Device{});
          double worst = 0;
          int64_t at = 0;
          for (int64_t k = 0; k < a.numel(); k++) {
            double e = std::abs(a.data<double>()[k] - b.data<double>()[k]) / (1 + std::abs(a.data<double>()[k]));
            if (!(e <= worst)) worst = e, at = k;  // NaN counts
          }
          ASSERT_LE(worst, tol) << what << " list " << l << " tensor " << i << " element " << at << ": cpu "
                                << a.data<double>()[at] << " cuda " << b.data<double>()[at];
        }
      }
    }
  }
}

TEST_F(FusedOptimOnCuda, StepCountOnTheDeviceEqualsANumber) {
  if (!gpu_) GTEST_SKIP() << "needs a GPU";
  const Case c = cases()[2];  // Adam, amsgrad
  std::vector<TensorList> a = make_lists(c, DType::Float32, kGpu), b = make_lists(c, DType::Float32, kGpu);
  for (int step = 1; step <= 3; step++) {
    call(c.op, args(c, a, Value(int64_t(step))));
    call(c.op, args(c, b, Value(convert(Tensor::scalar(double(step), DType::Float32), DType::Float32, kGpu))));
  }
  for (size_t i = 0; i < a[0].size(); i++) {
    Tensor x = convert(a[0][i], DType::Float64, Device{}), y = convert(b[0][i], DType::Float64, Device{});
    for (int64_t k = 0; k < x.numel(); k++) ASSERT_NEAR(x.data<double>()[k], y.data<double>()[k], 1e-6) << i;
  }
}

// The learning rate as a 0-dim CUDA tensor (a compiled step's graph input, read by the kernel)
// gives the parameters a host number gives, for every algorithm, with the step count on the host
// or on the device, also when lr changes between steps (a scheduler).
TEST_F(FusedOptimOnCuda, LearningRateOnTheDeviceEqualsANumber) {
  if (!gpu_) GTEST_SKIP() << "needs a GPU";
  for (const Case c : cases()) {
    double lr = 0;
    for (auto& [k, v] : c.options)
      if (k == "lr") lr = v.to_double();
    for (bool step_on_device : {false, true}) {
      std::string what = std::string(op_name(c.op)) + (step_on_device ? ", step on the device" : "");
      std::vector<TensorList> a = make_lists(c, DType::Float32, kGpu), b = make_lists(c, DType::Float32, kGpu);
      for (int step = 1; step <= 3; step++) {
        const double lr_now = lr * (step == 3 ? 0.5 : 1.0);
        Stack x = args(c, a, Value(int64_t(step)));
        Value step_b = step_on_device ? Value(convert(Tensor::scalar(double(step), DType::Float64), DType::Float64, kGpu))
                                      : Value(int64_t(step));
        Stack y = args(c, b, step_b);
        const size_t lr_at = c.step ? 2 + c.states + 1 : 2 + c.states;
        x[lr_at] = Value(Tensor::scalar(lr_now, DType::Float64));
        y[lr_at] = Value(convert(Tensor::scalar(lr_now, DType::Float64), DType::Float64, kGpu));
        if (c.op == Op::_fused_sgd_) x.back() = y.back() = Value(step == 1);  // first_step
        call(c.op, x);
        call(c.op, y);
      }
      for (size_t l = 0; l < a.size(); l++) {
        if (l == 1) continue;
        for (size_t i = 0; i < a[l].size(); i++) {
          Tensor p = convert(a[l][i], DType::Float64, Device{}), q = convert(b[l][i], DType::Float64, Device{});
          for (int64_t k = 0; k < p.numel(); k++)
            ASSERT_NEAR(p.data<double>()[k], q.data<double>()[k], 1e-6) << what << " list " << l << " tensor " << i;
        }
      }
    }
  }
}

}  // namespace
