-- Closures made in compiled code share their captured locals with the enclosing function (cells,
-- as in Lua): later writes are seen, counters in closures work, local recursive functions work.
local tc = require "tc"
local h = require "helpers"

local function f(x)
  local k = 1
  local get = function() return k end
  k = 2  -- seen by get()
  local n = 0
  local function inc(v) n = n + 1 return v + n end
  local function fact(m) if m <= 1 then return 1 end return m * fact(m - 1) end
  local adders = {}
  for i = 1, 3 do adders[i] = i * 10 end
  return x * get() + inc(inc(x)) + n + fact(4) + adders[3]
end
local cf = tc.compile(f)
local x = tc.randn(3)
h.close(cf(x), f(x))
h.eq(h.stats().graph_breaks, 0, "no breaks")
