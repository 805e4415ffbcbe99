// mode = "reduce-overhead" without a GPU: which graphs CUDA graphs apply to (every tensor on one
// CUDA device; not with random ops or Lua calls, which get a perf hint), CPU graphs running
// unchanged under the mode, and tc.config.cudagraph_max_sizes reaching the backend's options.
// (The GPU side, replays against plain launches, is cuda_graphs_replay_matches_plain.cpp.)
#include <gtest/gtest.h>

#include "cuda/cuda_graphs.h"
#include "graph_node.h"
#include "infra_fake_backend.h"
#include "partitioned.h"
#include "tc/capture.h"
#include "tc/vm/runtime.h"

using namespace tc;
using backends::testing::node;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

capture::Graph two_op_graph(Device d, Op second = Op::relu) {
  capture::Graph g;
  capture::Ref x = g.add_input("x", "arg[1]", Tensor::fake({4, 3}, {3, 1}, DType::Float32, d));
  capture::Ref s = node(g, Op::sin, {x})[0];
  g.outputs.push_back(node(g, second, {s})[0]);
  return g;
}

}  // namespace

TEST(CudaGraphsMode, AppliesOnlyToGraphsWhoseTensorsAreOnOneGpu) {
  EXPECT_TRUE(backends::on_one_gpu(two_op_graph(kGpu)));
  EXPECT_FALSE(backends::on_one_gpu(two_op_graph(Device{})));
  capture::Graph mixed;  // a GPU input and a CPU input
  capture::Ref a = mixed.add_input("a", "arg[1]", Tensor::fake({2}, {1}, DType::Float32, kGpu));
  capture::Ref b = mixed.add_input("b", "arg[2]", Tensor::fake({2}, {1}, DType::Float32, Device{}));
  mixed.outputs.push_back(a);
  mixed.outputs.push_back(b);
  EXPECT_FALSE(backends::on_one_gpu(mixed));
  EXPECT_FALSE(backends::on_one_gpu(capture::Graph{}));  // no inputs: nothing says where it runs
}

// The "tc" backend runs a graph whose tensors are on several devices on eager; a perf hint names
// the first tensor on another device (a compiled training backward ran on eager unseen this way).
TEST(CudaGraphsMode, AGraphOnSeveralDevicesRunsOnEagerWithAHintNamingTheTensor) {
  capture::Graph mixed;
  capture::Ref a = mixed.add_input("a", "arg[1]", Tensor::fake({2}, {1}, DType::Float32, kGpu));
  capture::Ref b = mixed.add_input("b", "arg[2]", Tensor::fake({2}, {1}, DType::Float32, Device{}));
  mixed.outputs.push_back(a);
  mixed.outputs.push_back(b);
  backends::Compiled c = backends::compile_graph(mixed, "tc", capture::CompileOptions{});
  std::string hints;
  for (const std::string& h : c.report.perf_hints) hints += h + "\n";
  EXPECT_NE(hints.find("runs on eager: its tensors are not on one device (%b (arg[2]) on cpu, %a on cuda:0)"),
            std::string::npos)
      << hints;
}

// A 0-dim CPU tensor as a constant argument (what a compiled backward holds where a derivative
// formula did arithmetic on numbers: capture/training.cpp folds it) keeps a graph on its GPU; as a
// node's output (neg(1), what sub's formula once made) it takes the graph off it, and the "tc"
// backend's hint names it.
TEST(CudaGraphsMode, AConstantCpuScalarKeepsAGraphOnItsGpuANodeMakingOneDoesNot) {
  const Tensor minus_one = call1(Op::neg, {Value(int64_t(1))});
  ASSERT_TRUE(minus_one.device().is_cpu());
  ASSERT_EQ(minus_one.dim(), 0);
  capture::Graph folded;
  capture::Ref x = folded.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  folded.outputs.push_back(node(folded, Op::mul, {x, Value(minus_one)})[0]);
  EXPECT_TRUE(backends::on_one_gpu(folded));

  capture::Graph with_node;
  capture::Ref y = with_node.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  capture::Ref neg = node(with_node, Op::neg, {Value(int64_t(1))})[0];
  with_node.outputs.push_back(node(with_node, Op::mul, {y, neg})[0]);
  EXPECT_FALSE(backends::on_one_gpu(with_node));
  backends::Compiled c = backends::compile_graph(with_node, "tc", capture::CompileOptions{});
  std::string hints;
  for (const std::string& h : c.report.perf_hints) hints += h + "\n";
  EXPECT_NE(hints.find("not on one device (%neg (neg) on cpu, %x on cuda:0)"), std::string::npos) << hints;
}

