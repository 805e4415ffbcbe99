-- x.grad of a tensor from outside is a graph input guarded at its path (a tensor of that shape,
-- dtype and device, or nil), and x.grad = v is a recorded effect that later reads in the trace see:
-- an optimizer's zero_grad traces into the graph instead of breaking it. The guard is checked on
-- every call, fast path included: backward and zero_grad change .grad without touching a table.
local tc = require "tc"
local nn = require "tc.nn"
local optim = require "tc.optim"
local h = require "helpers"

tc.compiler.reset()
local w = tc.randn(3, {requires_grad = true})
local double_grad = tc.compile(function(p)
  local g = p.grad
  if g == nil then return 0 end
  return g * 2
end, {fullgraph = true})
h.eq(double_grad(w), 0, "no grad yet")
w.grad = tc.ones(3)
h.close(double_grad(w), tc.full({3}, 2), "grad read as an input")
local s0 = h.stats()
for i = 1, 6 do  -- same spec: no retrace, whatever the values; the fast path still sees nil
  w.grad = tc.ones(3) * i
  h.close(double_grad(w), tc.full({3}, 2 * i), "grad of call " .. i)
  w.grad = nil
  h.eq(double_grad(w), 0, "grad removed before call " .. i)
end
h.eq(h.stats().traces, s0.traces, "grads of the same spec reuse the entries")

-- a nested path
local mod = {lin = nn.Linear(2, 2)}
mod.lin.weight.grad = tc.zeros(2, 2)
local got = tc.compile(function(m) return m.lin.weight.grad + 1 end)(mod)
h.close(got, tc.ones(2, 2), "nested path")

-- writes: seen by later reads in the trace, applied after the graph
local set_then_read = tc.compile(function(p, g)
  p.grad = g * 3
  local a = p.grad + 1
  p.grad = nil
  return a, p.grad
end, {fullgraph = true})
local a, none = set_then_read(w, tc.ones(3))
h.close(a, tc.full({3}, 4), "read after the write")
h.eq(none, nil, "read after clearing")
h.eq(w.grad, nil, "cleared after the call")
local keep = tc.compile(function(p, g) p.grad = g * 3 end, {fullgraph = true})
keep(w, tc.ones(3))
h.close(w.grad, tc.full({3}, 3), "assigned after the call")

-- an optimizer's zero_grad in one graph with the forward (no break), as eager
for _, set_to_none in ipairs {true, false} do
  tc.compiler.reset()
  tc.manual_seed(0)
  local model = nn.Linear(4, 2)
  local opt = optim.SGD(model:parameters(), {lr = 0.1})
  local f = tc.compile(function(x)
    opt:zero_grad({set_to_none = set_to_none})
    return model(x):sum()
  end, {fullgraph = true})
  local x = tc.randn(3, 4)
  for step = 1, 3 do
    local loss = f(x)
    for _, p in ipairs(model:parameters()) do
      if set_to_none then
        h.eq(p.grad, nil, "set_to_none: grad after zero_grad, step " .. step)
      elseif p.grad ~= nil then
        h.eq(p.grad:abs():sum():item(), 0, "zeroed grad, step " .. step)
      end
    end
    loss:backward()
    for _, p in ipairs(model:parameters()) do assert(p.grad ~= nil, "backward gave a grad") end
    opt:step()
  end
  h.eq(h.stats().graph_breaks, 0, "zero_grad traced")
  assert(h.stats().traces <= 2, "one entry without grads, one with: " .. h.stats().traces)
end
