-- The recompile-limit warning, fail_on_recompile's error and the explain report's Recompiles
-- section list the failing guard of every entry (newest first, at most 8 then "... and N more"),
-- as the recompile log line does, not only the newest entry's.
local h = require "helpers"

local out, rc = h.run([[
local tc = require "tc"
local f = tc.compile(function(x) return x * 2 end, {dynamic = false})
for n = 1, 9 do f(tc.ones(n)) end
]])
h.eq(rc, 0, out)
assert(out:find("recompile limit (8) reached for", 1, true), out)
assert(out:find("triggered by the guard failure of each entry:\n" ..
                "  - entry 8: arg[1]: expected float32[8] on cpu, got float32[9] on cpu\n" ..
                "  - entry 7: arg[1]: expected float32[7] on cpu, got float32[9] on cpu\n", 1, true), out)
assert(out:find("  - entry 1: arg[1]: expected float32[1] on cpu, got float32[9] on cpu\n", 1, true), out)

-- past 8 entries the list ends with how many more there are
out, rc = h.run([[
local tc = require "tc"
tc.config.recompile_limit = 11
local f = tc.compile(function(x) return x * 2 end, {dynamic = false})
for n = 1, 12 do f(tc.ones(n)) end
]])
h.eq(rc, 0, out)
assert(out:find("  - entry 4: arg[1]: expected float32[4] on cpu, got float32[12] on cpu\n" ..
                "  - ... and 3 more\n", 1, true), out)
assert(not out:find("entry 3:", 1, true), out)

local tc = require "tc"
local cf = tc.compile(function(x) return x + 1 end, {dynamic = false})
cf(tc.ones(1))
cf(tc.ones(2))
tc.compiler.set_stance("fail_on_recompile")
local ok, err = pcall(cf, tc.ones(3))
tc.compiler.set_stance("default")
h.eq(ok, false, "fail_on_recompile raises")
assert(tostring(err.message):find("would recompile, triggered by the guard failure of each entry:\n" ..
  "  - entry 2: arg[1]: expected float32[2] on cpu, got float32[3] on cpu\n" ..
  "  - entry 1: arg[1]: expected float32[1] on cpu, got float32[3] on cpu", 1, true), tostring(err.message))

out, rc = h.run([[
local tc = require "tc"
local g = tc.compile(function(x) return x - 1 end, {dynamic = false})
g(tc.ones(1)); g(tc.ones(2)); g(tc.ones(3))
]], "--explain")
h.eq(rc, 0, out)
assert(out:find("recompile 2, triggered by the guard failure of each entry:\n" ..
  "      - entry 2: arg[1]: expected float32[2] on cpu, got float32[3] on cpu\n" ..
  "      - entry 1: arg[1]: expected float32[1] on cpu, got float32[3] on cpu\n", 1, true), out)
