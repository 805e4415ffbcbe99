// 0-dim CPU inputs of a GPU graph (a Lua number as a graph input, an optimizer's lr) go to the
// GPU instead of sending the graph to eager (backends/cuda/host_scalars.h): which inputs qualify,
// the graph compiled with them on the device, their values copied at every call (into a fixed
// device scalar under CUDA graphs, so a replay reads each call's value), and, without a GPU
// (compile-only mode, NVRTC alone), the "cuda" backend generating such graphs instead of running
// them on eager. Values on a real GPU: tests/capture/number_inputs_of_gpu_graphs_take_each_calls_value.lua.
#include <gtest/gtest.h>

#include "cuda/cuda_graphs.h"
#include "cuda/host_scalars.h"
#include "graph_node.h"
#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/vm/runtime.h"

using namespace tc;
using backends::testing::node;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

Tensor host_number() {
  Tensor k = Tensor::fake({}, {}, DType::Float64, Device{});
  k.impl()->wrapped_number = true;
  return k;
}

// x * k + 1 with x on the GPU and k a Lua number (a 0-dim CPU float64 input).
capture::Graph scaled(capture::Ref* k_out = nullptr) {
  capture::Graph g;
  capture::Ref x = g.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  capture::Ref k = g.add_input("k", "arg[2]", host_number());
  capture::Ref y = node(g, Op::mul, {x, k})[0];
  g.outputs.push_back(node(g, Op::add, {y, Value(int64_t(1))})[0]);
  if (k_out) *k_out = k;
  return g;
}

bool nvrtc_ok() {
  cuda::set_compile_only(true);
  bool ok = true;
  try {
    call1(Op::neg, {Tensor::empty({4}, DType::Float32, kGpu)});
  } catch (const Error& e) {
    ok = e.kind() != ErrorKind::DeviceError;
  }
  cuda::set_compile_only(false);
  return ok;
}

}  // namespace

TEST(HostScalarInputs, AGpuGraphsHostNumberMovesToItsDeviceKeepingItsKind) {
  capture::Graph g = scaled();
  EXPECT_FALSE(backends::on_one_gpu(g));
  backends::HostScalars hs = backends::host_scalar_inputs(g);
  ASSERT_EQ(hs.inputs, std::vector<int>{1});
  EXPECT_EQ(hs.device, kGpu);
  const Tensor& k = hs.graph.nodes[size_t(hs.graph.inputs[1])].fakes[0].tensor();
  EXPECT_EQ(k.device(), kGpu);
  EXPECT_EQ(k.dtype(), DType::Float64);
  EXPECT_TRUE(k.is_wrapped_number());
  EXPECT_TRUE(backends::on_one_gpu(hs.graph));
  // a 0-dim CPU tensor that is no wrapped number moves too (PyTorch takes it as a scalar)
  capture::Graph t;
  capture::Ref x = t.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, kGpu));
  capture::Ref s = t.add_input("s", "arg[2]", Tensor::fake({}, {}, DType::Float32, Device{}));
  t.outputs.push_back(node(t, Op::sub, {x, s})[0]);
  EXPECT_EQ(backends::host_scalar_inputs(t).inputs, std::vector<int>{1});
}

TEST(HostScalarInputs, ScalarsTheGraphWritesReturnsOrComputesOnStayOnTheHost) {
  EXPECT_TRUE(backends::host_scalar_inputs(scaled()).graph.nodes.size() > 0);
  {  // returned: the caller would get a device tensor where eager gives the host one
    capture::Ref k;
    capture::Graph g = scaled(&k);
    g.outputs.push_back(k);
    EXPECT_TRUE(backends::host_scalar_inputs(g).inputs.empty());
  }
  {  // written in place
    capture::Ref k;
    capture::Graph g = scaled(&k);
    node(g, Op::fill_, {k, Value(2.0)});
    EXPECT_TRUE(backends::host_scalar_inputs(g).inputs.empty());
  }
  {  // an op of the scalar alone makes a CPU tensor: the graph is not on one GPU
    capture::Ref k;
    capture::Graph g = scaled(&k);
    capture::Ref x = capture::Ref{g.inputs[0], 0, -1};
    g.outputs.push_back(node(g, Op::mul, {x, node(g, Op::neg, {k})[0]})[0]);
    EXPECT_TRUE(backends::host_scalar_inputs(g).inputs.empty());
  }
  {  // a CPU graph, and a graph on two GPUs
    capture::Graph cpu;
    capture::Ref x = cpu.add_input("x", "arg[1]", Tensor::fake({4}, {1}, DType::Float32, Device{}));
    capture::Ref k = cpu.add_input("k", "arg[2]", host_number());
    cpu.outputs.push_back(node(cpu, Op::mul, {x, k})[0]);
    EXPECT_TRUE(backends::host_scalar_inputs(cpu).inputs.empty());
    capture::Graph two = scaled();
    two.add_input("z", "arg[3]", Tensor::fake({4}, {1}, DType::Float32, Device{DeviceType::CUDA, 1}));
    EXPECT_TRUE(backends::host_scalar_inputs(two).inputs.empty());
  }
}

