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
