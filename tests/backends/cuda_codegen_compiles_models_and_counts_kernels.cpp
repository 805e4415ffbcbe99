// The cuda backend without a GPU (compile-only mode: "cuda" tensors in host memory, NVRTC
// compiles for sm_90, nothing launches): every model of scripts/models compiles through
// tc.compile(model, {backend = "cuda"}) with every generated program accepted by NVRTC (a
// codegen or NVRTC failure raises here instead of falling back to eager), and kernel counts: a
// 10-op pointwise chain is 1 kernel, softmax and layer_norm 1 each, the 64-layer seed model has the
// distinct kernels of one layer, a training BatchNorm + ReLU leaves no relu kernel (forward or
// backward); under mode = "max-autotune" the launch variants compile too and the
// choices round-trip through the disk cache. Skips only without NVRTC.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "../../backends/cuda/cuda_autotune.h"
#include "../../backends/cuda/cuda_backend.h"
#include "../../backends/cuda/cuda_tiny_rows.h"
#include "lower_graphs.h"
#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/vm/runtime.h"

using namespace tc;

namespace {

bool nvrtc_ok() {
  cuda::set_compile_only(true);
  bool ok = true;
  try {
    call1(Op::neg, {Tensor::empty({4}, DType::Float32, Device{DeviceType::CUDA, 0})});
  } catch (const Error& e) {
    ok = e.kind() != ErrorKind::DeviceError;
  }
  cuda::set_compile_only(false);
  return ok;
}

// The registry's compile_graph, with the backend told fullgraph: a graph the cuda backend cannot
// generate raises (CompileError) instead of running on eager. Graph breaks are capture's business
// and stay as the script asks.
capture::GraphCompiler strict_compiler() {
  capture::GraphCompiler c = backends::graph_compiler();
  c.compile = [](const capture::Graph& g, const std::string& backend, const capture::CompileOptions& o) {
    capture::CompileOptions strict = o;
    strict.fullgraph = true;
    return backends::compile_graph(g, backend, strict);
  };
  return c;
}

class CudaCodegen : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!nvrtc_ok()) GTEST_SKIP() << "NVRTC cannot be loaded";
    cuda::set_compile_only(true);
    setenv("TC_CACHE_DIR", "", 1);  // compile every program: the test is NVRTC's verdict
    capture::install(rt_.state(), strict_compiler());
  }
  void TearDown() override { cuda::set_compile_only(false); }
  vm::Runtime rt_{"cuda_codegen"};
};

const char* kModels = R"LUA(
local tc = require "tc"
local specs = dofile("tests/model_specs.lua")
return function(name)
  tc.compiler.reset()
  tc.set_default_device("cuda")
  tc.manual_seed(0)
  local s = specs[name]
  local model = s[1]()
  model:eval()
  local x = s[2]()
  local _ <close> = tc.no_grad()
  local f = tc.compile(model, {backend = "cuda"})
  local y = f(x)
  tc.set_default_device("cpu")
  return tc.compiler.stats(), tostring(y.device)
end
)LUA";

class CudaCodegenModels : public CudaCodegen, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaCodegenModels, EveryProgramCompiles) {
  vm::Ref run = rt_.run_string(kModels, "=models")[0];
  vm::Results r = run(GetParam());
  EXPECT_EQ(r[1].string(), "cuda:0");
  // my_module is relu(linear(x)): one cuBLASLt call with the bias and relu epilogue, nothing generated
  if (GetParam() != "my_module") EXPECT_GT(r[0]["kernels"].integer(), 0) << "no generated kernel";
  EXPECT_EQ(r[0]["fallback_nodes"].integer(), 0) << "a node ran on eager";
  printf("%s: %lld graphs, %lld kernel launches per call, %lld distinct kernels; lower %.1f ms, codegen %.1f ms, NVRTC "
         "%.1f ms\n",
         GetParam().c_str(), (long long)r[0]["backend_compiles"].integer(), (long long)r[0]["kernels"].integer(),
         (long long)r[0]["distinct_kernels"].integer(), r[0]["lower_ms"].number(), r[0]["codegen_ms"].number(),
         r[0]["compile_ms"].number());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaCodegenModels,
                         ::testing::Values("seed_64_layers", "my_module", "resnet18", "resnet50", "densenet121",
                                         "inception_v3", "gpt2"));

