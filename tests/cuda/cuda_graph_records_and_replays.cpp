// tc::cuda::CudaGraph (tc/cuda_graph.h): a recorded function replays with the current contents
// of its inputs and equals running it; memory it allocated comes from the graph's pool and is
// freed with the graph; host data uploaded inside is recorded with its bytes; a function that
// reads device values on the host or synchronizes is not recorded (capture abandoned, naming why)
// and leaves the stream usable; device-side index checks recorded in a graph are reported by
// device_error() after the replay; memory handed out of the pool is moved out before the next
// replay only while referenced. Skips without a GPU.
#include <gtest/gtest.h>

#include "tc/cuda.h"
#include "tc/cuda_graph.h"
#include "tc/ops.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class CudaGraphTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

Tensor on_gpu(const Tensor& t) { return call1(Op::to_device, {t, Device::parse("cuda")}); }
Tensor on_cpu(const Tensor& t) { return call1(Op::to_device, {t, Device{}}); }

double max_diff(const Tensor& a, const Tensor& b) {
  return call1(Op::amax, {call1(Op::abs, {call1(Op::sub, {on_cpu(a), on_cpu(b)})})}).item_double();
}

Tensor work(const Tensor& x, const Tensor& w) {
  Tensor y = call1(Op::relu, {call1(Op::matmul, {x, w})});
  return call1(Op::add, {call1(Op::softmax, {y, (int64_t)-1}), call1(Op::sin, {x})});
}

}  // namespace

TEST_F(CudaGraphTest, ReplayUsesTheInputsCurrentContentsAndEqualsPlainRuns) {
  Tensor x = on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64}));
  Tensor w = on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64}));
  work(x, w);  // warm-up: kernels compiled, cuBLAS handle made
  const int64_t before = cuda::cuda_graph_stats().captures;
  const int64_t base = cuda::memory_allocated();
  Tensor out;
  {
    cuda::CudaGraph g;
    std::string why;
    ASSERT_TRUE(g.capture(0, [&] { out = work(x, w); }, &why)) << why;
    EXPECT_GT(g.nodes(), 3);
    EXPECT_EQ(cuda::cuda_graph_stats().captures, before + 1);
    for (int i = 0; i < 3; i++) {
      x.copy_from(on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64})));  // same address, new values
      g.replay();
      EXPECT_LT(max_diff(out, work(x, w)), 1e-5) << "replay " << i;
    }
    out = Tensor();
  }
  cuda::synchronize();
  EXPECT_EQ(cuda::memory_allocated(), base);  // the graph's pool went with it
}

TEST_F(CudaGraphTest, HandedOutMemoryIsMovedOutBeforeAReplayOnlyWhileReferenced) {
  Tensor x = on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64}));
  Tensor w = on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64}));
  work(x, w);
  cuda::CudaGraph g;
  Tensor out;
  std::string why;
  ASSERT_TRUE(g.capture(0, [&] { out = work(x, w); }, &why)) << why;
  auto hand = [&] {  // this replay's result over the pool's memory, as cuda_graphs.cpp hands it out
    auto impl = std::make_shared<TensorImpl>(*out.impl());
    const size_t n = out.storage()->nbytes();
    impl->storage = g.hand_out(out.storage(), 0, n);
    EXPECT_EQ(impl->storage, g.hand_out(out.storage(), 0, n));  // one handed-out storage per replay
    return Tensor(impl);
  };
  g.replay();
  Tensor kept = hand();
  EXPECT_EQ(kept.data_ptr(), out.data_ptr());  // no copy
  const Tensor want = work(x, w);
  const cuda::CudaGraphStats s0 = cuda::cuda_graph_stats();
  x.copy_from(on_gpu(call1(Op::randn, {(int64_t)64, (int64_t)64})));
  g.replay();  // kept is still referenced: moved out first
  EXPECT_EQ(cuda::cuda_graph_stats().outputs_moved, s0.outputs_moved + 1);
  EXPECT_NE(kept.data_ptr(), out.data_ptr());
  EXPECT_LT(max_diff(kept, want), 1e-6);  // the earlier values, not the new replay's
  EXPECT_LT(max_diff(out, work(x, w)), 1e-5);
  hand();  // dropped at once: the next replay copies nothing
  g.replay();
  EXPECT_EQ(cuda::cuda_graph_stats().outputs_moved, s0.outputs_moved + 1);
  out = Tensor();
}

