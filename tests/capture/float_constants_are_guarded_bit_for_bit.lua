-- A float read while tracing is guarded bit for bit: -0.0 and 0.0 are equal under == but print,
-- concatenate and divide differently, so a call with the other one must not reuse the entry; a
-- NaN passes its own guard instead of recompiling on every call.
local tc = require "tc"
local h = require "helpers"

local f = tc.compile(function(a) return a .. "", 1 / a end)
local s1, d1 = f(-0.0)
local s2, d2 = f(0.0)
h.eq(s1, "-0.0", "first call")
h.eq(s2, "0.0", "0.0 after -0.0")
h.eq(d1, -math.huge, "1 / -0.0")
h.eq(d2, math.huge, "1 / 0.0")

tc.compiler.reset()
local g = tc.compile(function(a) return tostring(a) end)
for _ = 1, 5 do h.eq(g(0 / 0):find("nan") ~= nil, true, "nan") end
h.eq(h.stats().recompiles or 0, 0, "a NaN reuses its entry")
