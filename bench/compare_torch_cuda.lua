-- tc's side of bench/compare_torch_cuda.sh (issue 12's table): eager, tc.compile default and
-- mode = "reduce-overhead" on the GPU, float32 with TF32 allowed, each time the median of N calls
-- synchronized per call. Usage: tcrun bench/compare_torch_cuda.lua SECTION [BACKEND]
--   seed_whole     the 64-layer seed model (10x10): first call compiled whole (cold compile),
--                  then per call for eager, default and reduce-overhead
--   seed_regional  the same model with each Layer compiled: first call, then per call
--   resnet50 | densenet121   batch 16, 3x128x128: per call (eager, default, reduce-overhead),
--                  first call of each compiled mode (cold compile)
--   gpt2           GPT-2 small on 8x256 token ids: likewise
--   kernels        a 10-op pointwise chain on 64M floats, softmax and layer_norm over the rows of
--                  [16384, 1024], the sum of the 64M floats and the sum over dim 1 of [1M, 16]
--                  (split reductions): ms (GB/s are worked out by the shell script); also under
--                  mode = "max-autotune-no-cudagraphs" (key suffix _tune_nocg)
-- resnet50 and densenet121 also run mode = "max-autotune" (keys <model>_tune_*).
-- Prints "key value" lines (ms; <prefix>_ro_graphs_recorded / _abandoned: CUDA graphs so far).
-- A compiled mode's first call follows the eager runs (eager's kernels already built) and, for
-- reduce-overhead, the default mode's compile in the same process.
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
local common = require "bench_common"

local section, backend = arg[1], arg[2] or "tc"
assert(section, "usage: tcrun bench/compare_torch_cuda.lua SECTION [BACKEND]")
tc.set_float32_matmul_precision("high")
tc.set_default_device("cuda")
tc.manual_seed(0)
local clock = tc.utils.perf_counter
local sync = tc.cuda.synchronize

local function say(key, value)
  print(("%s %.4f"):format(key, value))
  io.stdout:flush()
end

local function median_ms(f, iters, ...)
  for _ = 1, 3 do f(...) end  -- warm-up (reduce-overhead: warm-up call, recording, first replay)
  sync()
  local t = {}
  for i = 1, iters do
    local t0 = clock()
    f(...)
    sync()
    t[i] = (clock() - t0) * 1e3
  end
  table.sort(t)
  return #t % 2 == 1 and t[(#t + 1) // 2] or (t[#t // 2] + t[#t // 2 + 1]) / 2
end

-- The first call of a freshly compiled function (trace + backend compile + run), synchronized.
local function first_call_ms(cf, ...)
  tc.compiler.reset()
  sync()
  local t0 = clock()
  cf(...)
  sync()
  return (clock() - t0) * 1e3
end

local mode_key = {["default"] = "default", ["reduce-overhead"] = "ro", ["max-autotune"] = "tune",
                  ["max-autotune-no-cudagraphs"] = "tune_nocg"}

-- eager, default and reduce-overhead (and `more` modes) per call, and the first call of each
-- compiled mode; max-autotune also: launches tuned and the tuning's ms in the first call, and a
-- second first call (the choices then come from the disk cache)
-- TC_BENCH_MODES="ro" (keys of mode_key and "eager", comma-separated): only those (a short
-- device call); the peer script reads it too.
local only = os.getenv("TC_BENCH_MODES")
local function wanted(key) return not only or ("," .. only .. ","):find("," .. key .. ",", 1, true) ~= nil end

