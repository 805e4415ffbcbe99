-- `==` and `~=` between two different tables call __eq when either metatable has one, for tables
-- made in the compiled code as for tables from outside (found by the fuzzer: two Vec.new(...)
-- made in the trace compared unequal without calling Vec.__eq, so the other branch ran).
local tc = require "tc"
local h = require "helpers"

local Vec = {}
Vec.__index = Vec
Vec.__eq = function(a, b) return a.n == b.n end
local function new(n) return setmetatable({n = n}, Vec) end
local outside = new(1)

local cases = {
  {"two tables made here", function(x, n) if new(n) == new(1) then return x + 1 end return x - 1 end},
  {"~= of two tables made here", function(x, n) if new(n) ~= new(1) then return x - 1 end return x + 1 end},
  {"made here and from outside", function(x, n) if new(n) == outside then return x + 1 end return x - 1 end},
  {"from outside and made here", function(x, n) if outside == new(n) then return x + 1 end return x - 1 end},
  {"a plain table made here", function(x, n) if {n = n} == new(n) then return x + 1 end return x - 1 end},
  {"the same table made here", function(x, n) local t = new(n) if t == t then return x + 1 end return x - 1 end},
}
local x = tc.ones(2)
for _, c in ipairs(cases) do
  local name, fn = c[1], c[2]
  local cf = tc.compile(fn)
  for _, n in ipairs({1, 2, 1}) do h.close(cf(x, n), fn(x, n), ("%s, n = %d"):format(name, n)) end
end
