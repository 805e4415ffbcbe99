-- The recompile log line lists the failing guard of every entry (newest first), as torch's does,
-- not only the newest entry's: a third shape names why neither the first nor the second entry ran.
local h = require "helpers"

local out, rc = h.run([[
local tc = require "tc"
local f = tc.compile(function(x) return x * 2 end, {dynamic = false})
f(tc.ones(2))
f(tc.ones(3))
f(tc.ones(2, {dtype = tc.float64}))
]], "--log=recompiles")
h.eq(rc, 0, out)
assert(out:find("(entry 2), triggered by: arg[1]: expected float32[2] on cpu, got float32[3] on cpu", 1, true), out)
assert(out:find("(entry 3), triggered by the guard failure of each entry:\n" ..
                "  - entry 2: arg[1]: expected float32[3] on cpu, got float64[2] on cpu\n" ..
                "  - entry 1: arg[1]: expected float32[2] on cpu, got float64[2] on cpu\n", 1, true), out)