TEST_F(CudaGraphTest, AHostReadAbandonsTheCaptureAndTheStreamStaysUsable) {
  Tensor x = on_gpu(call1(Op::randn, {(int64_t)1000}));
  call1(Op::sum, {x}).item_double();
  const int64_t abandoned = cuda::cuda_graph_stats().abandoned;
  cuda::CudaGraph g;
  std::string why;
  EXPECT_FALSE(g.capture(0, [&] { call1(Op::mul, {x, call1(Op::sum, {x}).item_double()}); }, &why));
  EXPECT_NE(why.find("to the host"), std::string::npos) << why;
  EXPECT_FALSE(g.ready());
  EXPECT_EQ(cuda::cuda_graph_stats().abandoned, abandoned + 1);
  // the stream works as before
  Tensor y = call1(Op::mul, {x, 2.0});
  EXPECT_LT(max_diff(y, call1(Op::add, {x, x})), 1e-6);

  cuda::CudaGraph h;
  EXPECT_FALSE(h.capture(0, [&] { cuda::synchronize(); }, &why));
  EXPECT_NE(why.find("synchronize"), std::string::npos) << why;
  EXPECT_LT(max_diff(call1(Op::sin, {x}), on_gpu(call1(Op::sin, {on_cpu(x)}))), 1e-5);
}

TEST_F(CudaGraphTest, HostDataUploadedInsideIsRecordedWithItsBytes) {
  Tensor x = on_gpu(call1(Op::randn, {(int64_t)256}));
  Tensor host = call1(Op::randn, {(int64_t)256});
  Tensor out;
  cuda::CudaGraph g;
  std::string why;
  ASSERT_TRUE(g.capture(0, [&] {
    Tensor scratch = call1(Op::mul, {host, 1.0});  // a host temporary, gone after the capture
    out = call1(Op::add, {x, on_gpu(scratch)});
  }, &why)) << why;
  for (int i = 0; i < 2; i++) {
    x.copy_from(on_gpu(call1(Op::randn, {(int64_t)256})));
    g.replay();
    EXPECT_LT(max_diff(out, call1(Op::add, {x, on_gpu(host)})), 1e-6) << "replay " << i;
  }
}

TEST_F(CudaGraphTest, ErrorsOfTheFunctionItselfAreRaised) {
  Tensor x = on_gpu(call1(Op::randn, {(int64_t)4, (int64_t)3}));
  cuda::CudaGraph g;
  std::string why;
  EXPECT_THROW(g.capture(0, [&] { call1(Op::matmul, {x, x}); }, &why), Error);  // 4x3 @ 4x3
  EXPECT_LT(max_diff(call1(Op::neg, {x}), call1(Op::mul, {x, -1.0})), 1e-6);
}

TEST_F(CudaGraphTest, IndexChecksOnTheDeviceAreReportedAfterTheReplay) {
  Tensor table = on_gpu(call1(Op::randn, {(int64_t)10, (int64_t)4}));
  Tensor ids = on_gpu(call1(Op::arange, {(int64_t)1, (int64_t)6}));  // 1-based ids 1..5
  call1(Op::index_select, {table, (int64_t)1, ids});
  cuda::CudaGraph g;
  std::string why;
  Tensor out;
  ASSERT_TRUE(g.capture(0, [&] { out = call1(Op::index_select, {table, (int64_t)1, ids}); }, &why)) << why;
  EXPECT_TRUE(g.device_checks());
  g.replay();
  EXPECT_FALSE(g.device_error());
  EXPECT_LT(max_diff(out, call1(Op::index_select, {table, (int64_t)1, ids})), 0.0 + 1e-7);
  ids.copy_from(on_gpu(call1(Op::arange, {(int64_t)20, (int64_t)25})));  // out of range
  g.replay();
  EXPECT_TRUE(g.device_error());
  EXPECT_FALSE(g.device_error());  // read and cleared
}
