// On a GPU: every model of scripts/models through tc.compile(model, {backend = B}) with B =
// "cuda" and "tc" (which picks cuda for GPU inputs) matches eager CUDA on the same input
// (|a - b| <= 1e-3 * max(1, max |a|)), its graphs generated (a compile failure raises instead of
// falling back), twice (the second call on the kept arena). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/cuda_blaslt.h"
#include "tc/vm/runtime.h"

using namespace tc;

namespace {

const char* kScript = R"LUA(
local tc = require "tc"
local specs = dofile("tests/model_specs.lua")
return function(name, backend)
  tc.compiler.reset()
  tc.set_default_device("cuda")
  tc.manual_seed(0)
  local s = specs[name]
  local model = s[1]()
  model:eval()
  local x = s[2]()
  tc.set_default_device("cpu")
  local _ <close> = tc.no_grad()
  local ref = model(x)
  local f = tc.compile(model, {backend = backend})
  local y1 = f(x)
  local y2 = f(x)
  local scale = math.max(1, ref:abs():max():item())
  local err = math.max((y1 - ref):abs():max():item(), (y2 - ref):abs():max():item()) / scale
  return err, tc.compiler.stats(), tostring(y1.device)
end
)LUA";

capture::GraphCompiler strict_compiler() {
  capture::GraphCompiler c = backends::graph_compiler();
  c.compile = [](const capture::Graph& g, const std::string& backend, const capture::CompileOptions& o) {
    capture::CompileOptions strict = o;
    strict.fullgraph = true;  // the backend raises instead of falling back to eager
    return backends::compile_graph(g, backend, strict);
  };
  return c;
}

class CudaBackendModels : public testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

TEST_P(CudaBackendModels, MatchEager) {
  const auto& [model, backend] = GetParam();
  vm::Runtime rt("cuda_backend_models");
  capture::install(rt.state(), strict_compiler());
  vm::Ref run = rt.run_string(kScript, "=models")[0];
  vm::Results r = run(model, backend);
  const double err = r[0].number();
  printf("%s through %s: max relative error vs eager %.3g; %lld graphs, %lld launches per call, %lld distinct kernels, "
         "%lld fallback nodes\n",
         model.c_str(), backend.c_str(), err, (long long)r[1]["backend_compiles"].integer(),
         (long long)r[1]["kernels"].integer(), (long long)r[1]["distinct_kernels"].integer(),
         (long long)r[1]["fallback_nodes"].integer());
  EXPECT_EQ(r[2].string(), "cuda:0");
  if (model != "my_module") EXPECT_GT(r[1]["kernels"].integer(), 0);  // my_module: one cuBLASLt call
  EXPECT_EQ(r[1]["fallback_nodes"].integer(), 0);
  EXPECT_LE(err, 1e-3);
}

// Tests of Lua chunks on the GPU, under the strict compiler; they skip without a GPU.
class CudaGpu : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
  vm::Results run(const char* name, const char* lua) {
    rt_ = std::make_unique<vm::Runtime>(name);
    capture::install(rt_->state(), strict_compiler());
    return rt_->run_string(lua, std::string("=") + name);
  }
  std::unique_ptr<vm::Runtime> rt_;
};
using CudaBackendTinyGraph = CudaGpu;
using CudaBackendAttention = CudaGpu;

// The seed model's graph as one kernel of one block (the default for such small graphs: 256
// threads, the 64 layers as a loop) equals eager, and so do the warp-per-row form
// (TC_CUDA_TINY_ROWS=1), the unfolded one (TC_CUDA_TINY_FOLD=0) and one launch per step
// (TC_CUDA_TINY_GRAPH=0).
TEST_F(CudaBackendTinyGraph, SeedModelInOneLaunchMatchesEager) {
  const std::pair<const char*, const char*> forms[] = {
      {"", ""}, {"TC_CUDA_TINY_ROWS", "1"}, {"TC_CUDA_TINY_FOLD", "0"}, {"TC_CUDA_TINY_GRAPH", "0"}};
  for (const auto& [var, value] : forms) {
    if (*var) setenv(var, value, 1);
    vm::Ref models = run("cuda_tiny_graph", kScript)[0];
    vm::Results r = models(std::string("seed_64_layers"), std::string("cuda"));
    if (*var) unsetenv(var);
    printf("seed model, %s=%s: max relative error vs eager %.3g, %lld launches per call\n", var, value, r[0].number(),
           (long long)r[1]["kernels"].integer());
    if (std::string(var) == "TC_CUDA_TINY_GRAPH") EXPECT_GT(r[1]["kernels"].integer(), 64);
    else EXPECT_EQ(r[1]["kernels"].integer(), 1);
    EXPECT_LE(r[0].number(), 1e-5);
  }
}

