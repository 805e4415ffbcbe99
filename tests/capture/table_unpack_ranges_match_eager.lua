-- table.unpack with explicit ranges (regression: the tracer read indices 1..j up to the range's
-- end, so unpack(t, maxinteger - 1, maxinteger) ran out of memory, and values past the border
-- of a real table were read as nil). Long ranges are left to stock Lua ("too many results").
local tc = require "tc"
local h = require "helpers"
local maxI, minI = math.maxinteger, math.mininteger

local function f(x)
  local t = {[maxI - 1] = 12, [maxI] = 23}
  local a, b = table.unpack(t, maxI - 1, maxI)
  local u = {[minI] = 1.5, [minI + 1] = 2.5}
  local c, d = table.unpack(u, minI, minI + 1)
  local e = select("#", table.unpack({}, maxI, minI))
  local ok = pcall(table.unpack, {}, 1, maxI)
  local g, k = table.unpack({1, 2, 3}, 2)
  return x * (a + b + c + d + e + g + k), ok
end
local outside = {[5] = 7, [6] = 8}
local function r(x, t) local a, b = table.unpack(t, 5, 6); return x * (a + b) end
local x = tc.ones(2)
local y, ok = tc.compile(f)(x)
local ye, oke = f(x)
h.close(y, ye, "ranges")
h.eq(ok, oke, "too many results")
h.close(tc.compile(r)(x, outside), r(x, outside), "past the border of an outside table")