// (function source, argument shapes) -> stats of one compile and call on "cuda".
const char* kCount = R"LUA(
local tc = require "tc"
return function(src, ...)
  tc.compiler.reset()
  local args = {}
  for i, shape in ipairs({...}) do args[i] = tc.randn(shape, {device = "cuda"}) end
  local f = tc.compile(assert(load(src))(), {backend = "cuda", fullgraph = true})
  -- inference kernels: with grad on, a model's parameters make a training graph (its forward
  -- also returns the values its backward saves)
  tc.no_grad(f, table.unpack(args))
  return tc.compiler.stats()
end
)LUA";

vm::Ref shape(vm::Runtime& rt, const char* lua) { return rt.run_string(std::string("return ") + lua, "=shape")[0]; }

TEST_F(CudaCodegen, KernelCounts) {
  vm::Ref count = rt_.run_string(kCount, "=count")[0];
  auto kernels = [&](const char* src, std::vector<const char*> shapes) {
    std::vector<vm::Arg> args{vm::Arg(Value(std::string(src)))};
    for (const char* s : shapes) args.emplace_back(shape(rt_, s));
    vm::Results r = count.call(args);
    return std::make_pair(r[0]["kernels"].integer(), r[0]["distinct_kernels"].integer());
  };
  const char* chain = R"(local tc = require "tc"
    return function(x, y)
      local v = tc.relu(x * y + x)
      v = tc.sigmoid(tc.exp(-v) + y)
      return y - tc.tanh(x * v)
    end)";
  EXPECT_EQ(kernels(chain, {"{37, 129}", "{37, 129}"}).first, 1);
  EXPECT_EQ(kernels("local tc = require 'tc' return function(x) return tc.softmax(x, 2) end", {"{64, 1000}"}).first, 1);
  EXPECT_EQ(kernels("local tc = require 'tc' return function(x) return tc.log_softmax(x, 2) end", {"{64, 100000}"}).first, 1);
  EXPECT_EQ(kernels("local tc = require 'tc' return function(x) return tc.layer_norm(x, {768}) end", {"{32, 768}"}).first,
            1);
  // Library epilogues (cuda_fuse.h): linear + bias + gelu(tanh), and linear + bias + a residual,
  // are one cuBLASLt call each (no kernel); causal attention on float32 is one fused call.
  EXPECT_EQ(kernels(R"(local tc = require 'tc' local F = require('tc.nn').functional
    local w, b = tc.randn(96, 64, {device = 'cuda'}), tc.randn(96, {device = 'cuda'})
    local w2, b2 = tc.randn(64, 96, {device = 'cuda'}), tc.randn(64, {device = 'cuda'})
    return function(x, r) return r + F.linear(tc.gelu(F.linear(x, w, b), {approximate = 'tanh'}), w2, b2) end)",
                    {"{32, 64}", "{32, 64}"}).first, 0);
  EXPECT_EQ(kernels(R"(local tc = require 'tc' local F = require('tc.nn').functional
    return function(q, k, v) return F.scaled_dot_product_attention(q, k, v, {is_causal = true}) end)",
                    {"{2, 3, 40, 64}", "{2, 3, 40, 64}", "{2, 3, 40, 64}"}).first, 0);
  // ... and GPT-2's head merge after it (transpose, reshape: a copy kernel) is written by that call
  EXPECT_EQ(kernels(R"(local tc = require 'tc' local F = require('tc.nn').functional
    return function(q, k, v)
      return F.scaled_dot_product_attention(q, k, v, {is_causal = true}):transpose(2, 3):reshape(2, 40, 192)
    end)",
                    {"{2, 3, 40, 64}", "{2, 3, 40, 64}", "{2, 3, 40, 64}"}).first, 0);
  // cross_entropy: per-row logsumexp and the mean over rows in one kernel (a two-level reduction:
  // blocks of rows, then the last block combines them), for each row strategy (a thread, a warp,
  // a block per row); also with a spatial dim and ignore_index. Two losses of the same rows share it.
  for (const char* shape : {"{300, 7}", "{64, 1000}", "{8, 50000}", "{5, 9, 4}"}) {
    const std::string src = std::string(R"(local tc = require "tc"
      local shape = )") + shape + R"(
      local tsize = {shape[1], shape[3]}
      local t = tc.randint(1, shape[2] + 1, tsize, {device = "cuda"})
      return function(x)
        return tc.cross_entropy(x, t, nil, {ignore_index = 2}), tc.cross_entropy(x, t, nil, {reduction = "sum"})
      end)";
    EXPECT_EQ(kernels(src.c_str(), {shape}).first, 1) << shape << ": both losses, one kernel";
  }
  // The seed model: 64 identical layers compile as one layer's kernels.
  const char* seed = R"(local tc = require "tc"
    package.path = "scripts/models/?.lua;" .. package.path
    tc.set_default_device("cuda")
    tc.manual_seed(0)
    local m = require("seed_layers").Model({num_layers = NUM})
    tc.set_default_device("cpu")
    m:eval()
    return function(x) return m(x) end)";
  std::string one = seed, many = seed;
  one.replace(one.find("NUM"), 3, "1");
  many.replace(many.find("NUM"), 3, "64");
  setenv("TC_CUDA_TINY_GRAPH", "0", 1);  // one launch per step
  auto k1 = kernels(one.c_str(), {"{10, 10}"});
  auto k64 = kernels(many.c_str(), {"{10, 10}"});
  EXPECT_GT(k64.first, 64);
  EXPECT_EQ(k64.second, k1.second) << "distinct kernels of 64 layers vs 1 layer";
  printf("seed model: 1 layer %lld launches / %lld distinct, 64 layers %lld launches / %lld distinct\n",
         (long long)k1.first, (long long)k1.second, (long long)k64.first, (long long)k64.second);
  // By default the whole 64-layer model is one launch (one layer's step functions and the graph
  // kernel calling them).
  unsetenv("TC_CUDA_TINY_GRAPH");
  auto tiny = kernels(many.c_str(), {"{10, 10}"});
  unsetenv("TC_CUDA_TINY_GRAPH");
  EXPECT_EQ(tiny.first, 1);
  EXPECT_EQ(tiny.second, k1.second + 1);
}

