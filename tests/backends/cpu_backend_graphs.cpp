// Captured graphs through the registered "cpu" backend (lowering + generated kernels): a 10-op
// pointwise chain runs generated and equals eager; "tc" picks the cpu backend for CPU graphs; a
// graph lowering cannot handle (an external function) runs on eager with one warning, never a
// crash.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cpu_kernel_builder.h"
#include "tc/backends.h"
#include "tc/cpu_backend.h"

namespace tc::backends::cpu::test {
namespace {

using capture::NodeArg;
using capture::Ref;

Ref op(capture::Graph& g, Op o, std::vector<Ref> ins) {
  std::vector<NodeArg> args;
  Stack fakes;
  for (Ref r : ins) {
    args.push_back(NodeArg::ref(r));
    fakes.push_back(g.fake(r));
  }
  if (o == Op::add || o == Op::sub) {  // alpha=1
    args.push_back(NodeArg::constant_of(Value(int64_t(1))));
    fakes.push_back(Value(int64_t(1)));
  }
  return g.add_op(o, args, call(o, fakes), 10 + (int)g.nodes.size())[0];
}

// x, y: float32 [37, 129]: y - tanh(x * sigmoid(exp(-relu(x * y + x)) + y)).
capture::Graph chain() {
  capture::Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({37, 129}, {129, 1}, DType::Float32));
  Ref y = g.add_input("y", "arg[2]", Tensor::fake({37, 129}, {129, 1}, DType::Float32));
  Ref v = op(g, Op::mul, {x, y});
  v = op(g, Op::add, {v, x});
  v = op(g, Op::relu, {v});
  v = op(g, Op::neg, {v});
  v = op(g, Op::exp, {v});
  v = op(g, Op::add, {v, y});
  v = op(g, Op::sigmoid, {v});
  v = op(g, Op::mul, {x, v});
  v = op(g, Op::tanh, {v});
  v = op(g, Op::sub, {y, v});
  g.outputs = {v};
  return g;
}

std::vector<Tensor> random_inputs(const capture::Graph& g, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 2);
  std::vector<Tensor> ins;
  for (int i : g.inputs) {
    const Tensor& f = g.nodes[i].fakes[0].tensor();
    Tensor t = Tensor::empty(f.sizes(), f.dtype());
    for (int64_t j = 0; j < t.numel(); j++) t.data<float>()[j] = d(rng);
    ins.push_back(t);
  }
  return ins;
}

void expect_close(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.sizes(), b.sizes());
  Tensor ac = a.contiguous(), bc = b.contiguous();
  for (int64_t j = 0; j < a.numel(); j++)
    ASSERT_NEAR(ac.data<float>()[j], bc.data<float>()[j], 1e-6 * std::max(1.0f, std::abs(bc.data<float>()[j]))) << j;
}

TEST(CpuBackendGraphs, PointwiseChainRunsGeneratedAndEqualsEager) {
  disk_cache_off();
  reset_stats();
  capture::Graph g = chain();
  capture::CompiledGraph run = find("cpu").compile(g, {});
  capture::CompiledGraph ref = find("eager").compile(g, {});
  Stats s = stats();
  EXPECT_EQ(s.graphs_compiled, 1);
  EXPECT_EQ(s.graphs_fallback, 0);
  EXPECT_GE(s.kernels_compiled + s.memory_hits, 1);
  std::vector<Tensor> ins = random_inputs(g, 1);
  std::vector<Tensor> got = run(capture::borrow(ins)), want = ref(capture::borrow(ins));
  ASSERT_EQ(got.size(), 1u);
  expect_close(got[0], want[0]);
}

TEST(CpuBackendGraphs, TcPicksTheCpuBackendForCpuGraphs) {
  disk_cache_off();
  reset_stats();
  capture::Graph g = chain();
  capture::CompiledGraph run = compile_graph(g, "tc");
  EXPECT_EQ(stats().graphs_compiled, 1);
  EXPECT_EQ(stats().graphs_fallback, 0);
  std::vector<Tensor> ins = random_inputs(g, 2);
  expect_close(run(capture::borrow(ins))[0], find("eager").compile(g, {})(capture::borrow(ins))[0]);
}

TEST(CpuBackendGraphs, UnloweredGraphFallsBackToEagerWithOneWarning) {
  disk_cache_off();
  reset_stats();
  capture::Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32));
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = "G.double_it";
  fn->call = [](const Stack& a) { return std::vector<Tensor>{call1(Op::add, {a[0], a[0]})}; };
  Ref d = g.add_external(fn, {NodeArg::ref(x)}, {g.fake(x)}, 3)[0];
  g.outputs = {op(g, Op::relu, {d})};
  testing::internal::CaptureStderr();
  capture::CompiledGraph run = find("cpu").compile(g, {});
  capture::CompiledGraph again = find("cpu").compile(g, {});
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(stats().graphs_fallback, 2);
  size_t first = err.find("running a graph on the eager backend");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("running a graph on the eager backend", first + 1), std::string::npos) << "warned twice: " << err;
  Tensor in = Tensor::empty({4}, DType::Float32);
  for (int i = 0; i < 4; i++) in.data<float>()[i] = (float)i - 1.5f;
  Tensor out = run(capture::borrow({in}))[0];
  for (int i = 0; i < 4; i++) EXPECT_EQ(out.data<float>()[i], std::max(0.0f, 2 * in.data<float>()[i]));
}

}  // namespace
}  // namespace tc::backends::cpu::test
