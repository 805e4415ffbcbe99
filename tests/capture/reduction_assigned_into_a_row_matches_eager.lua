-- A reduction written into a view (y[1] = linear(x, w):mean(1), a tiny matmul's reduction read in
-- the write's loop) compiles and gives eager's values: the write kernel once had no root and
-- lowering crashed looking up its fusion trials.
local tc = require "tc"
local F = require "tc.nn.functional"
local h = require "helpers"

local function f(x, w, b)
  local y = tc.ones(3, 4)
  y[1] = F.linear(tc.ones(3, 4), w, b):mean(1)  -- with a bias; the operand made in the graph
  y[3] = F.linear(x, w):mean(1)
  y[2] = x:sum(1) * 2
  return y
end
local x, w, b = tc.randn(3, 4), tc.randn(4, 4), tc.randn(4)
for _, backend in ipairs({"tc", "loopir"}) do
  tc.compiler.reset()
  h.close_to_eager(tc.compile(f, {backend = backend, fullgraph = true})(x, w, b), f(x, w, b), backend)
end