// A contiguous float32 input of `b` on "cuda" (a fake: lowering and NVRTC only).
Tensor cuda_input(tc::testing::GraphBuilder& b, Shape s) {
  Shape strides(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) strides[d - 1] = strides[d] * s[d];
  Tensor f = Tensor::fake(s, strides, DType::Float32, Device{DeviceType::CUDA, 0});
  b.refs[f.impl()] = b.g.add_input("x", "arg[" + std::to_string(b.inputs.size() + 1) + "]", f);
  b.inputs.push_back(f);
  return f;
}

// Tiny graphs (one kernel of one block): the seed model's layers read only their own row of the
// activations, so under TC_CUDA_TINY_ROWS=1 the kernel runs a warp per row (10 rows of 10: 320
// threads, __syncwarp between steps; by default a block of 256 threads); a step that reads other
// rows of an intermediate (h @ h, a transposed read) is never row-local.
TEST_F(CudaCodegen, TinyGraphRunsAWarpPerRowOnlyWhenStepsAreRowLocal) {
  tc::testing::GraphBuilder b;
  auto in = [&](Shape s) { return cuda_input(b, s); };
  auto linear = [&](const Tensor& x) { return b.op(Op::linear, {x, in({10, 10}), in({10})}); };
  Tensor h = linear(in({10, 10}));
  for (int l = 0; l < 8; l++) h = b.op(Op::relu, {linear(b.op(Op::sigmoid, {b.op(Op::relu, {linear(h)})}))});
  b.out(h);
  lower::LoweredGraph seed = backends::lower_for_cuda(b.g);
  EXPECT_EQ(backends::cuda::tiny_warp_row(seed), 10) << lower::print(seed);
  backends::cuda::CudaCode block = backends::cuda::generate_code(seed, 90, nullptr);
  EXPECT_FALSE(block.tiny.empty());
  EXPECT_EQ(block.tiny_block, 256);
  setenv("TC_CUDA_TINY_ROWS", "1", 1);
  backends::cuda::CudaCode warps = backends::cuda::generate_code(seed, 90, nullptr);
  EXPECT_FALSE(warps.tiny.empty());
  EXPECT_EQ(warps.tiny_block, 320);

  // h @ h reads every row of h; g transposed reads g's other rows
  b = tc::testing::GraphBuilder();
  Tensor x = in({10, 10});
  Tensor hh = b.op(Op::relu, {linear(x)});
  Tensor g = b.op(Op::sigmoid, {b.op(Op::matmul, {hh, hh})});
  b.out(b.op(Op::add, {linear(g), b.op(Op::t, {g})}));
  lower::LoweredGraph other = backends::lower_for_cuda(b.g);
  EXPECT_EQ(backends::cuda::tiny_warp_row(other), 0) << lower::print(other);
  backends::cuda::CudaCode other_code = backends::cuda::generate_code(other, 90, nullptr);
  unsetenv("TC_CUDA_TINY_ROWS");
  EXPECT_FALSE(other_code.tiny.empty());
  EXPECT_EQ(other_code.tiny_block, 256);
  // the transposed read alone (both steps otherwise row-local) is enough
  b = tc::testing::GraphBuilder();
  Tensor y = b.op(Op::relu, {linear(in({10, 10}))});
  b.out(b.op(Op::relu, {linear(b.op(Op::t, {y}))}));
  lower::LoweredGraph transposed = backends::lower_for_cuda(b.g);
  EXPECT_EQ(backends::cuda::tiny_warp_row(transposed), 0) << lower::print(transposed);
}

