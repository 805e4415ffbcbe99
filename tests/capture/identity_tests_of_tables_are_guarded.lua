-- `==` and rawequal between two real tables (arguments, upvalues, fields) are decided by
-- identity; a cached entry must not reuse the answer when a later call passes the same table
-- where the trace saw another one, or the reverse (found by the fuzzer: the second call of
-- f(x, v1) took the branch of the first).
local tc = require "tc"
local h = require "helpers"

local shared = {1}
local cases = {
  {"rawequal with an upvalue", function(x, t) if rawequal(t, shared) then return x + 1 end return x - 1 end},
  {"== with an upvalue", function(x, t) if t == shared then return x + 1 end return x - 1 end},
  {"~= with an upvalue", function(x, t) if t ~= shared then return x - 1 end return x + 1 end},
  {"rawequal of two arguments", function(x, t, u) if rawequal(t, u or shared) then return x + 1 end return x - 1 end},
  {"== of a field and an argument", function(x, t, u) if (u or {f = shared}).f == t then return x + 1 end return x - 1 end},
}
local x = tc.ones(2)
for _, c in ipairs(cases) do
  local name, fn = c[1], c[2]
  local cf = tc.compile(fn)
  for i, args in ipairs({{{1}, false}, {shared, false}, {{1}, false}, {shared, shared}, {{1}, {1}}, {shared, {1}}}) do
    h.close(cf(x, table.unpack(args)), fn(x, table.unpack(args)), ("%s, call %d"):format(name, i))
  end
end
