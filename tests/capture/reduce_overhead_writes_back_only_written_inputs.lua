-- mode = "reduce-overhead" (CUDA graphs on the GPU: `tcrun --device=cuda tests/capture/run.lua
-- reduce_overhead`): inputs at a new address on every call are copied into the graph's static
-- buffers, and after a replay only those the graph writes are copied back. A read input that views
-- a written one (x and a row of x passed separately) leaves the write in place: copying the read
-- one back too would restore the row's old values. Elsewhere the compiled function equals eager.
local tc = require "tc"
local h = require "helpers"

local function f(x, row)
  local r = row * 2
  x:add_(1)
  return r
end
local cf = tc.compile(f, {mode = "reduce-overhead"})
for i = 1, 5 do
  local x = tc.randn(4, 3)  -- a new address on every call: copied in
  local xe = x:clone()
  local want = f(xe, xe:narrow(1, 2, 1))
  local got = cf(x, x:narrow(1, 2, 1))
  h.close_to_eager(got, want, "result of call " .. i)
  h.close_to_eager(x, xe, "x after call " .. i)
end

-- One tensor passed twice (copied into one shared buffer), then two tensors: the recording made
-- for one tensor is made again, and every call equals eager.
local g = f
local cg = tc.compile(g, {mode = "reduce-overhead"})
for i = 1, 6 do
  local x, y = tc.randn(5), tc.randn(5)
  local xe, ye = x:clone(), y:clone()
  local two = i > 3
  local want = two and g(xe, ye) or g(xe, xe)
  local got = two and cg(x, y) or cg(x, x)
  h.close_to_eager(got, want, "g: result of call " .. i)
  h.close_to_eager(x, xe, "g: first argument after call " .. i)
  h.close_to_eager(y, ye, "g: second argument after call " .. i)
end