// lower_for_cuda with the channels-last layout on, or off (TC_CUDA_LAYOUT=nchw).
lower::LoweredGraph lower_in_layout(const capture::Graph& g, bool channels_last) {
  if (!channels_last) setenv("TC_CUDA_LAYOUT", "nchw", 1);
  lower::LoweredGraph lg = backends::lower_for_cuda(g);
  unsetenv("TC_CUDA_LAYOUT");
  return lg;
}

// The contiguous strides of a [N, K, H, W] tensor.
std::vector<lower::SymInt> nchw_strides(int64_t K, int64_t H, int64_t W) {
  return {lower::SymInt::of(K * H * W), lower::SymInt::of(H * W), lower::SymInt::of(W), lower::SymInt::of(1)};
}

// The layout choice (backends/cuda/cuda_layout.h): in conv2d -> batch_norm -> relu -> conv2d the
// first convolution writes channels-last, ONE generated kernel (batch_norm and relu) reads that
// and stores channels-last, iterating N, H, W, C (channels innermost: coalesced), and the second
// convolution reads that buffer: no layout copy between them. TC_CUDA_LAYOUT=nchw keeps NCHW.
TEST_F(CudaCodegen, ConvBnReluConvStaysChannelsLastBetweenConvs) {
  tc::testing::GraphBuilder b;
  auto in = [&](Shape s) { return cuda_input(b, s); };
  const int64_t N = 2, C = 8, K = 16, H = 6, W = 5;
  Tensor x = in({N, C, H, W});
  Tensor h = b.op(Op::conv2d, {x, in({K, C, 3, 3})}, {{"padding", Value(IntList{1, 1})}});
  Tensor bn = b.op(Op::batch_norm, {h, in({K}), in({K}), in({K}), in({K}), false, 0.1, 1e-5});
  Tensor y = b.op(Op::conv2d, {b.op(Op::relu, {bn}), in({K, K, 3, 3})},
                  {{"padding", Value(IntList{1, 1})}});
  b.out(b.op(Op::relu, {y}));
  const std::vector<lower::SymInt> nhwc = {lower::SymInt::of(K * H * W), lower::SymInt::of(1),
                                           lower::SymInt::of(W * K), lower::SymInt::of(K)};
  const std::vector<lower::SymInt> nchw = nchw_strides(K, H, W);
  for (bool channels_last : {true, false}) {
    lower::LoweredGraph lg = lower_in_layout(b.g, channels_last);
    std::vector<int> convs;
    for (int s = 0; s < (int)lg.steps.size(); s++)
      if (lg.steps[s].kind == lower::Step::Kind::Extern) convs.push_back(s);
    ASSERT_EQ(convs.size(), 2u) << lower::print(lg);
    const lower::Extern &first = lg.steps[convs[0]].ext, &second = lg.steps[convs[1]].ext;
    ASSERT_EQ(convs[1] - convs[0], 2) << "one kernel between the convolutions\n"
                                      << lower::print(lg);
    const lower::Launch& between = lg.steps[convs[0] + 1].launch;
    EXPECT_EQ(first.output.strides, channels_last ? nhwc : nchw) << lower::print(lg);
    EXPECT_EQ(second.inputs[0].strides, channels_last ? nhwc : nchw) << lower::print(lg);
    EXPECT_NE(std::find(between.buffers.begin(), between.buffers.end(), first.output.buffer),
              between.buffers.end());
    EXPECT_NE(std::find(between.buffers.begin(), between.buffers.end(), second.inputs[0].buffer),
              between.buffers.end());
    // the kernel's innermost outer dim: the channels (channels-last) or the image's width
    const lower::Kernel& k = lg.kernels[between.kernel];
    ASSERT_FALSE(k.outer.empty());
    EXPECT_EQ(k.instrs[k.outer.back()].i, channels_last ? K : W) << lower::print(lg);
    EXPECT_EQ(first.external != nullptr, channels_last);
    // the graph's output (relu of the second convolution, generated) is contiguous either way
    EXPECT_EQ(lg.outputs[0].strides, nchw);
    backends::cuda::CudaCode code =
        backends::cuda::generate_code(lg, 90, nullptr);  // NVRTC accepts it
    EXPECT_FALSE(code.cubins.empty());
  }
}