// A tiny graph whose steps read other rows of what an earlier step wrote (h @ h, h transposed)
// runs in one launch with the block-wide sync and equals eager.
TEST_F(CudaBackendTinyGraph, StepsReadingOtherRowsMatchEager) {
  vm::Results r = run("cuda_tiny_rows", R"LUA(
    local tc = require "tc"
    tc.compiler.reset()
    tc.manual_seed(0)
    local w, b = tc.randn(10, 10, {device = "cuda"}), tc.randn(10, {device = "cuda"})
    local function f(x)
      local h = tc.relu(tc.matmul(x, w:t()) + b)
      local g = tc.sigmoid(tc.matmul(h, h))
      return tc.matmul(g, w) + g:t()
    end
    local x = tc.randn(10, 10, {device = "cuda"})
    local want = f(x)
    local got = tc.compile(f, {backend = "cuda"})(x)
    return (got - want):abs():max():item() / math.max(1, want:abs():max():item()), tc.compiler.stats()
  )LUA");
  printf("h @ h in one launch: max relative error vs eager %.3g, %lld launches per call\n", r[0].number(),
         (long long)r[1]["kernels"].integer());
  EXPECT_EQ(r[1]["kernels"].integer(), 1);
  EXPECT_LE(r[0].number(), 1e-5);
}

// Attention whose heads are merged right after (transpose(2, 3), reshape: GPT-2's) is one fused
// call writing the merged layout (cuda_fuse.h); it equals eager for head dims of both attention
// kernels (40: tensor cores, 80: CUDA cores), q/k/v as head views of one projection, odd lengths.
TEST_F(CudaBackendAttention, MergedHeadsMatchEager) {
  vm::Results r = run("cuda_attention_merge", R"LUA(
    local tc = require "tc"
    local F = require("tc.nn").functional
    local worst = 0
    for _, E in ipairs({40, 80}) do
      for _, causal in ipairs({true, false}) do
        tc.compiler.reset()
        local B, T, H = 2, 77, 3
        local C = H * E
        local qkv = tc.randn(B, T, 3 * C, {device = "cuda"})
        local function f(t)
          local parts = t:split(C, 3)
          local function heads(p) return p:view(B, T, H, E):transpose(2, 3) end
          local y = F.scaled_dot_product_attention(heads(parts[1]), heads(parts[2]), heads(parts[3]), {is_causal = causal})
          return y:transpose(2, 3):reshape(B, T, C) * 2
        end
        local want = f(qkv)
        local got = tc.compile(f, {backend = "cuda"})(qkv)
        worst = math.max(worst, (got - want):abs():max():item())
      end
    end
    return worst
  )LUA");
  EXPECT_LT(r[0].number(), 1e-6);
}