// Each call's value reaches the compiled graph on the device: under CUDA graphs in one device
// scalar (the same address at every call, which a recorded graph reads), else in a new one.
TEST(HostScalarInputs, EachCallsValueReachesTheGraphOnTheDevice) {
  if (!nvrtc_ok()) GTEST_SKIP() << "no CUDA runtime library to make device tensors with";
  cuda::set_compile_only(true);  // "cuda" tensors in host memory: the copies run, nothing launches
  backends::HostScalars hs = backends::host_scalar_inputs(scaled());
  for (bool fixed : {true, false}) {
    std::vector<double> seen;
    std::vector<const void*> where;
    backends::Compiled inner;
    inner.run = [&](capture::GraphInputs in) {
      EXPECT_EQ(in[1]->device(), kGpu);
      EXPECT_TRUE(in[1]->is_wrapped_number());
      seen.push_back(in[1]->item_double());
      where.push_back(in[1]->data_ptr());
      return std::vector<Tensor>{*in[0]};
    };
    backends::Compiled c = backends::with_host_scalars(inner, hs, fixed);
    Tensor x = Tensor::empty({4}, DType::Float32, kGpu);
    for (double v : {2.5, -4.0, 0.125}) {
      Tensor k = Tensor::scalar(v, DType::Float64, true);
      const Tensor* args[] = {&x, &k};
      c.run(args);
    }
    EXPECT_EQ(seen, (std::vector<double>{2.5, -4.0, 0.125})) << (fixed ? "fixed" : "fresh");
    if (fixed) EXPECT_TRUE(where[0] == where[1] && where[1] == where[2]) << "the device scalar moved";
  }
  cuda::set_compile_only(false);
}

// Through tc.compile: a number that changes between calls becomes a graph input (after one
// recompile), and the "cuda" backend generates the graph for the GPU (kernels, nothing on eager);
// before, the 0-dim CPU input sent the whole graph to eager. (CUDA graphs need a GPU: the capture
// test above runs reduce-overhead there.)
TEST(HostScalarInputs, TheCudaBackendGeneratesGraphsWithNumberInputs) {
  if (!nvrtc_ok()) GTEST_SKIP() << "NVRTC cannot be loaded";
  cuda::set_compile_only(true);
  setenv("TC_CACHE_DIR", "", 1);
  vm::Runtime rt("host_scalars");
  capture::install(rt.state(), backends::graph_compiler());
  vm::Results r = rt.run_string(R"LUA(
    local tc = require "tc"
    local f = tc.compile(function(x, k) return tc.relu(x * k + 1) end, {backend = "cuda"})
    local x = tc.randn({64}, {device = "cuda"})
    f(x, 1.5)
    local first = tc.compiler.stats().kernels  -- k a constant of the graph
    for k = 2, 4 do f(x, k + 0.5) end
    local s = tc.compiler.stats()
    return s.kernels - first, s.fallback_nodes, s.recompiles
  )LUA", "=host_scalars");
  EXPECT_GT(r[0].integer(), 0) << "the graph taking k as an input generated no kernel (it ran on eager)";
  EXPECT_EQ(r[1].integer(), 0) << "nodes ran on eager";
  EXPECT_EQ(r[2].integer(), 1) << "recompiles";
  cuda::set_compile_only(false);
}
