-- mode = "reduce-overhead" copies inputs that are at a new address each call into the graph's
-- static buffers before each replay, dense ones as byte ranges batched 16 to a launch
-- (`tcrun --device=cuda tests/capture/run.lua reduce_overhead_copies`; on the CPU it checks
-- results only): 21 fresh inputs of odd byte sizes (more than one batch, sizes that are no
-- multiple of 16 bytes) and a transposed one (copied on its own) give eager's results at every
-- replay, and every one of them is counted once per replay.
local tc = require "tc"
local h = require "helpers"

local on_gpu = tc.get_default_device():sub(1, 4) == "cuda"
local sizes = {}
for i = 1, 21 do sizes[i] = 3 * i + (i % 5) end  -- 3, 7, 11, ... elements

local function f(ts, m)
  local acc = m:sum(1)
  for i, t in ipairs(ts) do acc = acc + t:sum() * i end
  return acc
end
local cf = tc.compile(f, {mode = "reduce-overhead"})
local function fresh()
  local ts = {}
  for i, n in ipairs(sizes) do ts[i] = tc.randn(n) end
  return ts, tc.randn(5, 4):t()
end
for i = 1, 3 do  -- warm-up, a second warm-up (the inputs moved), the recording
  local ts, m = fresh()
  h.close_to_eager(cf(ts, m), f(ts, m), "call " .. i)
end
local s0 = on_gpu and tc.cuda.graph_stats() or nil
for i = 1, 4 do
  local ts, m = fresh()
  h.close_to_eager(cf(ts, m), f(ts, m), "replay " .. i)
end
if on_gpu then
  local s = tc.cuda.graph_stats()
  h.eq(s.replays - s0.replays, 4, "replays")
  h.eq(s.inputs_copied - s0.inputs_copied, 4 * 22, "inputs copied in 4 replays")
  local bytes = 20 * 4  -- the transposed 4x5 input
  for _, n in ipairs(sizes) do bytes = bytes + 4 * n end
  h.eq(s.bytes_copied - s0.bytes_copied, 4 * bytes, "bytes copied in 4 replays")
end
