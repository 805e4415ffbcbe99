// cuBLASLt products with fused epilogues (tc/cuda_blaslt.h) equal eager's unfused composition
// (linear, then relu or gelu(approximate = "tanh")) for float32, float16 and bfloat16, with and
// without a bias, for row-major and transposed weights and odd sizes; eager linear with a bias
// runs through cuBLASLt; what cuBLASLt does not take (float64, a non-contiguous output) is
// refused with nothing written; timed algorithm choices are kept in the disk cache. Skips without
// a GPU, except the disk cache's entries.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/cuda_blaslt.h"
#include "tc/cuda_cache.h"
#include "tc/ops.h"

using namespace tc;

namespace {

class Blaslt : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
    if (!cuda::blaslt_available(&why)) GTEST_SKIP() << "cuBLASLt not available: " << why;
  }
};

Tensor gpu(const Tensor& t, DType dt) {
  return call1(Op::to_dtype, {call1(Op::to_device, {t, Device::parse("cuda")}), dt});
}
Tensor cpu64(const Tensor& t) { return call1(Op::to_dtype, {call1(Op::to_device, {t, Device{}}), DType::Float64}); }
Tensor randn(int64_t r, int64_t c) { return call1(Op::randn, {r, c}); }

// max |a - b| / (1 + max |b|)
double rel_err(const Tensor& a, const Tensor& b) {
  Tensor x = cpu64(a), y = cpu64(b);
  double d = call1(Op::amax, {call1(Op::abs, {call1(Op::sub, {x, y})})}).item_double();
  return d / (1 + call1(Op::amax, {call1(Op::abs, {y})}).item_double());
}

Tensor unfused(const Tensor& x, const Tensor& w, const Tensor& b, cuda::Act act) {
  Tensor y = call1(Op::linear, {x, w, b.defined() ? Value(b) : Value()});
  if (act == cuda::Act::Relu) return call1(Op::relu, {y});
  if (act == cuda::Act::GeluTanh) return call1(Op::gelu, {y}, {{"approximate", std::string("tanh")}});
  return y;
}

}  // namespace

TEST_F(Blaslt, EpiloguesEqualTheUnfusedOps) {
  set_float32_matmul_precision("highest");
  struct Case {
    int64_t m, k, n;
  };
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    const double tol = dt == DType::Float32 ? 1e-5 : dt == DType::Float16 ? 4e-3 : 3e-2;
    for (Case c : {Case{1, 1, 1}, Case{7, 13, 5}, Case{64, 128, 96}, Case{256, 768, 3072}}) {
      Tensor x = gpu(randn(c.m, c.k), dt), w = gpu(randn(c.n, c.k), dt), b = gpu(call1(Op::randn, {c.n}), dt);
      Tensor wT = call1(Op::contiguous, {call1(Op::t, {w})});  // (k, n) row-major: weight transposed
      for (cuda::Act act : {cuda::Act::None, cuda::Act::Relu, cuda::Act::GeluTanh}) {
        for (bool with_bias : {false, true}) {
          const Tensor bias = with_bias ? b : Tensor();
          Tensor want = unfused(x, w, bias, act);
          Tensor got = Tensor::empty({c.m, c.n}, dt, x.device());
          ASSERT_TRUE(cuda::linear_act(got, x, w, bias, act));
          EXPECT_LT(rel_err(got, want), tol) << dtype_name(dt) << " " << c.m << "x" << c.k << "x" << c.n << " act "
                                             << int(act) << " bias " << with_bias;
          Tensor got2 = Tensor::empty({c.m, c.n}, dt, x.device());
          ASSERT_TRUE(cuda::matmul_act(got2, x, wT, bias, act));  // the other weight layout
          EXPECT_LT(rel_err(got2, want), tol) << dtype_name(dt) << " matmul_act " << c.m << "x" << c.k << "x" << c.n;
        }
      }
    }
  }
}

TEST_F(Blaslt, EagerLinearWithABiasRunsThroughIt) {
  Tensor x = gpu(call1(Op::randn, {(int64_t)4, (int64_t)6, (int64_t)32}), DType::Float32);
  Tensor w = gpu(randn(16, 32), DType::Float32), b = gpu(call1(Op::randn, {(int64_t)16}), DType::Float32);
  const int64_t before = cuda::blaslt_calls();
  Tensor y = call1(Op::linear, {x, w, b});
  EXPECT_EQ(cuda::blaslt_calls(), before + 1);
  Tensor want = call1(Op::linear, {cpu64(x), cpu64(w), cpu64(b)});
  EXPECT_LT(rel_err(y, want), allow_tf32() ? 2e-3 : 1e-5);
}

TEST_F(Blaslt, RefusesWhatItDoesNotTake) {
  Tensor x = gpu(randn(8, 8), DType::Float64), w = gpu(randn(8, 8), DType::Float64);
  Tensor out = Tensor::empty({8, 8}, DType::Float64, x.device());
  EXPECT_FALSE(cuda::linear_act(out, x, w, Tensor(), cuda::Act::Relu));
  Tensor xf = gpu(randn(8, 8), DType::Float32), wf = gpu(randn(8, 8), DType::Float32);
  Tensor wide = Tensor::empty({8, 16}, DType::Float32, xf.device());
  Tensor strided = wide.as_strided({8, 8}, {1, 16}, 0);  // columns of unit stride: not rows
  EXPECT_FALSE(cuda::matmul_act(strided, xf, wf, Tensor(), cuda::Act::None));
}

