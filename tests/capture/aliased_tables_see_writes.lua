-- A table written in compiled code and read through another name: reads see the write when the
-- two names are the same table, and the entry is only reused for the same aliasing.
local tc = require "tc"
local h = require "helpers"

local function f(a, b, x)
  a.v = x * 2
  return b.v + 1
end
local cf = tc.compile(f)
local x = tc.ones(2)
local t = {v = tc.zeros(2)}
h.close(cf(t, t, x), x * 2 + 1, "aliased: reads the new value")
local a, b = {v = tc.zeros(2)}, {v = tc.ones(2) * 5}
h.close(cf(a, b, x), tc.ones(2) * 6, "not aliased: reads b's value")
h.close(a.v, x * 2, "the write happened")
h.eq(h.stats().traces, 2, "one entry per aliasing")
h.close(cf(t, t, x), x * 2 + 1, "aliased again: cache hit")
h.eq(h.stats().traces, 2)
