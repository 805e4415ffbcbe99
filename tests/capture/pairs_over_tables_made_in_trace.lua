-- pairs/next over a table made in the compiled code visit keys in the order Lua would (the
-- table's construction is replayed on a real table); outside tables: pairs_over_outside_tables_guards_key_order.lua.
local tc = require "tc"
local h = require "helpers"

local function f(x)
  local t = {dtype = "a", device = "b", n = 3, [10] = 4, 7, 8}
  t.extra = 1
  t.device = nil
  local keys = {}
  for k, v in pairs(t) do keys[#keys + 1] = tostring(k) .. "=" .. tostring(v) end
  return x + #keys, table.concat(keys, ",")
end
local cf = tc.compile(f)
local x = tc.ones(2)
local r1, s1 = cf(x)
local r2, s2 = f(x)
h.close(r1, r2)
h.eq(s1, s2, "iteration order")
h.eq(h.stats().graph_breaks, 0, "no break")
-- gpt2 passes an options table with two keys through tc.arange's option check
local g = tc.compile(function(n) return tc.arange(1, n + 1, 1, {dtype = tc.int64, device = "cpu"}) end)
h.close(g(5), tc.arange(1, 6, 1, {dtype = tc.int64}), "arange with options")
h.eq(h.stats().graph_breaks, 0, "no break for options")
