-- Breaks inside loops and inside inlined callees: the graph so far runs, the instruction runs in
-- stock Lua, and the resume function continues mid-loop with the loop state; results equal eager.
local tc = require "tc"
local h = require "helpers"

local seen = {}
local function note(v) seen[#seen + 1] = v end  -- a Lua function; tostring breaks inside it
local function f(x, n)
  local acc = x
  for i = 1, n do
    acc = acc * 2 + i
    if acc:sum() > 1e6 then acc = acc / 100 end
  end
  return acc
end
local cf = tc.compile(f)
for _, n in ipairs {1, 3, 4} do
  local x = tc.randn(4)
  h.close(cf(x, n), f(x, n), "loop n = " .. n)
end

local function inner(y)
  local z = y + 1
  io.write("")  -- break inside the inlined callee
  return z * 3
end
local function outer(x)
  local a = x:exp()
  local b = inner(a)
  return b - a
end
local co = tc.compile(outer)
local x = tc.randn(6)
h.close(co(x), outer(x), "break inside a callee")
h.close(co(x), outer(x), "again")
local report = tc.compiler.explain(outer)(x)
assert(report.graph_count >= 2, "graphs: " .. report.graph_count)
h.eq(report.break_reasons[1].code, "TC0201")

-- a break in every iteration: resume entries per iteration count up to the limit, then the rest
-- of the loop runs uncompiled with one warning naming the resume point; entries still hit
local out = h.run([[
local tc = require "tc"
local function f(x) for i = 1, 12 do x = x * 2; io.write("") end return x end
local cf = tc.compile(f)
for _ = 1, 3 do assert((cf(tc.ones(2)) - f(tc.ones(2))):abs():max():item() == 0) end
print("hits", tc.compiler.stats().cache_hits)
]])
h.eq(h.count(out, "recompile limit"), 1, "one warning:\n" .. out)
assert(out:find("resume of function <[^>]*:2> at line 2"), out)
assert(out:find("hits\t18", 1, true), out)
