// The CUDA runtime on a GPU: copies both ways (strided, converting, broadcasting), the caching
// allocator (reuse, statistics, free-all-and-retry, out-of-memory with figures after which the
// process keeps working), a device-side error that leaves the runtime usable, random numbers
// equal to the CPU stream. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/ops.h"
#include "tc/random.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class CudaRuntime : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

Tensor arange_f(int64_t n, DType dt = DType::Float32) {
  Tensor t = Tensor::empty({n}, DType::Float64);
  for (int64_t i = 0; i < n; i++) t.data<double>()[i] = (double)i - n / 2;
  return t.to(dt);
}

Tensor to_cpu(const Tensor& t) {
  Tensor h = Tensor::empty(t.sizes(), t.dtype());
  h.copy_from(t);
  return h;
}

double max_diff(const Tensor& a, const Tensor& b) {
  Tensor x = to_cpu(a).to(DType::Float64).contiguous(), y = to_cpu(b).to(DType::Float64).contiguous();
  EXPECT_EQ(x.sizes(), y.sizes());
  double m = 0;
  for (int64_t i = 0; i < x.numel(); i++) {
    double p = x.data<double>()[i], q = y.data<double>()[i];
    if (std::isnan(p) && std::isnan(q)) continue;
    m = std::max(m, std::fabs(p - q));
    if (std::isnan(p) != std::isnan(q)) m = INFINITY;
  }
  return m;
}

TEST_F(CudaRuntime, CopiesBothWaysWithStridesDtypesAndBroadcast) {
  Tensor h = arange_f(24).as_strided({4, 6}, {6, 1}, 0);
  Tensor d = Tensor::empty({4, 6}, DType::Float32, kCuda);
  d.copy_from(h);
  EXPECT_EQ(max_diff(d, h), 0);
  // transposed (non-contiguous) device source -> host
  Tensor dt = d.as_strided({6, 4}, {1, 6}, 0);
  Tensor ht = h.as_strided({6, 4}, {1, 6}, 0);
  EXPECT_EQ(max_diff(dt, ht), 0);
  // converting copies on the device and across
  Tensor d64 = Tensor::empty({6, 4}, DType::Float64, kCuda);
  d64.copy_from(dt);
  EXPECT_EQ(max_diff(d64, ht), 0);
  Tensor d16 = Tensor::empty({6, 4}, DType::Float16, kCuda);
  d16.copy_from(ht);
  EXPECT_EQ(max_diff(d16, ht.to(DType::Float16)), 0);
  Tensor di = Tensor::empty({6, 4}, DType::Int32, kCuda);
  di.copy_from(dt);
  EXPECT_EQ(max_diff(di, ht.to(DType::Int32)), 0);
  // broadcast source into a strided device destination
  Tensor row = arange_f(6);
  Tensor big = Tensor::empty({6, 8}, DType::Float32, kCuda);
  Tensor view = big.as_strided({4, 6}, {1, 8}, 0);  // columns 0..3 of the first 6 rows, transposed
  view.copy_from(row.as_strided({4, 6}, {0, 1}, 0));
  Tensor want = row.as_strided({4, 6}, {0, 1}, 0).contiguous();
  EXPECT_EQ(max_diff(view, want), 0);
  // device -> device between dtypes and a large contiguous block (vector path)
  Tensor x = call1(Op::randn, {1 << 20}, {{"device", Value(kCuda)}});
  Tensor y = call1(Op::to_dtype, {x, Value(DType::BFloat16)});
  Tensor yh = to_cpu(x).to(DType::BFloat16);
  EXPECT_EQ(max_diff(y, yh), 0);
}

TEST_F(CudaRuntime, RandomMatchesTheCpuStream) {
  manual_seed(123);
  Tensor c = call1(Op::randn, {1000});
  manual_seed(123);
  Tensor g = call1(Op::randn, {1000}, {{"device", Value(kCuda)}});
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(max_diff(c, g), 0);
  manual_seed(7);
  Tensor c2 = call1(Op::rand, {333}, {{"dtype", Value(DType::Float64)}});
  manual_seed(7);
  Tensor g2 = call1(Op::rand, {333}, {{"dtype", Value(DType::Float64)}, {"device", Value(kCuda)}});
  EXPECT_EQ(max_diff(c2, g2), 0);
}

