-- A number that changes between calls recompiles once, then is unspecialized (automatic dynamic,
-- as torch.compile does for scalars): passed through without a value guard, and a graph input
-- (a 0-dim wrapped number) where a tensor op takes it. Values read at a break (:item(), a host
-- call) in resume functions behave the same. Where the trace needs the value (a loop count),
-- it is still guarded by equality, and reaching the recompile limit warns, resume functions too.
local tc = require "tc"
local h = require "helpers"

local function scale(x, k) return x * k + k, {k = k} end
local cs = tc.compile(scale)
local x = tc.randn(3)
for k = 1, 12 do
  local y, t = cs(x, k)
  h.close(y, x * k + k, "integer k = " .. k)
  h.eq(t.k, k, "k passed through")
end
for _, k in ipairs {0.5, 1.5, 2.25} do h.close(cs(x, k), x * k + k, "float k = " .. k) end
local s = h.stats()
h.eq(s.traces, 3, "one trace, one recompile, one more for floats")
h.eq(s.recompiles, 2, "recompiles")
h.eq(s.fallbacks, 0, "fallbacks")
-- an integer tensor times a dynamic float promotes as eager (a Lua float is a wrapped number)
local xi = tc.tensor({1, 2, 3}, {dtype = tc.int32})
h.eq(cs(xi, 2.5).dtype, scale(xi, 2.5).dtype, "promotion as eager")
h.close(cs(xi, 2.5), scale(xi, 2.5), "int tensor, float k")

-- values read at a break
tc.compiler.reset()
local function by_item(x) local v = x:sum():item(); return x * v end
local function by_clock(x) local t = os.clock(); return x + t - t end
local ci, cc = tc.compile(by_item), tc.compile(by_clock)
for i = 1, 12 do
  local xi2 = tc.full({3}, i)
  h.close(ci(xi2), by_item(xi2), ":item() " .. i)
  h.close(cc(xi2), xi2, "os.clock() " .. i)
end
s = h.stats()
h.eq(s.fallbacks, 0, "no function reached the recompile limit")
assert(s.traces <= 6, "traces: " .. s.traces)

-- a value the trace needs: recompiles up to the limit, then one warning naming the resume point
local out = h.run([[
local tc = require "tc"
local function f(x)
  local n = math.floor(x:sum():item())
  for _ = 1, n do x = x + 1 end
  return x
end
local cf = tc.compile(f)
for i = 1, 12 do assert((cf(tc.full({2}, i)) - f(tc.full({2}, i))):abs():max():item() == 0) end
]])
h.eq(h.count(out, "recompile limit %(8%) reached"), 1, "one warning:\n" .. out)
assert(out:find("resume of function <[^>]*:2> at line 3"), out)
