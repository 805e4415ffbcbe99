-- pairs over a table made in the trace replays the table's construction once per state of the
-- table, not once per step: a loop over 8000 keys traces in well under a second (it replayed
-- 8000 keys per step before, tens of seconds; found by nextvar.lua of the Lua 5.4 suite).
local tc = require "tc"
local h = require "helpers"

local function count(n)
  local t = {}
  for i = 1, n do t["k" .. i] = i end
  local sum, keys = 0, 0
  for _, v in pairs(t) do sum = sum + v; keys = keys + 1 end
  return keys, sum
end
local t0 = os.clock()
local keys, sum = tc.compile(count)(8000)
local took = os.clock() - t0
h.eq(keys, 8000, "keys")
h.eq(sum, 8000 * 8001 // 2, "sum")
assert(took < 5, ("pairs over 8000 keys took %.1f s to trace"):format(took))
h.eq(tc.compiler.stats().fallbacks, 0, "compiled")
