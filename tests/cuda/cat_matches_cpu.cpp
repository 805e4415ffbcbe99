// cat on CUDA (the one-launch path of stdlib/cuda/cat.cpp and the general path it leaves to)
// equals the CPU's cat exactly: every dim, more inputs than one launch takes (40), 1/2/4/8-byte
// dtypes, inputs at odd element offsets (narrower copy units), empty inputs among full ones,
// mixed dtypes and non-contiguous inputs (the general path). Skips without a GPU; without one, the
// kernels of every copy unit are still compiled (compile-only mode, NVRTC alone).
#include <gtest/gtest.h>

#include <random>

#include "tc/cuda.h"
#include "tc/ops.h"
#include "compare_to_cpu.h"

using namespace tc;
using tc::test::convert;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

Tensor iota(const Shape& s, double start) {
  Tensor t = Tensor::empty(s, DType::Float64);
  for (int64_t i = 0; i < t.numel(); i++) t.data<double>()[i] = start + (double)(i % 97);
  return t;
}

void expect_same(const Tensor& ref, const Tensor& got, const std::string& what) {
  ASSERT_EQ(ref.sizes(), got.sizes()) << what;
  ASSERT_EQ(ref.dtype(), got.dtype()) << what;
  Tensor a = convert(ref, DType::Float64, Device{}), b = convert(got, DType::Float64, Device{});
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); i++) bad += a.data<double>()[i] != b.data<double>()[i];
  EXPECT_EQ(bad, 0) << what;
}

class CatOnCuda : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

TEST_F(CatOnCuda, ContiguousInputsAnyDimDtypeAndCount) {
  std::mt19937 rng(11);
  for (DType dt : {DType::Float32, DType::Float16, DType::UInt8, DType::Int64}) {
    for (int64_t dim : {1, 2, 3, -1}) {
      for (int n : {1, 3, 40}) {
        TensorList cpu, gpu;
        for (int i = 0; i < n; i++) {
          Shape s{2, 3, 5};
          s[dim < 0 ? 2 : dim - 1] = 1 + (int64_t)(rng() % 4);
          Tensor t = convert(iota(s, i * 7.0), dt, Device{});
          cpu.push_back(t);
          gpu.push_back(convert(t, dt, kGpu));
        }
        std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + " n " + std::to_string(n);
        expect_same(call1(Op::cat, {cpu, dim}), call1(Op::cat, {gpu, dim}), what);
      }
    }
  }
}

TEST_F(CatOnCuda, OffsetsEmptiesMixedDtypesAndStrides) {
  Tensor base = convert(iota({64}, 0), DType::Float32, Device{});
  Tensor gbase = convert(base, DType::Float32, kGpu);
  // contiguous views at odd element offsets: 4-byte units instead of 16
  auto view = [](const Tensor& t, int64_t off, int64_t len) { return t.as_strided({1, len}, {len, 1}, off); };
  TensorList cpu{view(base, 1, 5), view(base, 7, 3), Tensor::empty({0}, DType::Float32), view(base, 13, 9)};
  TensorList gpu{view(gbase, 1, 5), view(gbase, 7, 3), Tensor::empty({0}, DType::Float32, kGpu), view(gbase, 13, 9)};
  expect_same(call1(Op::cat, {cpu, (int64_t)2}), call1(Op::cat, {gpu, (int64_t)2}), "offsets and an empty input");
  // mixed dtypes (promotion) and a transposed input: the general path
  auto gpu_of = [](const Tensor& t) { return convert(t, t.dtype(), kGpu); };
  auto transposed = [](const Tensor& t) { return call1(Op::transpose, {t, (int64_t)1, (int64_t)2}); };
  Tensor a = convert(iota({3, 4}, 1), DType::Float32, Device{}), b = convert(iota({3, 4}, 50), DType::Int64, Device{});
  Tensor c = convert(iota({4, 3}, 9), DType::Float32, Device{});
  expect_same(call1(Op::cat, {TensorList{a, b}, (int64_t)1}),
              call1(Op::cat, {TensorList{gpu_of(a), gpu_of(b)}, (int64_t)1}), "mixed dtypes");
  expect_same(call1(Op::cat, {TensorList{a, transposed(c)}, (int64_t)2}),
              call1(Op::cat, {TensorList{gpu_of(a), transposed(gpu_of(c))}, (int64_t)2}), "transposed input");
}

// Without a GPU: NVRTC compiles the kernel for every copy unit (16, 8, 4, 2, 1 bytes).
TEST(CatKernels, CompileForEveryUnit) {
  cuda::set_compile_only(true);
  try {
    for (auto [dt, len] : {std::pair{DType::Float32, 4}, {DType::Int64, 3}, {DType::Float32, 3}, {DType::Float16, 3},
                           {DType::UInt8, 3}}) {
      Tensor a = Tensor::empty({2, len}, dt, kGpu), b = Tensor::empty({2, len}, dt, kGpu);
      Tensor y = call1(Op::cat, {TensorList{a, b}, (int64_t)2});
      EXPECT_EQ(y.sizes(), (Shape{2, 2 * len}));
    }
  } catch (const Error& e) {
    cuda::set_compile_only(false);
    if (e.kind() == ErrorKind::DeviceError) GTEST_SKIP() << "NVRTC cannot be loaded: " << e.what();
    throw;
  }
  cuda::set_compile_only(false);
}

}  // namespace