// Rows of unit stride further apart than n (padded rows) and a residual read as C equal the
// unfused ops.
TEST_F(Blaslt, PaddedRowsAndResidualEqualTheUnfusedOps) {
  set_float32_matmul_precision("highest");
  Tensor x = gpu(randn(40, 24), DType::Float32), w = gpu(randn(13, 24), DType::Float32);
  Tensor b = gpu(call1(Op::randn, {(int64_t)13}), DType::Float32), r = gpu(randn(40, 13), DType::Float32);
  Tensor want = call1(Op::add, {unfused(x, w, b, cuda::Act::None), r});
  Tensor got = Tensor::empty({40, 13}, DType::Float32, x.device());
  ASSERT_TRUE(cuda::linear_act(got, x, w, b, cuda::Act::None, r));
  EXPECT_LT(rel_err(got, want), 1e-5);
  Tensor wide = Tensor::empty({40, 16}, DType::Float32, x.device());
  Tensor padded = wide.as_strided({40, 13}, {16, 1}, 0);
  Tensor wT = call1(Op::contiguous, {call1(Op::t, {w})});
  ASSERT_TRUE(cuda::matmul_act(padded, x, wT, b, cuda::Act::Relu));
  EXPECT_LT(rel_err(padded, unfused(x, w, b, cuda::Act::Relu)), 1e-5);
}

// Large products whose rows are not 16-byte multiples (GPT-2's LM head) run as two narrow
// products (the first columns up to each group's aligned start, the last columns past each
// group's multiple of 16) and one per group of rows with aligned starts (4 groups for an odd row
// length, 2 for n = 2 mod 4), also when out starts one float past an aligned address and the row
// count is not a multiple of the group count; every element equals the float64 product. Eager
// linear without a bias takes the same path.
TEST_F(Blaslt, UnalignedRowsRunAsRowGroups) {
  set_float32_matmul_precision("highest");
  const int64_t rows = 1027, k = 40;
  for (int64_t n : {4099, 4098})
    for (int64_t shift : {0, 1}) {
      Tensor x = randn(rows, k), w = randn(n, k);
      Tensor want = call1(Op::relu, {call1(Op::linear, {cpu64(x), cpu64(w)})});
      Tensor xg = gpu(x, DType::Float32), wg = gpu(w, DType::Float32);
      Tensor flat = Tensor::empty({rows * n + shift}, DType::Float32, xg.device());
      Tensor got = flat.as_strided({rows, n}, {n, 1}, shift);
      const int64_t before = cuda::blaslt_calls();
      ASSERT_TRUE(cuda::linear_act(got, xg, wg, Tensor(), cuda::Act::Relu));
      EXPECT_EQ(cuda::blaslt_calls() - before, 2 + (n % 2 ? 4 : 2)) << "n " << n << " shift " << shift;
      EXPECT_LT(rel_err(got, want), 1e-5) << "n " << n << " shift " << shift;
    }
  Tensor x = gpu(randn(rows, k), DType::Float32), w = gpu(randn(4099, k), DType::Float32);
  const int64_t before = cuda::blaslt_calls();
  Tensor y = call1(Op::linear, {x, w});
  EXPECT_EQ(cuda::blaslt_calls() - before, 6);
  EXPECT_LT(rel_err(y, call1(Op::linear, {cpu64(x), cpu64(w)})), 1e-5);
}

// A product's timed algorithm choice goes to the disk cache ($TC_CACHE_DIR/blaslt: one entry per
// problem), and the same product again (its plan cached in memory) writes nothing more.
TEST_F(Blaslt, TimedChoiceIsKeptInTheDiskCache) {
  char dir[] = "/tmp/tc_blaslt_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("TC_CACHE_DIR", dir, 1);
  auto entries = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(std::string(dir) + "/blaslt", ec)) n += e.path().extension() == ".entry";
    return n;
  };
  Tensor x = gpu(randn(384, 640), DType::Float32), w = gpu(randn(256, 640), DType::Float32);
  Tensor got = Tensor::empty({384, 256}, DType::Float32, x.device());
  ASSERT_TRUE(cuda::linear_act(got, x, w, Tensor(), cuda::Act::Relu));
  EXPECT_EQ(entries(), 1);
  ASSERT_TRUE(cuda::linear_act(got, x, w, Tensor(), cuda::Act::Relu));
  EXPECT_EQ(entries(), 1);
  EXPECT_LT(rel_err(got, unfused(x, w, Tensor(), cuda::Act::Relu)), 1e-2);
  unsetenv("TC_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// The disk cache's small entries (no GPU needed): what is written under a key reads back; another
// key, a damaged file or an unset TC_CACHE_DIR read as absent.
TEST(CacheEntries, RoundTripAndOthersReadAsAbsent) {
  char dir[] = "/tmp/tc_entries_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("TC_CACHE_DIR", dir, 1);
  cuda::write_cache_entry("blaslt", "problem a", std::string("\0choice\1", 8));
  EXPECT_EQ(cuda::read_cache_entry("blaslt", "problem a"), std::string("\0choice\1", 8));
  EXPECT_EQ(cuda::read_cache_entry("blaslt", "problem b"), "");
  EXPECT_EQ(cuda::read_cache_entry("other", "problem a"), "");
  for (const auto& e : std::filesystem::directory_iterator(std::string(dir) + "/blaslt")) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('x');
  }
  EXPECT_EQ(cuda::read_cache_entry("blaslt", "problem a"), "") << "a damaged entry";
  cuda::write_cache_entry("blaslt", "problem a", "again");
  EXPECT_EQ(cuda::read_cache_entry("blaslt", "problem a"), "again");
  unsetenv("TC_CACHE_DIR");
  EXPECT_EQ(cuda::read_cache_entry("blaslt", "problem a"), "");
  std::filesystem::remove_all(dir);
}
