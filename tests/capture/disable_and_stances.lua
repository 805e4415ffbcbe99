-- tc.compiler.disable: a disabled function is called, not traced (a TC0202 break), and
-- tc.compile of it returns it unchanged; set_stance("force_eager") runs everything uncompiled.
local tc = require "tc"
local h = require "helpers"

local function helper(y) return y * 3 end
tc.compiler.disable(helper)
local function f(x) return helper(x + 1) - 1 end
local report = tc.compiler.explain(f)(tc.ones(2))
h.eq(report.break_reasons[1].code, "TC0202", "disabled call breaks")
local cf = tc.compile(f)
h.close(cf(tc.ones(2)), f(tc.ones(2)), "result")
h.eq(tc.compile(helper), helper, "compile of a disabled function")

tc.compiler.reset()
tc.compiler.set_stance("force_eager")
local g = tc.compile(function(x) return x + 1 end)
h.close(g(tc.ones(2)), tc.ones(2) + 1)
h.eq(h.stats().traces, 0, "force_eager traces nothing")
tc.compiler.set_stance("default")
h.close(g(tc.ones(2)), tc.ones(2) + 1)
h.eq(h.stats().traces, 1, "default traces again")