TEST_F(CudaRuntime, AllocatorReusesBlocksAndCountsBytes) {
  cuda::synchronize();
  int64_t base = cuda::memory_allocated();
  {
    Tensor a = Tensor::empty({1000}, DType::Float32, kCuda);  // 4000 B -> 4096 B class
    EXPECT_EQ(cuda::memory_allocated() - base, 4096);
    EXPECT_GE(cuda::max_memory_allocated(), cuda::memory_allocated());
  }
  EXPECT_EQ(cuda::memory_allocated(), base);
  int64_t reserved = cuda::memory_reserved();
  { Tensor b = Tensor::empty({1000}, DType::Float32, kCuda); }  // reuses the cached block
  EXPECT_EQ(cuda::memory_reserved(), reserved);
  cuda::reset_peak_memory_stats();
  EXPECT_EQ(cuda::max_memory_allocated(), cuda::memory_allocated());
}

TEST_F(CudaRuntime, OutOfMemoryIsAnErrorAndTheRuntimeKeepsWorking) {
  int64_t free_b, total_b;
  cuda::mem_get_info(&free_b, &total_b);
  // 1. Cached blocks are released and the allocation retried: fill ~70% with blocks of one class,
  // free them (they stay cached), then ask for ~60% in a different class.
  {
    std::vector<Tensor> blocks;
    int64_t blk = free_b / 10;
    for (int i = 0; i < 7; i++) blocks.push_back(Tensor::empty({blk}, DType::UInt8, kCuda));
  }
  EXPECT_GT(cuda::memory_reserved(), free_b / 2);
  {
    Tensor big = Tensor::empty({free_b / 10 * 6 + 12345}, DType::UInt8, kCuda);
    EXPECT_TRUE(big.defined());
  }
  // 2. Past the card: OutOfMemoryError with the figures.
  try {
    Tensor t = Tensor::empty({total_b * 2}, DType::UInt8, kCuda);
    ADD_FAILURE() << "allocating twice the card succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemoryError) << e.what();
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
    printf("OOM message: %s\n", e.what());
  }
  // 3. Still usable.
  Tensor x = call1(Op::ones, {1024}, {{"device", Value(kCuda)}});
  Tensor s = call1(Op::add, {x, x});
  EXPECT_EQ(call1(Op::sum, {s}).item_double(), 2048.0);
}

TEST_F(CudaRuntime, DeviceSideErrorLeavesTheRuntimeUsable) {
  // Integer division by zero is detected inside the kernel (device error word) and raised.
  Tensor a = Tensor::empty({8}, DType::Int64, kCuda), b = Tensor::empty({8}, DType::Int64, kCuda);
  cuda::synchronize();
  Tensor ha = Tensor::empty({8}, DType::Int64), hb = Tensor::empty({8}, DType::Int64);
  for (int i = 0; i < 8; i++) {
    ha.data<int64_t>()[i] = 10 + i;
    hb.data<int64_t>()[i] = i == 5 ? 0 : 3;
  }
  a.copy_from(ha);
  b.copy_from(hb);
  try {
    call1(Op::div, {a, b}, {{"rounding_mode", Value("floor")}});
    ADD_FAILURE() << "division by zero was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ValueError);
    EXPECT_NE(std::string(e.what()).find("ZeroDivision"), std::string::npos);
  }
  hb.data<int64_t>()[5] = 2;
  b.copy_from(hb);
  Tensor q = call1(Op::div, {a, b}, {{"rounding_mode", Value("floor")}});
  Tensor hq = to_cpu(q);
  EXPECT_EQ(hq.data<int64_t>()[5], 7);
  EXPECT_EQ(hq.data<int64_t>()[0], 3);
  // An out-of-range index is an IndexError, not a crash.
  Tensor idx = Tensor::empty({2}, DType::Int64);
  idx.data<int64_t>()[0] = 1;
  idx.data<int64_t>()[1] = 99;
  Tensor di = Tensor::empty({2}, DType::Int64, kCuda);
  di.copy_from(idx);
  EXPECT_THROW(call1(Op::index_select, {a, 1, di}), Error);
  EXPECT_EQ(call1(Op::sum, {call1(Op::add, {a, a})}).item_int(), 2 * (10 * 8 + 28));
}

TEST_F(CudaRuntime, MatmulPrecisionSetting) {
  EXPECT_EQ(float32_matmul_precision(), "highest");
  EXPECT_THROW(set_float32_matmul_precision("fast"), Error);
  Tensor a = call1(Op::randn, {64, 64}, {{"device", Value(kCuda)}});
  Tensor b = call1(Op::randn, {64, 64}, {{"device", Value(kCuda)}});
  Tensor c = call1(Op::mm, {a, b});
  Tensor hc = call1(Op::mm, {to_cpu(a), to_cpu(b)});
  EXPECT_LT(max_diff(c, hc), 1e-3);
  set_float32_matmul_precision("high");
  Tensor c2 = call1(Op::mm, {a, b});
  EXPECT_LT(max_diff(c2, hc), 0.1);  // TF32: ~1e-3 relative
  set_float32_matmul_precision("highest");
}

}  // namespace
