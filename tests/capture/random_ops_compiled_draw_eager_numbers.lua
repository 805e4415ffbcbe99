-- Random ops inside compiled graphs draw the numbers eager draws for the same seed, and leave the
-- generator where eager leaves it: compiling a graph never draws (lowering once ran randn for
-- real while building its fakes, so the compiled call drew the next numbers).
local tc = require "tc"
local h = require "helpers"

local function f(x)
  local a = tc.randn(3, 4)
  local b = tc.rand(2) + x
  return a * 2, b, tc.zeros(2) + 1
end

for _, backend in ipairs({"tc", "cpu", "loopir", "eager"}) do
  tc.compiler.reset()  -- the code cache is per function, not per backend
  local x = tc.ones(2)
  tc.manual_seed(7)
  local e1, e2, e3 = f(x)
  local after_eager = tc.randn(1)
  tc.manual_seed(7)
  local c1, c2, c3 = tc.compile(function(x) return f(x) end, {backend = backend})(x)  -- compiles, then runs
  local after_compiled = tc.randn(1)
  h.close(c1, e1, backend .. " randn", 0)
  h.close(c2, e2, backend .. " rand", 0)
  h.close(c3, e3, backend .. " zeros", 0)
  h.close(after_compiled, after_eager, backend .. " generator state after the call", 0)
end

-- with dynamic dims (after the second size) lowering recomputes every node's sizes symbolically:
-- that never draws either
local function g(x) return x * 2, tc.randn(3) end
for _, backend in ipairs({"tc", "loopir"}) do
  tc.compiler.reset()
  local cg = tc.compile(g, {backend = backend})
  for n = 2, 5 do
    local x = tc.ones(n)
    tc.manual_seed(3)
    local _, e = g(x)
    local after_eager = tc.rand(1)
    tc.manual_seed(3)
    local _, c = cg(x)
    local after_compiled = tc.rand(1)
    h.close(c, e, backend .. " randn beside a dynamic dim, size " .. n, 0)
    h.close(after_compiled, after_eager, backend .. " generator state, size " .. n, 0)
  end
end