// A convolution's result returned as it is leaves the graph contiguous, as eager's (a caller may
// view it): the channels-last result is copied by one kernel; with TC_CUDA_LAYOUT=nchw it is the
// call's own result.
TEST_F(CudaCodegen, AConvolutionsResultLeavesTheGraphContiguous) {
  tc::testing::GraphBuilder b;
  const int64_t N = 2, C = 8, K = 16, H = 6, W = 5;
  Tensor x = cuda_input(b, {N, C, H, W});
  b.out(b.op(Op::conv2d, {x, cuda_input(b, {K, C, 3, 3})}, {{"padding", Value(IntList{1, 1})}}));
  const std::vector<lower::SymInt> nchw = nchw_strides(K, H, W);
  for (bool channels_last : {true, false}) {
    lower::LoweredGraph lg = lower_in_layout(b.g, channels_last);
    ASSERT_EQ(lg.outputs.size(), 1u);
    EXPECT_EQ(lg.outputs[0].strides, nchw) << lower::print(lg);
    EXPECT_EQ(lg.kernels.size(), channels_last ? 1u : 0u) << lower::print(lg);
  }
}

// Sums over leading dims (bias gradients: [2048, 768] summed over dim 1; layer_norm's weight
// gradient reads per-row statistics too; its bias gradient is a second sum of the same kernel) are
// split reductions over tiles of neighbouring columns, so a warp's loads are coalesced, with a
// grid that is a multiple of the tiles; sums along rows
// keep a warp per row; and the programs compile.
TEST_F(CudaCodegen, SumsOverLeadingDimsRunAsColumnTiles) {
  auto shape_of = [](std::function<void(tc::testing::GraphBuilder&, std::function<Tensor(Shape)>)> build) {
    tc::testing::GraphBuilder b;
    auto in = [&](Shape s) { return cuda_input(b, s); };
    build(b, in);
    lower::LoweredGraph lg = backends::lower_for_cuda(b.g);
    EXPECT_EQ(lg.kernels.size(), 1u) << lower::print(lg);
    backends::cuda::CudaCode code = backends::cuda::generate_code(lg, 90, nullptr);
    if (getenv("TC_TEST_PRINT_KERNELS"))
      printf("%s\n", backends::cuda::emit_kernel(lg.kernels[0], "k", code.shapes.at(0).at(0)).c_str());
    return code.shapes.at(0).at(0);
  };
  for (int64_t cols : {768, 3072, 2304, 100}) {
    backends::cuda::KernelShape sh = shape_of([&](auto& b, auto in) { b.out(b.op(Op::sum, {in({2048, cols}), IntList{1}})); });
    const int64_t tiles = (cols + backends::cuda::kSplitTile - 1) / backends::cuda::kSplitTile;
    EXPECT_GT(sh.split, tiles) << cols << " columns: several blocks per tile";
    EXPECT_EQ(sh.split % tiles, 0) << cols << " columns";
    EXPECT_LE(sh.split / tiles * cols, backends::cuda::kSplitSlots);
  }
  backends::cuda::KernelShape two = shape_of([&](auto& b, auto in) { b.out(b.op(Op::sum, {in({8, 256, 768}), IntList{1, 2}})); });
  EXPECT_EQ(two.split % 24, 0);
  EXPECT_GT(two.split, 24);
  backends::cuda::KernelShape ln = shape_of([&](auto& b, auto in) {
    Tensor g = in({2048, 768}), x = in({2048, 768}), mean = in({2048, 1}), rstd = in({2048, 1});
    Tensor xhat = b.op(Op::mul, {b.op(Op::sub, {x, mean}), rstd});
    b.out(b.op(Op::sum, {b.op(Op::mul, {g, xhat}), IntList{1}}));
  });
  EXPECT_EQ(ln.split % 24, 0) << "layer_norm's weight gradient";
  EXPECT_GT(ln.split, 24);
  // layer_norm's weight and bias gradients: two sums of one kernel (two Loops), both split
  backends::cuda::KernelShape both = shape_of([&](auto& b, auto in) {
    Tensor g = in({8, 256, 768}), x = in({8, 256, 768});
    b.out(b.op(Op::sum, {b.op(Op::mul, {g, x}), IntList{1, 2}}));
    b.out(b.op(Op::sum, {g, IntList{1, 2}}));
  });
  EXPECT_EQ(both.split % 24, 0) << "two column sums in one kernel";
  EXPECT_GT(both.split, 24);
  backends::cuda::KernelShape rows = shape_of([&](auto& b, auto in) { b.out(b.op(Op::sum, {in({768, 2048}), IntList{2}})); });
  EXPECT_EQ(rows.split, 0) << "rows along memory: a warp per row";
  EXPECT_EQ(rows.threads_per_row, 32);
  backends::cuda::KernelShape all = shape_of([&](auto& b, auto in) { b.out(b.op(Op::sum, {in({4 << 20})})); });
  EXPECT_GT(all.split, 1) << "a sum of everything: one row in slices";
}

