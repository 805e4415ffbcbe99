// The caching allocator's pools are per stream: a block freed on stream A is handed out again on A
// but never to an allocation on stream B; record_stream holds a freed block back until the other
// stream's work is done; out-of-memory still frees every cached block (of every stream, pending
// ones too) and retries. Compares device pointers. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <set>

#include "tc/cuda.h"
#include "long_gpu_work.h"
#include "tc/ops.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};
const int64_t kBytes = 3333333;  // a size class no other tensor of these tests uses

class CudaAllocator : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

Tensor block(int64_t n = kBytes) { return Tensor::empty({n}, DType::UInt8, kCuda); }

TEST_F(CudaAllocator, AFreedBlockIsReusedOnItsStreamOnly) {
  cuda::Stream a = cuda::Stream::create(), b = cuda::Stream::create();
  ASSERT_NE(a, b);
  int64_t base = cuda::memory_allocated();
  void *pa, *pb;
  {
    cuda::StreamGuard g(a);
    pa = block().data_ptr();
  }
  EXPECT_EQ(cuda::memory_allocated(), base);
  {
    cuda::StreamGuard g(b);
    Tensor t = block();
    pb = t.data_ptr();
    EXPECT_NE(pb, pa) << "a block freed on stream A was handed to stream B";
  }
  {
    cuda::StreamGuard g(a);
    EXPECT_EQ(block().data_ptr(), pa) << "stream A did not get its freed block back";
  }
  {
    cuda::StreamGuard g(b);
    EXPECT_EQ(block().data_ptr(), pb);
  }
}

TEST_F(CudaAllocator, WithoutRecordStreamTheBlockReturnsAtOnce) {
  cuda::StreamGuard ga(cuda::Stream::create());
  Tensor x = block();
  void* p = x.data_ptr();
  x = Tensor();
  EXPECT_EQ(block().data_ptr(), p);
}

TEST_F(CudaAllocator, RecordStreamDefersReuseUntilTheOtherStreamIsDone) {
  cuda::Stream a = cuda::Stream::create(), b = cuda::Stream::create();
  cuda::StreamGuard ga(a);
  Tensor x = call1(Op::zeros, {kBytes}, {{"dtype", Value(DType::UInt8)}, {"device", Value(kCuda)}});
  void* p1 = x.data_ptr();
  Tensor busy, y;
  {
    cuda::StreamGuard gb(b);
    b.wait_stream(a);
    y = call1(Op::add, {x, 1});  // b reads x, then gets a long chain of work queued
    busy = test::long_gpu_work();
    cuda::record_stream(x, b);
    cuda::record_stream(x, a);  // its own stream: no effect
  }
  // Freed on the host while b is busy: held back until b passes this point. (Nothing after the
  // chain may synchronize b: a copy from pageable host memory on b, for one, waits for b.)
  x = Tensor();
  EXPECT_FALSE(b.query()) << "the producer finished too soon for this test to mean anything";
  Tensor z = block();
  EXPECT_NE(z.data_ptr(), p1) << "a block still in use on another stream was handed out";
  void* p2 = z.data_ptr();
  z = Tensor();
  b.synchronize();
  Tensor u = block(), v = block();  // now both blocks are free on a
  EXPECT_EQ((std::set<void*>{u.data_ptr(), v.data_ptr()}), (std::set<void*>{p1, p2}));
  EXPECT_EQ(call1(Op::sum, {call1(Op::to_dtype, {y, Value(DType::Int64)})}).item_int(), kBytes);
}

TEST_F(CudaAllocator, OutOfMemoryFreesEveryStreamsCacheAndRetries) {
  int64_t free_b, total_b;
  cuda::synchronize();
  cuda::empty_cache();
  cuda::mem_get_info(&free_b, &total_b);
  cuda::Stream b = cuda::Stream::create(), c = cuda::Stream::create();
  {
    cuda::StreamGuard g(b);
    std::vector<Tensor> blocks;
    for (int i = 0; i < 7; i++) blocks.push_back(block(free_b / 10));
    cuda::record_stream(blocks[0], c);  // pending at its free until c's event is seen complete
  }
  EXPECT_GT(cuda::memory_reserved(), free_b / 2);
  {
    // On the default stream none of b's cached blocks may be reused: this needs the retry.
    Tensor big = block(free_b / 10 * 6 + 12345);
    EXPECT_TRUE(big.defined());
  }
  EXPECT_LT(cuda::memory_reserved(), free_b / 10 * 7);
  Tensor x = call1(Op::ones, {1024}, {{"device", Value(kCuda)}});
  EXPECT_EQ(call1(Op::sum, {call1(Op::add, {x, x})}).item_double(), 2048.0);
}

}  // namespace
