-- A Lua number that is a graph input (automatic dynamic after one recompile, or a table field
-- marked with tc.compiler.mark_dynamic(tbl, key) from the first trace) arrives as a 0-dim CPU
-- tensor; on the GPU (`tcrun --device=cuda tests/capture/run.lua number_inputs`) the graph still
-- compiles for the device and each call's value reaches it: under reduce-overhead one CUDA graph
-- is recorded and every replay reads the call's number (copied into a device scalar before it).
-- Results equal eager's at every call; the marked field never recompiles.
local tc = require "tc"
local h = require "helpers"

local on_gpu = tc.get_default_device() ~= "cpu" and tc.cuda.is_available()
local function captures() return on_gpu and tc.cuda.graph_stats().captures or 0 end

local values = {1.5, 2.5, -0.75, 4.0, 0.125, 3.0, -2.0, 7.5}

for _, mode in ipairs {"default", "reduce-overhead"} do
  -- a number argument: a constant in the first graph, an input of the second
  tc.compiler.reset()
  local function f(x, k) return tc.relu(x * k + 1) - k end
  local cf = tc.compile(f, {mode = mode})
  local x = tc.randn(64)
  cf(x, values[1])
  local kernels, captured = h.stats().kernels, captures()
  for i = 2, #values do h.close_to_eager(cf(x, values[i]), f(x, values[i]), mode .. ": k = " .. values[i]) end
  local s = h.stats()
  h.eq(s.recompiles, 1, mode .. ": recompiles")
  h.eq(s.fallbacks, 0, mode .. ": fallbacks")
  assert(s.kernels > kernels, mode .. ": the graph taking k as an input generated no kernel (it runs on eager)")
  if on_gpu and mode == "reduce-overhead" then
    h.eq(captures() - captured, 1, mode .. ": CUDA graphs recorded for the graph taking k")
  end

  -- a marked table field: an input from the first trace
  tc.compiler.reset()
  local cfg = {scale = 2.0}
  tc.compiler.mark_dynamic(cfg, "scale")
  local function g(x2) return (x2 * cfg.scale):sum() + cfg.scale end
  local cg = tc.compile(g, {mode = mode})
  captured = captures()
  for _, v in ipairs(values) do
    cfg.scale = v
    h.close_to_eager(cg(x), g(x), mode .. ": scale = " .. v)
  end
  s = h.stats()
  h.eq(s.traces, 1, mode .. ": traces of the function reading a marked field")
  h.eq(s.recompiles, 0, mode .. ": recompiles of the function reading a marked field")
  if on_gpu and mode == "reduce-overhead" then h.eq(captures() - captured, 1, mode .. ": CUDA graphs recorded") end
end

-- an unmarked field of another table is still specialized (a constant, guarded by value)
do
  tc.compiler.reset()
  local marked, plain = {v = 1.0}, {v = 1.0}
  tc.compiler.mark_dynamic(marked, "v")
  local function k(x) return x * marked.v + plain.v end
  local ck = tc.compile(k, {dynamic = false})
  local x = tc.randn(4)
  for i = 1, 3 do
    marked.v = i + 0.5
    h.close_to_eager(ck(x), k(x), "marked field " .. i)
  end
  h.eq(h.stats().recompiles, 0, "the marked field does not recompile, even with dynamic = false")
  plain.v = 2.0
  h.close_to_eager(ck(x), k(x), "plain field changed")
  h.eq(h.stats().recompiles, 1, "the plain field recompiles")
end