// mode = "max-autotune": every kernel's launch variants compile in the graph's NVRTC programs
// (more distinct functions than the default mode), the launches with variants are counted as
// tuned, and their choices go to the disk cache: compiling the same graphs again (a warm start)
// reads every choice instead of timing. (Compile-only mode times nothing: the planned shapes are
// the recorded choices.)
const char* kTune = R"LUA(
local tc = require "tc"
local x = tc.randn(4096, 1024, {device = "cuda"})
local long = tc.randn(4 * 1024 * 1024, {device = "cuda"})
local function chain(v) return tc.sigmoid(v * 2 + 1) * v end
local function softmax(v) return tc.softmax(v, 2) end
local function total(v) return tc.sum(v) end
return function(mode)
  tc.compiler.reset()
  local _ <close> = tc.no_grad()
  tc.compile(chain, {backend = "cuda", mode = mode, fullgraph = true})(x)
  tc.compile(softmax, {backend = "cuda", mode = mode, fullgraph = true})(x)
  tc.compile(total, {backend = "cuda", mode = mode, fullgraph = true})(long)
  return tc.compiler.stats()
end
)LUA";

// A training step's BatchNorm + ReLU (cuda_fuse.h): batch_norm with batch statistics -> relu is one
// library call in the forward graph, relu's derivative -> _batch_norm_backward one in the backward,
// so the step generates one kernel (the loss's sum of the linear); with either rule broken, a relu
// kernel (forward) or a mask kernel (backward, mul(g, gt(result, 0)) after the matmul) comes back.
TEST_F(CudaCodegen, TrainingBatchNormReluLeavesNoReluKernels) {
  vm::Results r = rt_.run_string(R"LUA(
    local tc = require "tc"
    tc.compiler.reset()
    local C = 8
    local function cuda(t) return t:to("cuda"):requires_grad_() end
    local x, W, w, b = cuda(tc.randn(16, C)), cuda(tc.randn(24, C)), cuda(tc.ones(C)), cuda(tc.zeros(C))
    local rm, rv = tc.zeros(C):to("cuda"), tc.ones(C):to("cuda")
    local step = tc.compile(function(x, w, b, rm, rv, W)
      local y = tc.relu(tc.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5))
      local loss = tc.linear(y, W):sum()
      loss:backward()
      return loss
    end, {backend = "cuda"})
    step(x, w, b, rm, rv, W)
    return tc.compiler.stats()
  )LUA", "=train_norm_relu");
  EXPECT_EQ(r[0]["kernels"].integer(), 1);
  EXPECT_EQ(r[0]["fallback_nodes"].integer(), 0);
}

