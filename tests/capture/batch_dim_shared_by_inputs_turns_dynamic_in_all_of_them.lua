-- A batch size that changes in every input at once (x and its target y) turns dynamic in all of
-- them at the first recompile, and the inputs' equal dims share one size symbol (duck sizing), so
-- the dynamic graph lowers instead of running on the eager backend ("the graph's sizes do not
-- follow its dynamic dims"); training steps likewise. Dims that shared a symbol but differ in a
-- later call run that call on eager, with eager's results.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local h = require "helpers"

tc.manual_seed(0)
local lin = nn.Linear(4, 1)
local function loss(x, y) return ((lin(x) - y) ^ 2):mean() end
local cl = tc.compile(loss)
for _, b in ipairs {8, 8, 4, 7, 3, 5} do
  local x, y = tc.randn(b, 4), tc.randn(b, 1)
  h.close(cl(x, y), loss(x, y), "loss at batch " .. b)
end
local s = h.stats()
h.eq(s.traces, 2, "the first size, then one dynamic graph for every other")
h.eq(s.fallback_nodes, 0, "no graph ran on the eager backend")

-- a training step: the forward graph is dynamic and compiled
tc.compiler.reset()
local step = tc.compile(function(x, y)
  local l = F.mse_loss(lin(x), y)
  l:backward()
  return l
end)
for _, b in ipairs {8, 8, 4, 7, 3} do
  local x, y = tc.randn(b, 4), tc.randn(b, 1)
  lin:zero_grad()
  local got = step(x, y)
  local g = lin.weight.grad:clone()
  lin:zero_grad()
  local want = F.mse_loss(lin(x), y)
  want:backward()
  h.close(got, want, "training loss at batch " .. b)
  h.close(g, lin.weight.grad, "weight gradient at batch " .. b)
end
s = h.stats()
h.eq(s.recompiles, 1, "one recompile for the changing batch")
h.eq(s.fallback_nodes, 0, "no graph ran on the eager backend")

-- dims that were equal (and share a symbol) but differ later: that call runs on eager
tc.compiler.reset()
local function two(a, b) return a:sum() * 2 + b:sum() end
local ct = tc.compile(two)
for _, n in ipairs {{8, 8}, {4, 4}, {6, 6}, {5, 9}, {9, 5}, {3, 3}} do
  local a, b = tc.randn(n[1]), tc.randn(n[2])
  h.close(ct(a, b), two(a, b), ("sizes %d and %d"):format(n[1], n[2]))
end
h.eq(h.stats().traces, 2, "no retrace when the shared dims part")
print("ok")
