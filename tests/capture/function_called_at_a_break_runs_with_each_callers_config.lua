-- A Lua function called at a graph break is compiled too (regional compilation), with the
-- configuration of the compiled function that called it: called from a tc.compile with one
-- backend (or mode) and then from one with another, it runs with each one's, not with the first's
-- (tc.optim's Optimizer:step runs so after its first step: under mode="reduce-overhead" its graph
-- must be recorded even when a default-mode compile called it first).
local tc = require "tc"
local h = require "helpers"

local function inner(x)
  local y = x:sin()
  io.write("")  -- a break inside: the caller breaks at its call of inner
  return y + 1
end
local function outer(x) return inner(x * 2) end

local graphs = {}
local function backend(name)
  return function(gm)
    graphs[#graphs + 1] = name .. (gm.code:find("sin", 1, true) and ": sin" or "")
    return function(...) return gm:forward(...) end
  end
end
local x = tc.randn(4)
local a = tc.compile(outer, {backend = backend("a")})
local b = tc.compile(outer, {backend = backend("b")})
for _ = 1, 2 do
  h.close(a(x), outer(x), "a")
  h.close(b(x), outer(x), "b")
end
local seen = table.concat(graphs, "; ")
assert(seen:find("a: sin", 1, true), seen)
assert(seen:find("b: sin", 1, true), "the second compile's backend never got inner's graph: " .. seen)