TEST_F(CudaCodegen, MaxAutotuneCompilesVariantsAndCachesChoices) {
  char dir[] = "/tmp/tc_autotune_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("TC_CACHE_DIR", dir, 1);
  vm::Ref run = rt_.run_string(kTune, "=tune")[0];
  vm::Results d = run(std::string("default"));
  vm::Results t = run(std::string("max-autotune-no-cudagraphs"));
  EXPECT_EQ(d[0]["tuned_kernels"].integer(), 0);
  EXPECT_EQ(t[0]["kernels"].integer(), d[0]["kernels"].integer());
  EXPECT_GT(t[0]["distinct_kernels"].integer(), d[0]["distinct_kernels"].integer()) << "variants compiled";
  EXPECT_EQ(t[0]["tuned_kernels"].integer(), 3);
  EXPECT_EQ(t[0]["tuned_cached"].integer(), 0);
  vm::Results warm = run(std::string("max-autotune-no-cudagraphs"));
  EXPECT_EQ(warm[0]["tuned_kernels"].integer(), 3);
  EXPECT_EQ(warm[0]["tuned_cached"].integer(), 3) << "choices read from the disk cache";
  setenv("TC_CACHE_DIR", "", 1);
  std::string rm = std::string("rm -rf ") + dir;
  EXPECT_EQ(std::system(rm.c_str()), 0);
}

