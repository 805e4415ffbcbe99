-- A foreign C function between tensor ops (io.write, os.clock): a break; the graph before it
-- runs, the call runs in stock Lua, tracing resumes after it: 2 graphs, results equal eager.
local tc = require "tc"
local h = require "helpers"

local log = {}
local function f(x)
  local y = x:relu() * 3
  log[#log + 1] = os.clock() >= 0
  return y:sigmoid() + 1
end
local cf = tc.compile(f)
local x = tc.randn(5, 5)
h.close(cf(x), f(x), "result")
h.close(cf(x), f(x), "second call")
h.eq(#log, 4, "the foreign call and the table write ran every time")

local report = tc.compiler.explain(f)(x)
h.eq(report.graph_count, 2, "graphs")
h.eq(report.graph_break_count, 1, "breaks")
h.eq(report.break_reasons[1].code, "TC0201", "code")
assert(report.break_reasons[1].reason:find("os.clock", 1, true), report.break_reasons[1].reason)

-- print with tensor arguments: the tensor the graph computed reaches print
local out = h.run([[
local tc = require "tc"
local f = tc.compile(function(x) local y = x + 1; print(y:sum():item() == 8); return y * 2 end)
print(f(tc.ones(2, 2)):sum():item())
]])
assert(out:find("true\n16.0", 1, true), out)
