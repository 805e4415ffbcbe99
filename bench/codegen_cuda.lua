-- The CUDA code generator (issue 12's Measure section), tc's side: tc.compile(f, {backend = B})
-- next to eager CUDA, in one process, on device "cuda".
-- Usage: tcrun bench/codegen_cuda.lua BACKEND SECTION
--   kernels        10-op pointwise chain on 64M floats (GB/s next to a device copy's), softmax and
--                  layer_norm over rows, sums over the last and the leading dim
--   seed_whole     the 64-layer seed model compiled whole: first call (compile), then per call
--   seed_regional  the same with each Layer compiled (regional)
--   models         ResNet-50, DenseNet-121, GPT-2 small: first call (compile) and per call
-- Prints "key value" lines; times in ms, each the median of N calls (the stream synchronized after
-- each call).
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
local common = require "bench_common"

local backend, section = arg[1], arg[2]
assert(backend and section, "usage: tcrun bench/codegen_cuda.lua BACKEND SECTION")
tc.manual_seed(0)
local clock = tc.utils.perf_counter

local function median_ms(f, iters, ...)
  f(...)  -- warm-up
  tc.cuda.synchronize()
  local t = {}
  for i = 1, iters do
    local t0 = clock()
    f(...)
    tc.cuda.synchronize()
    t[i] = (clock() - t0) * 1e3
  end
  table.sort(t)
  return t[(iters + 1) // 2]
end

local say = common.say

local function first_call(cf, ...)
  tc.compiler.reset()
  local t0 = clock()
  cf(...)
  tc.cuda.synchronize()
  return (clock() - t0) * 1e3, tc.compiler.stats()
end

local report_compile = common.report_compile

local sections = {}

local function compare(name, f, iters, ...)
  local e = median_ms(f, iters, ...)
  local c = median_ms(tc.compile(f, {backend = backend, dynamic = false}), iters, ...)
  say(name .. "_eager_ms", e)
  say(name .. "_compiled_ms", c)
  return e, c
end

function sections.kernels()
  tc.no_grad(function()
    local n = 64 * 1024 * 1024
    local x = tc.randn(n, {device = "cuda"})
    local chain = common.chain
    local y = tc.empty(n, {device = "cuda"})
    local copy = median_ms(function() y:copy_(x) end, 20)
    say("copy_ms", copy)
    say("copy_GBps", 2 * 4 * n / copy / 1e6)
    local _, c = compare("chain", chain, 20, x)
    say("chain_compiled_GBps", 2 * 4 * n / c / 1e6)
    local cc = tc.compile(chain, {backend = backend, dynamic = false})
    say("chain_max_abs_diff_vs_eager", (cc(x) - chain(x)):abs():max():item())
    for _, shape in ipairs({{8192, 1024}, {4096, 4096}, {1024, 32768}}) do
      local m = tc.randn(shape[1], shape[2], {device = "cuda"})
      local w, b = tc.randn(shape[2], {device = "cuda"}), tc.randn(shape[2], {device = "cuda"})
      local tag = shape[1] .. "x" .. shape[2]
      local _, cs = compare("softmax_" .. tag, function(v) return tc.softmax(v, -1) end, 20, m)
      say("softmax_" .. tag .. "_compiled_GBps", 2 * 4 * shape[1] * shape[2] / cs / 1e6)
      local _, cl = compare("layer_norm_" .. tag, function(v) return tc.layer_norm(v, {shape[2]}, w, b) end, 20, m)
      say("layer_norm_" .. tag .. "_compiled_GBps", 2 * 4 * shape[1] * shape[2] / cl / 1e6)
    end
    local r = tc.randn(1024 * 1024, 64, {device = "cuda"})
    compare("sum_last_1Mx64", function(v) return tc.sum(v, 2) end, 20, r)
    compare("sum_leading_1Mx64", function(v) return tc.sum(v, 1) end, 20, r)
  end)
end

local function seed(regional)
  local seed_layers = require "seed_layers"
  tc.config.backend = backend  -- Module:compile (regional) uses the configured backend
  tc.set_default_device("cuda")
  local model = seed_layers.Model({regional = regional})
  model:eval()
  local plain = seed_layers.Model()
  plain:load_state_dict(model:state_dict())
  plain:eval()
  local x = tc.randn(10, 10)
  tc.set_default_device("cpu")
  tc.no_grad(function()
    local cm = regional and model or tc.compile(model, {backend = backend})
    local prefix = regional and "seed_regional" or "seed_whole"
    report_compile(prefix, first_call(cm, x))
    say(prefix .. "_compiled_ms", median_ms(cm, 200, x))
    say(prefix .. "_eager_ms", median_ms(plain, 200, x))
  end)
end
-- ResNet-50 and DenseNet-121 (batch 16, 3x128x128), GPT-2 small (batch 8 x 256 tokens): the first
-- call (cold compile) and per call, TF32 allowed.
function sections.models()
  tc.set_float32_matmul_precision("high")
  local specs = {
    {"resnet50", function() return require("resnet").resnet50() end, function() return tc.randn(16, 3, 128, 128) end},
    {"densenet121", function() return require("densenet").densenet121() end, function() return tc.randn(16, 3, 128, 128) end},
    {"gpt2_small", function() return require("gpt2").gpt2() end, function() return tc.randint(1, 50258, {8, 256}) end},
  }
  for _, s in ipairs(specs) do
    tc.set_default_device("cuda")
    tc.manual_seed(0)
    local model = s[2]()
    model:eval()
    local x = s[3]()
    tc.set_default_device("cpu")
    tc.no_grad(function()
      local cm = tc.compile(model, {backend = backend})
      report_compile(s[1], first_call(cm, x))
      say(s[1] .. "_compiled_ms", median_ms(cm, 20, x))
      say(s[1] .. "_eager_ms", median_ms(model, 20, x))
    end)
  end
end

function sections.seed_whole() seed(false) end
function sections.seed_regional() seed(true) end

assert(sections[section], "unknown section " .. tostring(section))
sections[section]()
