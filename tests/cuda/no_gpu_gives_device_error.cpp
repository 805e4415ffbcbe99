// Without a usable driver or GPU (simulated on any machine with TC_CUDA_DISABLE=1 before the
// first CUDA use), tc::cuda::is_available() is false with a reason and every use of a "cuda"
// device is a DeviceError naming it; CPU work is unaffected. Runs everywhere.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tc/cuda.h"
#include "tc/ops.h"

using namespace tc;

TEST(NoGpu, CudaUseIsADeviceErrorWithTheReason) {
  setenv("TC_CUDA_DISABLE", "1", 1);
  std::string why;
  EXPECT_FALSE(cuda::is_available(&why));
  EXPECT_NE(why.find("TC_CUDA_DISABLE"), std::string::npos) << why;
  EXPECT_EQ(cuda::device_count(), 0);
  const Device cuda_dev{DeviceType::CUDA, 0};
  try {
    Tensor::empty({4}, DType::Float32, cuda_dev);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::DeviceError);
    EXPECT_NE(std::string(e.what()).find("TC_CUDA_DISABLE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(call1(Op::zeros, {3}, {{"device", Value(cuda_dev)}}), Error);
  Tensor x = call1(Op::ones, {3});
  EXPECT_THROW(call1(Op::to_device, {x, Value(cuda_dev)}), Error);
  EXPECT_EQ(call1(Op::sum, {x}).item_double(), 3.0);  // the CPU keeps working
  EXPECT_EQ(cuda::memory_allocated(), 0);
}

// Pinned host memory needs the driver: pin_memory is a DeviceError naming the reason (also in
// compile-only mode, whose "cuda" tensors live in pageable memory), is_pinned is false, and a
// non_blocking copy to the CPU is a plain one.
TEST(NoGpu, PinMemoryIsADeviceErrorAndNothingIsPinned) {
  setenv("TC_CUDA_DISABLE", "1", 1);
  Tensor x = call1(Op::ones, {3});
  auto kind_and_message = [&](auto f, const char* part) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::DeviceError);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  kind_and_message([&] { cuda::pin_memory(x); }, "TC_CUDA_DISABLE");
  EXPECT_FALSE(cuda::is_pinned(x));
  cuda::set_compile_only(true);
  kind_and_message([&] { cuda::pin_memory(x); }, "compile-only");
  Tensor c = call1(Op::ones, {3}, {{"device", Value(Device{DeviceType::CUDA, 0})}});
  kind_and_message([&] { cuda::pin_memory(c); }, "only CPU tensors can be pinned");
  EXPECT_FALSE(cuda::is_pinned(c));
  cuda::set_compile_only(false);
  {
    cuda::NonBlocking scope;
    EXPECT_EQ(call1(Op::sum, {call1(Op::to_device, {x, Value(Device{})})}).item_double(), 3.0);
  }
}
