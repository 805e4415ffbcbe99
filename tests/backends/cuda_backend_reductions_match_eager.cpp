// On a GPU: reductions through the cuda backend at every row strategy (a thread, a warp, a block of
// 256 and of 1024 per row; rows over the last and the leading dim; dynamic row lengths choosing a
// strategy per launch), split reductions (few long rows; column sums over tiles of columns), and large unrolled or vectorized pointwise
// kernels match eager CUDA: sums, extremes, argmax/argmin (first index, NaN winning), var, softmax,
// log_softmax, layer_norm, logsumexp, any/all, integer sums and float16; some shapes also under
// mode = "max-autotune" (its timed variants, with and without CUDA graphs). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/cuda.h"
#include "tc/vm/runtime.h"

using namespace tc;

namespace {

// Returns the list of failures ("" when all match) and the number of cases checked.
const char* kScript = R"LUA(
local tc = require "tc"
local failures, checked = {}, 0
local function close(name, a, b, tol)
  checked = checked + 1
  if a.dtype ~= b.dtype then a = a:to(b.dtype) end
  local af, bf = a:to(tc.float64), b:to(tc.float64)
  local same_nan = tc.isnan(af):eq(tc.isnan(bf)):all():item()
  local fa = tc.where(tc.isnan(af), tc.zeros_like(af), af)
  local fb = tc.where(tc.isnan(bf), tc.zeros_like(bf), bf)
  local scale = math.max(1, fb:abs():max():item())
  local err = (fa - fb):abs():max():item() / scale
  if not same_nan or err > tol then
    failures[#failures + 1] = ("%s: error %.3g (nan pattern same: %s)"):format(name, err, tostring(same_nan))
  end
end
local tune = false  -- also under mode = "max-autotune" (the timed variants) and its CUDA graphs
local function check(name, f, tol, ...)
  local ref = f(...)
  local configs = {{}, {dynamic = true}}
  if tune then
    configs[3] = {mode = "max-autotune-no-cudagraphs"}
    -- warm-up, recording, replay (compile-only mode records no CUDA graphs)
    if not os.getenv("TC_TEST_COMPILE_ONLY") then configs[4] = {mode = "max-autotune", calls = 3} end
  end
  for _, c in ipairs(configs) do
    local dynamic = c.dynamic or false
    local cf = tc.compile(f, {backend = "cuda", dynamic = dynamic, mode = c.mode, fullgraph = true})
    local tag = name .. (dynamic and " dynamic" or "") .. (c.mode and " " .. c.mode or "")
    local ok, out
    for _ = 1, c.calls or 1 do
      ok, out = pcall(cf, ...)
      if not ok then break end
    end
    local msg = ok and "" or (type(out) == "table" and out.message or tostring(out))
    if ok then
      close(tag, out, ref, tol)
    elseif not (dynamic and msg:find("lowering")) then  -- lowering may refuse some dynamic graphs
      failures[#failures + 1] = tag .. ": " .. msg
    end
  end
end
tc.manual_seed(0)
local shapes = {{64, 10}, {33, 300}, {7, 5000}, {3, 70000}, {5000, 3}}
for _, s in ipairs(shapes) do
  tc.compiler.reset()  -- (each shape's compiles stay under the recompile limit)
  tune = s[2] == 300 or s[2] == 70000
  local tag = s[1] .. "x" .. s[2]
  local x = tc.randn(s[1], s[2], {device = "cuda"})
  x[1][2] = 0 / 0  -- a NaN in row 1
  local y = tc.randn(s[1], s[2], {device = "cuda"})
  check("sum last " .. tag, function(v) return tc.sum(v, 2) end, 1e-5, y)
  check("sum leading " .. tag, function(v) return tc.sum(v, 1) end, 1e-5, y)
  check("amax " .. tag, function(v) return tc.amax(v, 2) end, 0, x)
  check("amin leading " .. tag, function(v) return tc.amin(v, 1) end, 0, x)
  check("argmax " .. tag, function(v) return tc.argmax(v, 2) end, 0, x)
  check("argmin leading " .. tag, function(v) return tc.argmin(v, 1) end, 0, x)
  check("argmax ties " .. tag, function(v) return tc.argmax(tc.floor(v), 2) end, 0, y)
  -- values and indices exact, side by side (no arithmetic on them: m * 1000 + i fused into one
  -- kernel rounds once, an fma, where eager's two kernels round twice)
  check("max_dim " .. tag, function(v)
    local m, i = tc.max(v, 2)
    return tc.cat({m:to(tc.float64), i:to(tc.float64)})
  end, 0, y)
  check("var " .. tag, function(v) return tc.var(v, 2) end, 1e-5, y)
  check("softmax " .. tag, function(v) return tc.softmax(v, 2) end, 1e-5, y)
  check("log_softmax leading " .. tag, function(v) return tc.log_softmax(v, 1) end, 1e-5, y)
  check("layer_norm " .. tag, function(v) return tc.layer_norm(v, {s[2]}) end, 1e-4, y)
  check("logsumexp " .. tag, function(v) return tc.logsumexp(v, 2) end, 1e-5, y)
  check("any " .. tag, function(v) return tc.any(v:gt(3.5), 2) end, 0, y)
  check("all leading " .. tag, function(v) return tc.all(v:gt(-3.5), 1) end, 0, y)
  check("int sum " .. tag, function(v) return tc.sum((v * 100):to(tc.int64), 2) end, 0, y)
  check("half softmax " .. tag, function(v) return tc.softmax(v:to(tc.float16), 2) end, 2e-3, y)
  check("bf16 sum " .. tag, function(v) return tc.sum(v:to(tc.bfloat16), 2) end, 1e-2, y)
end
tune = true
-- split reductions (few rows, long: slices of each row over the whole GPU, combined in order)
local long = tc.randn(4 * 1024 * 1024 + 3, {device = "cuda"})
local tall = tc.randn(1024 * 1024 + 7, 16, {device = "cuda"})
check("split full sum", function(v) return tc.sum(v) end, 1e-6, long)
check("split mean", function(v) return tc.mean(v) end, 1e-6, long)
check("split amax", function(v) return tc.amax(v, 1) end, 0, long)
check("split sum leading", function(v) return tc.sum(v, 1) end, 1e-6, tall)
check("split amin leading", function(v) return tc.amin(v, 1) end, 0, tall)
check("split any leading", function(v) return tc.any(v:gt(4.5), 1) end, 0, tall)
check("split sum of squares", function(v) return tc.sum(v * v, 2) end, 1e-6, tall:t())
check("split half sum", function(v) return tc.sum(v:to(tc.float16), 1) end, 1e-2, tall)
-- sums over leading dims of many columns (bias and layer_norm gradients): split reductions over
-- tiles of 32 neighbouring columns, a partial last tile when the width is not a multiple of 32
for _, w in ipairs({768, 3072, 100}) do
  local c = tc.randn(2048, w, {device = "cuda"})
  check("column sum " .. w, function(v) return tc.sum(v, 1) end, 1e-6, c)
  check("column amax " .. w, function(v) return tc.amax(v, 1) end, 0, c)
end
local g3, x3 = tc.randn(8, 256, 768, {device = "cuda"}), tc.randn(8, 256, 768, {device = "cuda"})
check("column mean over two dims", function(v) return tc.mean(v, {1, 2}) end, 1e-6, g3)
check("layer_norm weight gradient", function(g, x) return tc.sum(g * (x - tc.mean(x, 3, true)), {1, 2}) end, 1e-5, g3, x3)
check("two column sums combined", function(g, x) return tc.sum(g * x, {1, 2}) + tc.sum(g, {1, 2}) * 1000 end, 1e-6, g3, x3)
-- vector accesses (16-byte loads and stores, a scalar tail; misaligned views element by element)
check("vector chain misaligned", function(v) return tc.sigmoid(v * 2) + 1 end, 1e-6, long:narrow(1, 2, 1024 * 1024 * 3))
check("vector 2d broadcast", function(v, b) return tc.relu(v + b) * v end, 1e-6, long:narrow(1, 1, 4096 * 1024):reshape(4096, 1024),
      tc.randn(1024, {device = "cuda"}))
check("vector float to half", function(v) return v:to(tc.float16) end, 0, long)
local big = tc.randn(3 * 1024 * 1024 + 5, {device = "cuda"})
check("unrolled chain", function(v) return tc.abs(tc.tanh(tc.sigmoid(tc.relu(v * 1.5 + 0.25) - 0.5)) + v) * 0.75 end, 1e-6, big)
-- float16 loaded and stored as such (computed in float32 and rounded once, as eager's kernel)
check("unrolled half", function(v) return v * 3 end, 0, big:to(tc.float16))
return table.concat(failures, "\n"), checked
)LUA";

TEST(CudaBackendReductions, MatchEagerAtEveryRowStrategy) {
  // TC_TEST_COMPILE_ONLY=1: the script runs in compile-only mode (no GPU; values not checked).
  const bool compile_only = std::getenv("TC_TEST_COMPILE_ONLY") != nullptr;
  std::string why;
  if (!compile_only && !cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  if (compile_only) cuda::set_compile_only(true);
  vm::Runtime rt("cuda_reductions");
  capture::install(rt.state(), backends::graph_compiler());
  vm::Results r = rt.run_string(kScript, "=reductions");
  printf("%lld comparisons\n", (long long)r[1].integer());
  if (!compile_only) EXPECT_EQ(r[0].string(), "");
  if (compile_only) printf("%s\n", r[0].string().c_str());
  cuda::set_compile_only(false);
}

}  // namespace
