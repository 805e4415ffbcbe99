-- A leaf's first gradient becomes its .grad without a copy only when nothing else holds it (as
-- PyTorch's AccumulateGrad steals the buffer): .grad never shares memory with a tensor the user
-- still holds (a gradient a hook kept, the gradient passed to backward, a view of either) or with
-- another leaf's .grad, so writing into .grad changes nothing else; gradients stay correct and
-- accumulate across backwards.
local tc = require "tc"

local f64 = {dtype = tc.float64}

local function same(got, want, what)
  local d = (got - want):abs():amax():item()
  if d ~= 0 then error(("%s: max |difference| %g\ngot  %s\nwant %s"):format(what, d, tostring(got), tostring(want)), 2) end
end

local T = {}

-- view's backward hands x a view of y's gradient, which the hook kept
function T.grad_does_not_alias_a_gradient_a_hook_kept()
  local x = tc.randn(2, 3, f64):requires_grad_()
  local w = tc.randn(6, f64)
  local y = x:view(6)
  local kept
  y:register_hook(function(g) kept = g end)
  local loss = (y * w):sum()
  loss:backward()
  same(x.grad, w:view(2, 3), "x.grad")
  x.grad:add_(100)
  same(kept, w, "the kept gradient after writing into x.grad")
end

function T.grad_does_not_alias_the_gradient_passed_to_backward()
  local x = tc.randn(3, f64):requires_grad_()
  local g = tc.tensor({1, 2, 3}, f64)
  x:backward(g)  -- the leaf itself: g is its gradient
  same(x.grad, g, "x.grad")
  x.grad:mul_(10)
  same(g, tc.tensor({1, 2, 3}, f64), "g after writing into x.grad")

  local z = tc.randn(2, 3, f64):requires_grad_()
  local gz = tc.ones(6, f64)
  z:view(6):backward(gz)  -- z gets a view of gz
  z.grad:add_(1)
  same(gz, tc.ones(6, f64), "the gradient passed to backward after writing into z.grad")
end

-- add's backward passes one gradient to both leaves
function T.two_leaves_given_one_gradient_get_separate_grads()
  local a = tc.randn(4, f64):requires_grad_()
  local b = tc.randn(4, f64):requires_grad_()
  local loss = ((a + b) * 3):sum()
  loss:backward()
  a.grad:add_(1)
  same(a.grad, tc.full({4}, 4, f64), "a.grad")
  same(b.grad, tc.full({4}, 3, f64), "b.grad after writing into a.grad")
end

function T.stolen_grads_are_correct_and_accumulate()
  local x = tc.randn(5, 4, f64):requires_grad_()
  local w = tc.randn(4, 3, f64):requires_grad_()
  local function loss() return (x:matmul(w):tanh() * 2):sum() end
  loss():backward()
  local gx, gw = x.grad:clone(), w.grad:clone()
  -- against the same gradients through tc.autograd.grad (never stored into .grad)
  local rx, rw = table.unpack(tc.autograd.grad({loss()}, {x, w}))
  same(gx, rx, "x.grad")
  same(gw, rw, "w.grad")
  loss():backward()  -- accumulates
  same(x.grad, gx * 2, "accumulated x.grad")
  same(w.grad, gw * 2, "accumulated w.grad")
  x.grad:zero_()
  loss():backward({retain_graph = true})
  same(x.grad, gx, "x.grad after zeroing in place")
end

return T