TEST(CudaGraphsMode, RandomOpsAreRefusedWithAPerfHintDropoutInEvalIsNot) {
  capture::Graph g;
  capture::Ref x = g.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  capture::Ref d = node(g, Op::dropout, {x, Value(0.5), Value(true)})[0];
  g.outputs.push_back(d);
  EXPECT_NE(backends::cuda_graphs_refusal(g).find("random"), std::string::npos);
  capture::CompileOptions o;
  o.mode = "reduce-overhead";
  backends::Compiled c = backends::with_cuda_graphs({}, g, o);
  ASSERT_EQ(c.report.perf_hints.size(), 1u);
  EXPECT_NE(c.report.perf_hints[0].find("runs without CUDA graphs"), std::string::npos) << c.report.perf_hints[0];

  capture::Graph eval;
  capture::Ref y = eval.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  eval.outputs.push_back(node(eval, Op::dropout, {y, Value(0.5), Value(false)})[0]);
  EXPECT_EQ(backends::cuda_graphs_refusal(eval), "");
}

TEST(CudaGraphsMode, CpuGraphsRunUnchanged) {
  capture::Graph g = two_op_graph(Device{});
  capture::CompileOptions o;
  o.mode = "reduce-overhead";
  bool called = false;
  backends::Compiled c;
  c.run = [&](capture::GraphInputs) {
    called = true;
    return std::vector<Tensor>{};
  };
  backends::Compiled w = backends::with_cuda_graphs(c, g, o);
  EXPECT_TRUE(w.report.perf_hints.empty());
  w.run({});
  EXPECT_TRUE(called);
}

TEST(CudaGraphsMode, ReduceOverheadOnCpuEqualsEagerForEveryBackendAndTheLimitReachesTheBackend) {
  backends::testing::FakeBackend fake({Op::sin, Op::add, Op::mul});
  vm::Runtime rt("test");
  capture::GraphCompiler gc = backends::graph_compiler();
  capture::GraphCompiler with_fake = gc;
  with_fake.compile = [&](const capture::Graph& g, const std::string& name, const capture::CompileOptions& o) {
    if (name == "fake") return backends::compile_partitioned(fake, backends::find("eager"), g, o);
    return gc.compile(g, name, o);
  };
  with_fake.backends.emplace_back("fake", fake.option_names());
  capture::install(rt.state(), with_fake);
  rt.run_string(R"(
    local tc = require "tc"
    tc.config.cudagraph_max_sizes = 3
    local function f(x, w) return tc.sin(x) * 2 + (x:matmul(w)):relu() end
    local x, w = tc.randn(5, 5), tc.randn(5, 5)
    for _, b in ipairs({"tc", "eager", "inductor", "cuda", "fake"}) do
      -- without a GPU the cuda backend is refused at tc.compile (a DeviceError), not run silently
      if b == "cuda" and not tc.cuda.is_available() then
        local ok, err = pcall(tc.compile, f, {backend = b, mode = "reduce-overhead"})
        assert(not ok and err.kind == "DeviceError", "cuda backend without a GPU: " .. tostring(err))
        goto next
      end
      local cf = tc.compile(f, {backend = b, mode = "reduce-overhead"})
      for i = 1, 3 do
        x:add_(0.5)
        local got, want = cf(x, w), f(x, w)
        assert((got - want):abs():max():item() < 1e-5, b .. " call " .. i)
      end
      ::next::
    end
  )");
  ASSERT_FALSE(fake.options.empty());
  EXPECT_EQ(fake.options[0].mode, "reduce-overhead");
  EXPECT_EQ(fake.options[0].cudagraph_max_sizes, 3);
}
