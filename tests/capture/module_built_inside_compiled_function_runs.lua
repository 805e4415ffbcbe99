-- A compiled function that builds an nn module, fills its parameters with p:detach():copy_ and calls it
-- (regression: the tracer looped forever, re-reading the iterator's upvalue `i` that an earlier
-- call of the same closure had written). Module construction breaks the graph (requires_grad
-- writes, tc.nn's registration), but every iterator sees its own writes, no trace runs into the
-- trace budget, and the result is eager's.
local tc = require "tc"
local h = require "helpers"
local nn = tc.nn

local function f(x)
  local m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
  for _, p in ipairs(m:parameters()) do p:detach():copy_(tc.ones(p.shape)) end
  return m(x)
end

local x = tc.randn(2, 4)
local report = tc.compiler.explain(f)(x)
for _, b in ipairs(report.break_reasons) do
  assert(b.code ~= "TC0405" and b.code ~= "TC0410", "a trace ran into the budget: " .. b.reason)
end
local cf = tc.compile(f)
for _ = 1, 3 do h.close(cf(x), f(x), "compiled module built inside") end

-- The same upvalue seen by two calls of one closure, and by another closure sharing it.
local function counter()
  local i = 0
  return function() i = i + 1; return i end, function() return i end
end
local next_i, peek = counter()
local g = tc.compile(function(y)
  local a, b = next_i(), next_i()
  return y * a + b + peek()
end)
local y = tc.ones(3)
h.close(g(y), tc.full({3}, 1 * 1 + 2 + 2), "upvalue writes are seen by later calls")
h.eq(peek(), 2, "the writes happened once each")
