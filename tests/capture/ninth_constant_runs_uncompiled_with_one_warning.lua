-- 9 distinct values of a number the trace needs (a loop count: unrolled, so never dynamic): 8
-- entries, then the 9th call runs uncompiled with one loud warning (and so does every later
-- call); fail_on_recompile raises instead.
local tc = require "tc"
local h = require "helpers"

local out = h.run([[
local tc = require "tc"
local function f(x, k) for _ = 1, k do x = x * 2 end return x end
local cf = tc.compile(f)
local x = tc.ones(2)
for k = 1, 12 do assert((cf(x, k) - f(x, k)):abs():max():item() == 0) end
local s = tc.compiler.stats()
print("traces", s.traces, "fallbacks", s.fallbacks)
]])
h.eq(h.count(out, "recompile limit %(8%) reached"), 1, "one warning:\n" .. out)
assert(out:find("traces\t8\tfallbacks\t1", 1, true), out)
assert(out:find("arg[2]: expected 8, got 9", 1, true), out)

local cf = tc.compile(function(x, k) return x + k end)
cf(tc.ones(2), 1)
tc.compiler.set_stance("fail_on_recompile")
local ok, err = pcall(cf, tc.ones(2), 2)
h.eq(ok, false, "fail_on_recompile raises")
h.eq(err.kind, "CompileError", "error kind")
h.close(cf(tc.ones(2), 1), tc.ones(2) + 1, "cached entry still runs")
tc.compiler.set_stance("force_eager")
h.close(cf(tc.ones(2), 3), tc.ones(2) + 3, "force_eager")
tc.compiler.set_stance("default")