// cat of more than 4 float32 pieces -> batch_norm(eval) -> relu (DenseNet's pre-activation) is one
// kernel reading the pieces where they are (cuda_fuse.h): no generated kernel is left in the
// graph, and it equals eager for images whose rows take the 4-wide path (8x8) and the
// element-wise one (5x3), also after the normalization's parameters change in place between
// calls (the kernel reads them at every call). Five pieces in another order (a piece twice)
// likewise.
TEST(CudaBackendCatNorm, CatBatchNormReluIsOneKernelAndMatchesEager) {
  std::string why;
  if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  vm::Runtime rt("cuda_cat_norm");
  capture::install(rt.state(), strict_compiler());
  vm::Results r = rt.run_string(R"LUA(
    local tc = require "tc"
    local F = require("tc.nn").functional
    local worst, kernels = 0, {}
    for _, hw in ipairs({{8, 8}, {5, 3}}) do
      tc.compiler.reset()
      local N, H, W = 3, hw[1], hw[2]
      local p = {}
      for k, c in ipairs({16, 4, 8, 4, 4, 12}) do p[k] = tc.randn(N, c, H, W, {device = "cuda"}) end
      local C = 48
      local w, b = tc.randn(C, {device = "cuda"}), tc.randn(C, {device = "cuda"})
      local rm, rv = tc.randn(C, {device = "cuda"}), tc.rand(C, {device = "cuda"}) + 0.5
      local function f(a1, a2, a3, a4, a5, a6)
        return F.relu(F.batch_norm(tc.cat({a1, a2, a3, a4, a5, a6}, 2), w, b, rm, rv, false, 0.1, 1e-5))
      end
      local cf = tc.compile(f, {backend = "cuda"})
      for call = 1, 2 do
        local got = cf(p[1], p[2], p[3], p[4], p[5], p[6])
        worst = math.max(worst, (got - f(p[1], p[2], p[3], p[4], p[5], p[6])):abs():max():item())
        w:mul_(-1.5); rm:add_(0.25)
      end
      kernels[#kernels + 1] = tc.compiler.stats().kernels
      local w2, b2 = tc.randn(56, {device = "cuda"}), tc.randn(56, {device = "cuda"})
      local rm2, rv2 = tc.randn(56, {device = "cuda"}), tc.rand(56, {device = "cuda"}) + 0.5
      local function g(a1, a2, a3)
        return F.relu(F.batch_norm(tc.cat({a3, a1, a2, a1, a3}, 2), w2, b2, rm2, rv2, false, 0.1, 1e-3))
      end
      local q1, q2, q3 = p[2], p[3], tc.randn(N, 20, H, W, {device = "cuda"})
      worst = math.max(worst, (tc.compile(g, {backend = "cuda"})(q1, q2, q3) - g(q1, q2, q3)):abs():max():item())
    end
    return worst, kernels[1], kernels[2]
  )LUA", "=cat_norm");
  EXPECT_LT(r[0].number(), 1e-4);
  EXPECT_EQ(r[1].integer(), 0) << "the cat, batch_norm and relu left generated kernels (8x8)";
  EXPECT_EQ(r[2].integer(), 0) << "the cat, batch_norm and relu left generated kernels (5x3)";
}

// Under the channels-last layout (cuda_layout.h) a 1x1 convolution of stride 1 (with or without
// bias) is a cuBLASLt product, one per such convolution and call, while a 3x3 and a strided 1x1
// stay cuDNN's; the results equal eager's, also after a weight changes in place between calls
// and for a second batch size (each call site keeps only what the shapes determine).
TEST(CudaBackendConv, OneByOneConvolutionsRunAsProductsAndMatchEager) {
  std::string why;
  if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  if (!cuda::blaslt_available(&why)) GTEST_SKIP() << "cuBLASLt not available: " << why;
  vm::Runtime rt("cuda_conv_products");
  capture::install(rt.state(), strict_compiler());
  vm::Results r = rt.run_string(R"LUA(
    local tc = require "tc"
    local F = require("tc.nn").functional
    tc.manual_seed(0)
    local d = {device = "cuda"}
    local w1, w2, w3, w4 = tc.randn(32, 16, 1, 1, d), tc.randn(16, 32, 3, 3, d), tc.randn(24, 16, 1, 1, d),
                           tc.randn(8, 24, 1, 1, d)
    local b3 = tc.randn(24, d)
    local function f(x)
      local y = F.relu(F.conv2d(x, w1))            -- 1x1: a product
      y = F.relu(F.conv2d(y, w2, nil, 1, 1))        -- 3x3: cuDNN
      y = F.conv2d(y, w3, b3)                       -- 1x1 with bias: a product
      return F.conv2d(y, w4, nil, 2)                -- 1x1 of stride 2: cuDNN
    end
    local cf = tc.compile(f, {backend = "cuda"})
    local x, got
    local function call(n)  -- the compiled call alone (the C++ side counts its cuBLASLt products)
      x = tc.randn(n, 16, 8, 8, d)
      got = cf(x)
    end
    local function check()  -- its relative error against eager; then a weight changes in place
      local want = f(x)
      local err = (got - want):abs():max():item() / math.max(1, want:abs():max():item())
      w1:mul_(-1.5)
      return err
    end
    return call, check
  )LUA", "=conv_products");
  vm::Ref call = r[0], check = r[1];
  double worst = 0;
  std::vector<int64_t> products;
  for (int n : {2, 2, 3}) {
    const int64_t before = cuda::blaslt_calls();
    call(n);
    products.push_back(cuda::blaslt_calls() - before);
    worst = std::max(worst, check()[0].number());
  }
  EXPECT_LT(worst, 1e-3);
  EXPECT_EQ(products[1], 2) << "cuBLASLt products in the second call (the two 1x1 convolutions of stride 1)";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaBackendModels,
                         testing::Combine(testing::Values("seed_64_layers", "my_module", "resnet18", "resnet50",
                                                          "densenet121", "inception_v3", "gpt2"),
                                          testing::Values("cuda", "tc")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
