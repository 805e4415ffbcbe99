-- A tensor mixed with an integer argument: the integer is specialized (a constant in the graph,
-- guarded by value); a new value recompiles, an old one hits its entry.
local tc = require "tc"
local h = require "helpers"

local function f(x, n)
  local y = x
  for _ = 1, n do y = y * 2 end
  return y + n
end
local cf = tc.compile(f)
local x = tc.randn(4, 4)
h.close(cf(x, 3), f(x, 3), "n = 3")
h.close(cf(x, 5), f(x, 5), "n = 5")
h.close(cf(x, 3), f(x, 3), "n = 3 again")
local s = h.stats()
h.eq(s.traces, 2, "one trace per value")
h.eq(s.recompiles, 1, "recompiles")
h.eq(s.cache_hits, 1, "cache hits")
-- floats and integers are different constants (1 vs 1.0 behave differently in Lua)
h.close(cf(x, 2), f(x, 2), "integer 2")

-- varargs: the number of arguments is guarded (select("#", ...) sees trailing nils)
local cv = tc.compile(function(x, ...) return x * select("#", ...) end)
h.close(cv(x, nil), x * 1, "one vararg (nil)")
h.close(cv(x), x * 0, "no varargs")
h.close(cv(x, nil, nil), x * 2, "two varargs")
