-- Writes to tables, globals and upvalues in compiled code happen after the graph, in program
-- order, with the values eager Lua would write; reads after writes see the new values.
local tc = require "tc"
local h = require "helpers"

local counter = 0
local state = {calls = 0, history = {}}
local function f(x, t)
  counter = counter + 1
  state.calls = state.calls + 1
  t.last = x * 2
  t.n = (t.n or 0) + 1
  local y = t.last + t.n
  tc_capture_global = (tc_capture_global or 0) + 10
  return y, {y, t.n, tag = "out"}
end
local cf = tc.compile(f)
local x = tc.ones(3)
local t1, t2 = {}, {}
local y1, r1 = cf(x, t1)
local y2, r2 = f(x, t2)
h.close(y1, y2, "result")
h.eq(counter, 2, "upvalue written by both runs")
h.eq(state.calls, 2, "table field")
h.close(t1.last, t2.last, "tensor stored into the argument table")
h.eq(t1.n, 1)
h.eq(r1.tag, "out")
h.eq(r1[2], 1)
assert(rawequal(r1[1], y1), "the returned table holds the returned tensor itself")
h.eq(tc_capture_global, 20, "global")
cf(x, t1)
h.eq(t1.n, 2, "second call reads the written field")
h.eq(counter, 3)
tc_capture_global = nil