local function three_ways(prefix, model, x, iters, more)
  tc.no_grad(function()
    if wanted("eager") then say(prefix .. "_eager_ms", median_ms(model, iters, x)) end
    local modes = {"default", "reduce-overhead"}
    for _, m in ipairs(more or {}) do modes[#modes + 1] = m end
    for _, mode in ipairs(modes) do
      if not wanted(mode_key[mode]) then goto continue end
      local key = prefix .. "_" .. mode_key[mode]
      local cm = tc.compile(model, {backend = backend, mode = mode})
      say(key .. "_first_call_ms", first_call_ms(cm, x))
      if mode:find("max%-autotune") then
        local s = tc.compiler.stats()
        say(key .. "_tuned_launches", s.tuned_kernels)
        say(key .. "_tune_only_ms", s.tune_ms)
        say(key .. "_warm_first_call_ms", first_call_ms(tc.compile(model, {backend = backend, mode = mode}), x))
        say(key .. "_warm_tuned_cached", tc.compiler.stats().tuned_cached)
      end
      say(key .. "_ms", median_ms(cm, iters, x))
      ::continue::
    end
    local g = tc.cuda.graph_stats()
    say(prefix .. "_ro_graphs_recorded", g.captures)
    say(prefix .. "_ro_graphs_abandoned", g.abandoned)
  end)
end

local sections = {}

local function seed(regional)
  local seed_layers = require "seed_layers"
  tc.config.backend = backend  -- Module:compile (regional) uses the configured backend
  local x = tc.randn(10, 10)
  if not regional then
    local model = seed_layers.Model()
    model:eval()
    three_ways("seed", model, x, 200)
    return
  end
  -- one eager call of the same model first, as the whole model's section does (three_ways times
  -- eager before compiling): the first call then times compiling, not cuBLAS's and the eager
  -- kernels' first use by the model's uncompiled first Linear (the peer does the same)
  tc.no_grad(function() seed_layers.Model():eval()(x) end)
  sync()
  for _, mode in ipairs({"default", "reduce-overhead"}) do
    tc.config.mode = mode
    local model = seed_layers.Model({regional = true})
    model:eval()
    tc.no_grad(function()
      local key = "seed_regional_" .. (mode == "default" and "default" or "ro")
      say(key .. "_first_call_ms", first_call_ms(model, x))
      local s = tc.compiler.stats()
      say(key .. "_trace_ms", s.trace_ms)
      say(key .. "_backend_compile_ms", s.backend_compile_ms)
      say(key .. "_ms", median_ms(model, 200, x))
    end)
  end
  tc.config.mode = "default"
end
function sections.seed_whole() seed(false) end
function sections.seed_regional() seed(true) end

local function vision(name)
  return function()
    local model = require(name == "resnet50" and "resnet" or "densenet")[name]()
    model:eval()
    three_ways(name, model, tc.randn(16, 3, 128, 128), 20, {"max-autotune"})
  end
end
sections.resnet50 = vision("resnet50")
sections.densenet121 = vision("densenet121")

function sections.gpt2()
  local model = require("gpt2").gpt2()
  model:eval()
  three_ways("gpt2", model, tc.randint(1, 50258, {8, 256}), 20)
end

function sections.kernels()
  local n = 64 * 1024 * 1024
  local x = tc.randn(n)
  local chain = common.chain
  local m = tc.randn(16384, 1024)
  local w, b = tc.randn(1024), tc.randn(1024)
  local tall = tc.randn(1024 * 1024, 16)
  local function softmax(v) return tc.softmax(v, -1) end
  local function layer_norm(v) return tc.layer_norm(v, {1024}, w, b) end
  local function sum_all(v) return tc.sum(v) end
  local function sum_dim0(v) return tc.sum(v, 1) end
  tc.no_grad(function()
    local y = tc.empty(n)
    say("copy_ms", median_ms(function() y:copy_(x) end, 20))
    for _, k in ipairs({{"chain", chain, x}, {"softmax", softmax, m}, {"layer_norm", layer_norm, m},
                        {"sum_all", sum_all, x}, {"sum_dim0", sum_dim0, tall}}) do
      local name, f, arg1 = k[1], k[2], k[3]
      say(name .. "_eager_ms", median_ms(f, 20, arg1))
      say(name .. "_default_ms", median_ms(tc.compile(f, {backend = backend}), 20, arg1))
      say(name .. "_ro_ms", median_ms(tc.compile(f, {backend = backend, mode = "reduce-overhead"}), 20, arg1))
      say(name .. "_tune_nocg_ms", median_ms(tc.compile(f, {backend = backend, mode = "max-autotune-no-cudagraphs"}), 20, arg1))
    end
  end)
end

assert(sections[section], "unknown section " .. tostring(section))
sections[section]()