// The choices' text names steps and shapes, and is read back only when it fits the program.
TEST(CudaAutotune, ChoicesRoundTripAndMismatchesAreRejected) {
  cuda::set_compile_only(true);  // (launch geometry from the compile-only device)
  backends::cuda::Program p;
  p.graph.kernels.emplace_back();
  lower::Step launch;
  launch.kind = lower::Step::Kind::Launch;
  launch.launch.kernel = 0;
  lower::Step ext;
  ext.kind = lower::Step::Kind::Extern;
  p.graph.steps = {launch, ext, launch};
  backends::cuda::KernelShape planned, v128, v512;
  v128.block = 128, v128.variant = true;
  v512.block = 512, v512.variant = true;
  p.shapes = {{planned, v128, v512}};
  p.static_launches.resize(3);
  for (auto& sl : p.static_launches) sl.n_outer = 1 << 20;
  p.static_launches[0].shape = 2;
  p.static_launches[2].shape = 1;
  const std::string text = backends::cuda::choices_text(p);
  EXPECT_EQ(text, "0 2\n2 1\n");
  backends::cuda::Program q = p;
  for (auto& sl : q.static_launches) sl.shape = 0;
  ASSERT_TRUE(backends::cuda::apply_choices(q, text));
  EXPECT_EQ(q.static_launches[0].shape, 2);
  EXPECT_EQ(q.static_launches[2].shape, 1);
  EXPECT_EQ(q.static_launches[0].grid, p.grid(v512, 1 << 20, false));
  EXPECT_FALSE(backends::cuda::apply_choices(q, "0 3\n")) << "no such shape";
  EXPECT_FALSE(backends::cuda::apply_choices(q, "1 0\n")) << "not a launch";
  EXPECT_FALSE(backends::cuda::apply_choices(q, "0 x\n")) << "not a number";
  cuda::set_compile_only(false);
}

}  // namespace

namespace {

// A program NVRTC rejects (forced by TC_CUDA_FAIL_NVRTC): the graph runs on eager after one
// warning naming the reason; under fullgraph the compile raises CompileError. Never a crash.
TEST(CudaCodegenFallback, NvrtcFailureRunsOnEagerOrRaisesUnderFullgraph) {
  if (!nvrtc_ok()) GTEST_SKIP() << "NVRTC cannot be loaded";
  cuda::set_compile_only(true);
  setenv("TC_CACHE_DIR", "", 1);
  setenv("TC_CUDA_FAIL_NVRTC", "1", 1);
  vm::Runtime rt("cuda_fallback");
  capture::install(rt.state(), backends::graph_compiler());
  ::testing::internal::CaptureStderr();
  vm::Results r = rt.run_string(R"(
    local tc = require "tc"
    tc.compiler.reset()
    local x = tc.randn(4, 5, {device = "cuda"})
    local f = tc.compile(function(v) return tc.exp(v) * 2 + 1 end, {backend = "cuda"})
    local y = f(x)
    local stats = tc.compiler.stats()
    local g = tc.compile(function(v) return tc.sin(v) - 1 end, {backend = "cuda", fullgraph = true})
    local ok, err = pcall(g, x)
    return stats, tostring(y.device), ok, type(err) == "table" and err.kind or tostring(err)
  )");
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("TC_CUDA_FAIL_NVRTC");
  cuda::set_compile_only(false);
  EXPECT_EQ(r[1].string(), "cuda:0");
  EXPECT_EQ(r[0]["fallback_nodes"].integer(), 3);  // exp, mul, add ran on eager
  EXPECT_EQ(r[0]["kernels"].integer(), 0);
  EXPECT_NE(log.find("tc: cuda backend: running a graph on the eager backend"), std::string::npos) << log;
  EXPECT_NE(log.find("TC_CUDA_FAIL_NVRTC is set"), std::string::npos) << log;
  EXPECT_FALSE(r[2].boolean());
  EXPECT_EQ(r[3].string(), "CompileError");
}

}  // namespace
