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

// x, y: float32 [5, 1031]: y - tanh(x * sigmoid(exp(-relu(x * y + x)) + y)). Rows of 1031: the
// long body's run loop is interleaved (8 x 16 floats per iteration), then its remainder runs.
capture::Graph chain() {
  capture::Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({5, 1031}, {1031, 1}, DType::Float32));
  Ref y = g.add_input("y", "arg[2]", Tensor::fake({5, 1031}, {1031, 1}, DType::Float32));
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
  Compiled run = find("cpu").compile(g, {});
  capture::CompiledGraph ref = find("eager").compile(g, {}).run;
  Stats s = stats();
  EXPECT_EQ(s.graphs_compiled, 1);
  EXPECT_EQ(s.graphs_fallback, 0);
  EXPECT_GE(s.kernels_compiled + s.memory_hits, 1);
  std::vector<Tensor> ins = random_inputs(g, 1);
  std::vector<Tensor> got = run.run(capture::borrow(ins)), want = ref(capture::borrow(ins));
  ASSERT_EQ(got.size(), 1u);
  expect_close(got[0], want[0]);
  // The report explain shows: one fused kernel, its times.
  EXPECT_EQ(run.report.kernels, 1);
  EXPECT_EQ(run.report.distinct_kernels, 1);
  EXPECT_EQ(run.report.fallback_nodes, 0);
  EXPECT_GT(run.report.lower_ms, 0);
  EXPECT_GT(run.report.compile_ms + run.report.codegen_ms, 0);
}

TEST(CpuBackendGraphs, TcPicksTheCpuBackendForCpuGraphs) {
  disk_cache_off();
  reset_stats();
  capture::Graph g = chain();
  Compiled run = compile_graph(g, "tc");
  EXPECT_EQ(stats().graphs_compiled, 1);
  EXPECT_EQ(stats().graphs_fallback, 0);
  std::vector<Tensor> ins = random_inputs(g, 2);
  expect_close(run.run(capture::borrow(ins))[0], find("eager").compile(g, {}).run(capture::borrow(ins))[0]);
}

// x -> external G.double_it -> relu.
capture::Graph with_external() {
  capture::Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32));
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = "G.double_it";
  fn->call = [](const Stack& a) { return std::vector<Tensor>{call1(Op::add, {a[0], a[0]})}; };
  Ref d = g.add_external(fn, {NodeArg::ref(x)}, {g.fake(x)}, 3)[0];
  g.outputs = {op(g, Op::relu, {d})};
  return g;
}

// An external function (tc.compiler.allow_in_graph) runs as a step of the compiled graph, counted
// as a fallback node; the relu after it is generated.
TEST(CpuBackendGraphs, ExternalFunctionsRunInsideTheCompiledGraph) {
  disk_cache_off();
  reset_stats();
  Compiled c = compile_graph(with_external(), "cpu");
  EXPECT_EQ(c.report.fallback_nodes, 1);
  EXPECT_EQ(c.report.kernels, 1);
  EXPECT_EQ(stats().graphs_compiled, 1);
  EXPECT_EQ(stats().graphs_fallback, 0);
  Tensor in = Tensor::empty({4}, DType::Float32);
  for (int i = 0; i < 4; i++) in.data<float>()[i] = (float)i - 1.5f;
  Tensor out = c.run(capture::borrow({in}))[0];
  for (int i = 0; i < 4; i++) EXPECT_EQ(out.data<float>()[i], std::max(0.0f, 2 * in.data<float>()[i]));
}

// Five inputs with a dynamic dim each, of five sizes: more size symbols than lowering takes (4;
// dims of one size would share a symbol), so the graph is refused. Output i is x_i * x_i.
capture::Graph five_dynamic_dims() {
  capture::Graph g;
  for (int i = 0; i < 5; i++) {
    Ref x = g.add_input("x" + std::to_string(i), "arg[" + std::to_string(i + 1) + "]",
                        Tensor::fake({3 + i, 2}, {2, 1}, DType::Float32));
    g.dynamic_dims.push_back({i, 0});
    g.outputs.push_back(op(g, Op::mul, {x, x}));
  }
  return g;
}

// A graph the backend cannot lower runs on eager after one warning per reason (and says so in
// the report); under fullgraph it raises instead.
TEST(CpuBackendGraphs, UnloweredGraphFallsBackToEagerWithOneWarning) {
  disk_cache_off();
  reset_stats();
  capture::Graph g = five_dynamic_dims();
  testing::internal::CaptureStderr();
  Compiled run = find("cpu").compile(g, {});
  Compiled again = find("cpu").compile(g, {});
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(stats().graphs_fallback, 2);
  size_t first = err.find("running a graph on the eager backend");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("running a graph on the eager backend", first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_EQ(run.report.fallback_nodes, g.num_ops());
  ASSERT_EQ(run.report.perf_hints.size(), 1u);
  EXPECT_NE(run.report.perf_hints[0].find("runs on eager"), std::string::npos) << run.report.perf_hints[0];
  std::vector<Tensor> ins;
  for (int i = 0; i < 5; i++) ins.push_back(call1(Op::full, {IntList{3 + i, 2}, double(i + 1)}));
  std::vector<Tensor> outs = run.run(capture::borrow(ins));
  ASSERT_EQ(outs.size(), 5u);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 2 * (3 + i); j++) EXPECT_EQ(outs[i].data<float>()[j], float((i + 1) * (i + 1)));
  CompileOptions full;
  full.fullgraph = true;
  try {
    find("cpu").compile(g, full);
    ADD_FAILURE() << "fullgraph=true compiled a graph the cpu backend cannot lower";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::CompileError);
  }
}

}  // namespace
}  // namespace tc::backends::cpu::test
