// Streams and events on a GPU: work split over two streams (our kernels, copies both ways, cuBLAS,
// convolutions) equals the CPU; an event pair times a kernel; a consumer stream that waits on a
// producer's event (or stream) sees the producer's result; the current stream is per thread; and
// without a GPU every stream and event call is a DeviceError. Skips the GPU parts without one.
#include <gtest/gtest.h>

#include <thread>

#include "compare_to_cpu.h"
#include "long_gpu_work.h"
#include "tc/cuda.h"
#include "tc/ops.h"
#include "tc/random.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class CudaStreams : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

Tensor to_cpu(const Tensor& t) { return test::convert(t, t.dtype(), Device{}); }
Tensor to_gpu(const Tensor& t) { return test::convert(t, t.dtype(), kCuda); }
double err(const Tensor& ref, const Tensor& got) {
  return test::max_rel_err(test::convert(ref, DType::Float64, Device{}), got);
}

TEST_F(CudaStreams, WorkSplitOverTwoStreamsEqualsTheCpu) {
  manual_seed(3);
  Tensor a = call1(Op::randn, {300, 200}), b = call1(Op::randn, {200, 100});
  Tensor img = call1(Op::randn, {2, 3, 16, 16}), w = call1(Op::randn, {4, 3, 3, 3});
  cuda::Stream s1 = cuda::Stream::create(), s2 = cuda::Stream::create();
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, cuda::default_stream());
  Tensor y1, y2, h1, h2;
  {
    cuda::StreamGuard g(s1);
    EXPECT_EQ(cuda::current_stream(), s1);
    y1 = call1(Op::relu, {call1(Op::mm, {to_gpu(a), to_gpu(b)})});  // copies, cuBLAS, a kernel
    h1 = to_cpu(y1);                                                 // device -> host on s1
  }
  {
    cuda::StreamGuard g(s2);
    y2 = call1(Op::conv2d, {to_gpu(img), to_gpu(w)});  // cuDNN or im2col + cuBLAS
    y2 = call1(Op::sum, {y2, IntList{1}});
    h2 = to_cpu(y2);
  }
  EXPECT_EQ(cuda::current_stream(), cuda::default_stream());
  EXPECT_LT(err(call1(Op::relu, {call1(Op::mm, {a, b})}), h1), 1e-4);
  EXPECT_LT(err(call1(Op::sum, {call1(Op::conv2d, {img, w}), IntList{1}}), h2), 1e-4);
  // The default stream reads the side streams' results after waiting for them.
  cuda::current_stream().wait_stream(s1);
  cuda::current_stream().wait_stream(s2);
  EXPECT_EQ(err(call1(Op::add, {h1, 1.0}), call1(Op::add, {y1, 1.0})), 0);
  cuda::synchronize();
  EXPECT_TRUE(s1.query());
  EXPECT_TRUE(s2.query());
}

TEST_F(CudaStreams, AnEventPairTimesAKernel) {
  cuda::Event start(true), stop(true);
  EXPECT_TRUE(start.query());  // never recorded: complete
  start.record(cuda::current_stream());
  Tensor x = test::long_gpu_work();
  stop.record(cuda::current_stream());
  float ms = start.elapsed_time(stop);
  EXPECT_GT(ms, 0.0f);
  EXPECT_TRUE(stop.query());
  printf("12 products of 4096^2 float32: %.2f ms\n", ms);
  cuda::Event plain;
  plain.record(cuda::current_stream());
  EXPECT_THROW(plain.elapsed_time(stop), Error);  // no timing
}

// The producer writes `dst` (made and zeroed on the default stream beforehand) at the end of a
// long chain of products; the consumer on another stream doubles it. With the wait it reads the
// producer's values; without it, it would read zeros or a partial copy.
void produce_then_consume(bool use_event, bool wait, double* seen_min) {
  const int64_t n = 1 << 22;
  Tensor dst = call1(Op::zeros, {n}, {{"device", Value(kCuda)}});
  Tensor ones = call1(Op::ones, {n}, {{"device", Value(kCuda)}});
  cuda::synchronize();
  cuda::Stream producer = cuda::Stream::create(), consumer = cuda::Stream::create();
  cuda::Event done;
  Tensor keep, out;
  {
    cuda::StreamGuard g(producer);
    keep = test::long_gpu_work();
    dst.copy_from(call1(Op::add, {ones, call1(Op::mul, {call1(Op::sum, {keep}), 0.0})}));  // 1 after the chain
    done.record(producer);
  }
  {
    cuda::StreamGuard g(consumer);
    if (wait) use_event ? consumer.wait_event(done) : consumer.wait_stream(producer);
    out = call1(Op::mul, {dst, 2.0});
    *seen_min = call1(Op::amin, {out}).item_double();  // read on the consumer stream
  }
  cuda::synchronize();
}

TEST_F(CudaStreams, WaitEventOrdersTheConsumerAfterTheProducer) {
  double seen = 0;
  produce_then_consume(true, true, &seen);
  EXPECT_EQ(seen, 2.0);
  produce_then_consume(false, true, &seen);  // wait_stream
  EXPECT_EQ(seen, 2.0);
  produce_then_consume(true, false, &seen);  // no wait: the race the waits prevent (not asserted)
  printf("without a wait the consumer saw min %g (2 = the producer had finished)\n", seen);
}

TEST_F(CudaStreams, TheCurrentStreamIsPerThread) {
  cuda::Stream s = cuda::Stream::create();
  cuda::StreamGuard g(s);
  cuda::Stream other_thread;
  std::thread t([&] { other_thread = cuda::current_stream(); });
  t.join();
  EXPECT_EQ(other_thread, cuda::default_stream());
  EXPECT_EQ(cuda::current_stream(), s);
}

TEST(NoGpuStreams, EveryStreamAndEventCallIsADeviceError) {
  std::string why;
  if (cuda::is_available(&why)) GTEST_SKIP() << "a GPU is available";
  auto device_error = [](auto f) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
    }
  };
  device_error([] { cuda::Stream::create(); });
  device_error([] { cuda::current_stream(); });
  device_error([] { cuda::default_stream(); });
  device_error([] { cuda::set_current_stream(cuda::Stream{}); });
  device_error([] { cuda::Stream{}.synchronize(); });
  device_error([] { cuda::Event(true).record(cuda::Stream{}); });
  device_error([] { cuda::record_stream(call1(Op::ones, {2}), cuda::Stream{}); });
  device_error([] { cuda::synchronize(); });
  cuda::Event never;  // an event never recorded needs no GPU
  EXPECT_TRUE(never.query());
}

}  // namespace
