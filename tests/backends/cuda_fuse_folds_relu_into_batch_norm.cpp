// The CUDA backend's library calls for a training step's BatchNorm + ReLU (cuda_fuse.h), on graphs
// built on the CPU (the rewrite reads shapes and dtypes only): batch_norm with batch statistics ->
// relu becomes the one-kernel call, and relu's derivative -> _batch_norm_backward the backward
// call that reads relu's result; a normalization with another reader, a running statistic read by
// another node and a broadcast gradient are left alone. Each call's eager composition (what it
// runs off CUDA, or where the kernel declines) equals the unfused ops. The kernels themselves:
// tests/lua/test_autograd_cuda.lua on the GPU.
#include <gtest/gtest.h>

#include "../../backends/cuda/cuda_fuse.h"
#include "../../backends/cuda/cuda_library_calls.h"
#include "lower_graphs.h"

using namespace tc;
using tc::testing::GraphBuilder;
using tc::testing::randn;

namespace {

// The names of the graph's External nodes, in order.
std::vector<std::string> calls(const capture::Graph& g) {
  std::vector<std::string> names;
  for (const capture::Node& n : g.nodes)
    if (n.kind == capture::NodeKind::External) names.push_back(n.ext->name);
  return names;
}

struct Norm {
  Tensor x, w, b, rm, rv;
};
Norm norm_inputs(GraphBuilder& gb, Shape shape) {
  const int64_t C = shape[1];
  return {gb.in(randn(shape)), gb.in(randn({C})), gb.in(randn({C})), gb.in(randn({C})),
          gb.in(call1(Op::add, {call1(Op::rand, {IntList{C}}), 0.5}))};
}

TEST(CudaFuseNormRelu, TrainingBatchNormThenReluIsOneCall) {
  GraphBuilder gb;
  Norm n = norm_inputs(gb, {4, 3, 5, 5});
  Tensor y = gb.op(Op::batch_norm, {n.x, n.w, n.b, n.rm, n.rv, true, 0.1, 1e-5});
  gb.out(gb.op(Op::relu, {y}));
  int fused = 0;
  capture::Graph f = backends::cuda::fuse_library_epilogues(gb.g, &fused);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(calls(f), std::vector<std::string>{backends::cuda::norm_relu_call()->name});
}

TEST(CudaFuseNormRelu, NormalizationWithAnotherReaderOrStatisticReadElsewhereStays) {
  {
    GraphBuilder gb;  // the normalization is also an output
    Norm n = norm_inputs(gb, {4, 3, 5, 5});
    Tensor y = gb.op(Op::batch_norm, {n.x, n.w, n.b, n.rm, n.rv, true, 0.1, 1e-5});
    gb.out(gb.op(Op::relu, {y}));
    gb.out(y);
    int fused = 0;
    backends::cuda::fuse_library_epilogues(gb.g, &fused);
    EXPECT_EQ(fused, 0) << "a normalization read twice was folded into its relu";
  }
  {
    GraphBuilder gb;  // the running mean is read after the update
    Norm n = norm_inputs(gb, {4, 3, 5, 5});
    Tensor y = gb.op(Op::batch_norm, {n.x, n.w, n.b, n.rm, n.rv, true, 0.1, 1e-5});
    gb.out(gb.op(Op::relu, {y}));
    gb.out(gb.op(Op::mul, {n.rm, 2.0}));
    int fused = 0;
    backends::cuda::fuse_library_epilogues(gb.g, &fused);
    EXPECT_EQ(fused, 0) << "a call moved past a reader of the running mean it updates";
  }
}

TEST(CudaFuseNormRelu, ReluDerivativeIntoBatchNormBackwardIsOneCall) {
  for (bool broadcast : {false, true}) {
    GraphBuilder gb;
    Norm n = norm_inputs(gb, {4, 3, 5, 5});
    Tensor g = gb.in(randn(broadcast ? Shape{1, 3, 5, 5} : Shape{4, 3, 5, 5}));
    Tensor yr = gb.in(randn({4, 3, 5, 5}));
    Tensor masked = gb.op(Op::mul, {g, gb.op(Op::gt, {yr, int64_t(0)})});
    Stack grads = gb.ops(Op::_batch_norm_backward, {masked, n.x, n.w, n.rm, n.rv, true, 1e-5});
    for (const Value& v : grads) gb.out(v.tensor());
    int fused = 0;
    capture::Graph f = backends::cuda::fuse_library_epilogues(gb.g, &fused);
    if (broadcast) {
      EXPECT_EQ(fused, 0) << "a broadcast gradient was folded into the backward call";
      continue;
    }
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(calls(f), std::vector<std::string>{backends::cuda::relu_norm_backward_call()->name});
  }
}

// Off CUDA the calls run the eager ops: equal to the unfused composition (outputs, the running
// statistics' update, the three gradients).
TEST(CudaFuseNormRelu, CallsOffCudaEqualTheUnfusedOps) {
  const Shape s{4, 3, 5, 5};
  Tensor x = randn(s), w = randn({3}), b = randn({3}), g = randn(s);
  Tensor rm1 = randn({3}), rv1 = call1(Op::add, {call1(Op::rand, {IntList{3}}), 0.5});
  Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
  Tensor got = backends::cuda::norm_relu_call()->call({x, w, b, rm1, rv1, true, 0.1, 1e-5, Value()})[0];
  Tensor want = call1(Op::relu, {call1(Op::batch_norm, {x, w, b, rm2, rv2, true, 0.1, 1e-5})});
  EXPECT_LE(tc::testing::closeness(got, want, 1e-6, 1e-6), 1);
  EXPECT_LE(tc::testing::closeness(rm1, rm2, 1e-6, 1e-6), 1);
  EXPECT_LE(tc::testing::closeness(rv1, rv2, 1e-6, 1e-6), 1);
  std::vector<Tensor> gr = backends::cuda::relu_norm_backward_call()->call({g, want, x, w, rm1, rv1, true, 1e-5});
  Tensor masked = call1(Op::mul, {g, call1(Op::gt, {want, int64_t(0)})});
  Stack wr = call(Op::_batch_norm_backward, bind(Op::_batch_norm_backward, {masked, x, w, rm1, rv1, true, 1e-5}, {}));
  ASSERT_EQ(gr.size(), 3u);
  for (int k = 0; k < 3; k++) EXPECT_LE(tc::testing::closeness(gr[k], wr[k].tensor(), 1e-6, 1e-6), 1) << "gradient " << k;
}

}  // namespace
