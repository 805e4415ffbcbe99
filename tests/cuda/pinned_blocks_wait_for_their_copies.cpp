// Pinned host blocks (stdlib/cuda/pinned.cpp) on a GPU: a block whose storage is dropped while a
// non_blocking copy from it is still queued is not handed out again until the copy ran (a new
// pin_memory of that size gets another block, and the copy reads the old values); once the copies
// completed, the block is reused; a blocking copy from pinned memory has completed when it
// returns. Skips without a usable GPU.
#include <gtest/gtest.h>

#include "long_gpu_work.h"
#include "tc/cuda.h"
#include "tc/ops.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class PinnedBlocks : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

Tensor full(double v) { return call1(Op::full, {IntList{1 << 16}, v}); }
double sum(const Tensor& t) { return call1(Op::sum, {t}).item_double(); }

TEST_F(PinnedBlocks, ADroppedBlockWaitsForItsQueuedCopy) {
  cuda::synchronize();
  test::long_gpu_work();  // the copy below queues behind tens of ms of work
  Tensor y;
  void* first = nullptr;
  {
    Tensor p = cuda::pin_memory(full(3));
    ASSERT_TRUE(cuda::is_pinned(p));
    first = p.data_ptr();
    cuda::NonBlocking scope;
    y = call1(Op::to_device, {p, Value(kCuda)});
  }  // p's storage goes while the copy is queued
  Tensor q = cuda::pin_memory(full(-1));
  EXPECT_NE(q.data_ptr(), first) << "a block with a pending copy was handed out again";
  EXPECT_EQ(sum(y), 3.0 * (1 << 16));
  cuda::synchronize();
  q = Tensor();
  Tensor r = cuda::pin_memory(full(5));  // both blocks are free now: one of them is reused
  Tensor s = cuda::pin_memory(full(6));
  EXPECT_TRUE(r.data_ptr() == first || s.data_ptr() == first) << "the settled block was not reused";
}

TEST_F(PinnedBlocks, ABlockingCopyHasRunWhenItReturns) {
  Tensor p = cuda::pin_memory(full(7));
  test::long_gpu_work();
  Tensor y = call1(Op::to_device, {p, Value(kCuda)});
  call1(Op::fill_, {p, -1.0});
  EXPECT_EQ(sum(y), 7.0 * (1 << 16));
}

}  // namespace
