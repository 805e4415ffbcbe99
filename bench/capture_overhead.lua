-- Capture's overhead (a benchmark, not a test). Run from anywhere: tcrun bench/capture_overhead.lua
-- 1. guard check + dispatch of a cache hit, for the seed model compiled whole with 16/64/256
--    layers: the backend's callable returns precomputed outputs, so what is timed is the
--    trampoline, the guards, reading the graph inputs and returning the outputs;
-- 2. the same for foo(x, y) = sin(x) + cos(y);
-- 3. trace time of the whole 64-layer model and of one Layer (best of N).
local root = ((arg and arg[0] or "bench/capture_overhead.lua"):match("^(.*)/[^/]*$") or ".") .. "/.."
package.path = root .. "/scripts/models/?.lua;" .. package.path
local tc = require "tc"
local seed = require "seed_layers"

local function replay_backend(gm, example_inputs)
  local outs = {gm:forward(table.unpack(example_inputs))}
  return function() return table.unpack(outs) end
end

local function per_call_us(f, n, ...)
  f(...)
  local best = math.huge
  for _ = 1, 5 do
    local t0 = tc.utils.perf_counter()
    for _ = 1, n do f(...) end
    best = math.min(best, (tc.utils.perf_counter() - t0) / n * 1e6)
  end
  return best
end

local x = tc.randn(10, 10)
for _, layers in ipairs {16, 64, 256} do
  tc.compiler.reset()
  local cm = tc.compile(seed.Model({num_layers = layers}), {backend = replay_backend})
  print(string.format("cache hit, %3d layers: %8.2f us per call", layers, per_call_us(cm, 2000, x)))
end
tc.compiler.reset()
local foo = tc.compile(function(a, b) return tc.sin(a) + tc.cos(b) end, {backend = replay_backend})
print(string.format("cache hit, foo:        %8.2f us per call", per_call_us(foo, 100000, x, x)))

local function best_trace_ms(model, n)
  local best = math.huge
  for _ = 1, n do
    local r = tc.compiler.explain(model)(x)
    best = math.min(best, r.compile_times[1].trace_ms)
  end
  return best
end
print(string.format("trace, 64-layer model: %8.2f ms", best_trace_ms(seed.Model(), 10)))
print(string.format("trace, one Layer:      %8.3f ms", best_trace_ms(seed.Layer(), 50)))

-- The whole first call as a user sees it (reset, trace, eager backend compile, run): the tracer's
-- own timer above leaves out the work around it.
local function first_call_ms(make, n)
  local m = make()
  local best = math.huge
  for _ = 1, n do
    tc.compiler.reset()
    local t0 = os.clock()
    tc.compile(m, {backend = "eager"})(x)
    best = math.min(best, (os.clock() - t0) * 1e3)
  end
  return best
end
print(string.format("first call, 64-layer:  %8.2f ms", first_call_ms(seed.Model, 20)))
print(string.format("first call, one Layer: %8.3f ms", first_call_ms(seed.Layer, 200)))
