-- scaled_dot_product_attention with dropout_p > 0 under tc.compile: the graph draws the mask eager
-- draws (the same seed, the same result; a later call another mask), and a training graph with
-- it gives eager's gradients under the same seed.
local tc = require "tc"
local h = require "helpers"

local function attend(q, k, v) return tc.scaled_dot_product_attention(q, k, v, nil, 0.3, false) end
tc.manual_seed(1)
local q, k, v = tc.randn(2, 4, 5, 8), tc.randn(2, 4, 6, 8), tc.randn(2, 4, 6, 8)

local cf = tc.compile(attend, {fullgraph = true})
tc.manual_seed(7)
local eager = attend(q, k, v)
tc.manual_seed(7)
local compiled = cf(q, k, v)
h.close_to_eager(compiled, eager, "compiled vs eager")
h.eq((cf(q, k, v) - compiled):abs():max():item() > 0, true, "a later call draws another mask")
local s = tc.compiler.stats()
h.eq(s.fallbacks, 0, "fallbacks")
h.eq(s.graph_breaks, 0, "graph breaks")

-- training: the gradients of q, k and v use the forward's mask
local function loss(q1, k1, v1) return (attend(q1, k1, v1) * v1:sum()):sum() end
local cl = tc.compile(loss, {fullgraph = true})
local function grads(f)
  local a, b, c = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  tc.manual_seed(11)
  local l = f(a, b, c)
  l:backward()
  return {l, a.grad, b.grad, c.grad}
end
local want, got = grads(loss), grads(cl)
for i, name in ipairs {"loss", "q.grad", "k.grad", "v.grad"} do h.close_to_eager(got[i], want[i], name) end
