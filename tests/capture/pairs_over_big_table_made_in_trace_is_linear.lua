-- pairs over a table made in the trace replays the table's construction once per state of the
-- table, not once per step (found by nextvar.lua of the Lua 5.4 suite, where 8000 keys took tens
-- of seconds to trace). The work is counted, not timed: with the collector stopped, the Lua
-- memory tracing a loop over 2000 keys allocates is about one replay of the table (~0.2 MB);
-- a replay per step allocates 2000 tables of up to 2000 keys (over 100 MB).
local tc = require "tc"
local h = require "helpers"

local function count(n)
  local t = {}
  for i = 1, n do t["k" .. i] = i end
  local sum, keys = 0, 0
  for _, v in pairs(t) do sum = sum + v; keys = keys + 1 end
  return keys, sum
end
local n = 2000
collectgarbage()
collectgarbage("stop")
local before = collectgarbage("count")
local ok, keys, sum = pcall(tc.compile(count), n)
local kb = collectgarbage("count") - before
collectgarbage("restart")
assert(ok, keys)
h.eq(keys, n, "keys")
h.eq(sum, n * (n + 1) // 2, "sum")
assert(kb < 2048, ("tracing pairs over %d keys allocated %.0f KB"):format(n, kb))
h.eq(tc.compiler.stats().fallbacks, 0, "compiled")
h.eq(tc.compiler.stats().traces > 0, true, "traced")
