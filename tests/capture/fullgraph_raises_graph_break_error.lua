-- fullgraph=true: the first break raises tc.GraphBreakError naming the reason, code, file:line,
-- the source line and a hint.
local tc = require "tc"
local h = require "helpers"

local function bar(b)
  if b:sum() < 0 then b = -b end
  return b
end
local cf = tc.compile(bar, {fullgraph = true})
local ok, err = pcall(cf, tc.randn(4))
h.eq(ok, false, "raises")
h.eq(getmetatable(err), tc.GraphBreakError, "a tc.GraphBreakError")
h.eq(err.code, "TC0101", "code")
h.eq(err.line, 7, "line")
assert(err.file:find("fullgraph_raises_graph_break_error.lua", 1, true), err.file)
h.eq(err.source_line, "if b:sum() < 0 then b = -b end", "source line")
assert(tostring(err):find("Hint:", 1, true), tostring(err))
assert(err.message:find("data-dependent branch", 1, true), err.message)

-- without a break, fullgraph compiles normally
local ok2 = pcall(tc.compile(function(x) return x + 1 end, {fullgraph = true}), tc.ones(2))
h.eq(ok2, true, "no break, no error")
-- tcrun --fullgraph makes every compiled function strict
local out, rc = h.run([[
local tc = require "tc"
local f = tc.compile(function(x) print("hi"); return x end)
f(tc.ones(1))
]], "--fullgraph")
assert(out:find("TC0201", 1, true), out)
h.eq(rc, 1, "exit status")

-- the same function compiled first without fullgraph (its cache holds a break entry), then
-- with: the strict compile still raises on the cached break
local function baz(b)
  if b:sum() < 0 then b = -b end
  return b
end
local lenient = tc.compile(baz)
lenient(tc.randn(4))
local ok3, err3 = pcall(tc.compile(baz, {fullgraph = true}), tc.randn(4))
h.eq(ok3, false, "a cached break still raises under fullgraph")
h.eq(err3.code, "TC0101", "cached break code")
h.eq(lenient(tc.ones(4)):sum():item(), 4, "the lenient compile keeps working")
