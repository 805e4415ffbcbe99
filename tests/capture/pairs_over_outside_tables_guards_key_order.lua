-- pairs/next over a table from outside the compiled function trace in one graph: the trace
-- follows the real table's `next` order, and a KEY_ORDER guard makes a later call with other
-- keys (or the same keys in another order) recompile. Results and order equal eager.
local tc = require "tc"
local nn = require "tc.nn"
local h = require "helpers"

local x = tc.ones(3)
-- a config table of scales, summed in pairs order (the string shows the order)
local function f(cfg, v)
  local parts = {}
  for k, s in pairs(cfg) do
    v = v * s
    parts[#parts + 1] = tostring(k)
  end
  return v, table.concat(parts, ",")
end
local cf = tc.compile(f)
local cfg = {a = 2, b = 3, c = 0.5, [1] = 10}
for _ = 1, 3 do
  local r1, s1 = cf(cfg, x)
  local r2, s2 = f(cfg, x)
  h.close(r1, r2, "pairs over an argument")
  h.eq(s1, s2, "order")
end
h.eq(h.stats().graph_breaks, 0, "no break")
h.eq(h.stats().traces, 1, "one trace")
local report = tc.compiler.explain(f)(cfg, x)
assert(table.concat(report.guards[1].guards, "\n"):find("KEY_ORDER", 1, true), "a KEY_ORDER guard")

-- a value changed: the value guard recompiles or not, the result follows
cfg.b = 4
local r1, s1 = cf(cfg, x)
local r2, s2 = f(cfg, x)
h.close(r1, r2, "value changed")
h.eq(s1, s2, "order after a value change")
-- a key added and one removed: the key order guard fails, a new trace follows the new order
cfg.d = 7
cfg.a = nil
r1, s1 = cf(cfg, x)
r2, s2 = f(cfg, x)
h.close(r1, r2, "keys changed")
h.eq(s1, s2, "order after keys changed")
-- the same keys built in another order (a different `next` order is allowed to follow)
local other = {}
for _, k in ipairs {"d", "c", "b", 1} do other[k] = cfg[k] end
r1, s1 = cf(other, x)
r2, s2 = f(other, x)
h.close(r1, r2, "same keys, built in another order")
h.eq(s1, s2, "order of the other table")

-- next directly, and pairs over a table reached through a module
local Block = nn.Module:extend("Block")
function Block:__init()
  self.scales = {alpha = 2, beta = 3}
end
function Block:forward(v)
  local k, s = next(self.scales)
  while k do
    v = v + s
    k, s = next(self.scales, k)
  end
  return v
end
local b = Block()
local cb = tc.compile(b)
for _ = 1, 3 do h.close(cb(x), b(x), "next over a module's table") end

-- a table with a __pairs metamethod, and a table written before the loop, still break (results
-- equal eager)
local proxied = setmetatable({}, {__pairs = function(t) return next, {z = 5}, nil end})
local function g(t, v)
  for _, s in pairs(t) do v = v + s end
  return v
end
local cg = tc.compile(g)
h.close(cg(proxied, x), g(proxied, x), "__pairs")
local function w(t, v)
  t.extra = 1
  for _, s in pairs(t) do v = v + s end
  t.extra = nil
  return v
end
local cw = tc.compile(w)
local wt = {p = 1, q = 2}
h.close(cw(wt, x), w(wt, x), "pairs over a table written in the trace")

-- one table reached through two arguments, then two different tables: each argument's key order
-- is guarded
local function two(a, b, v)
  local s = ""
  for k in pairs(a) do s = s .. tostring(k) end
  for k in pairs(b) do s = s .. tostring(k) end
  return v + #s, s
end
local c2 = tc.compile(two)
local shared = {p = 1, q = 2, r = 3}
local rb, sb = c2(shared, shared, x)
local eb, esb = two(shared, shared, x)
h.close(rb, eb, "one table twice")
h.eq(sb, esb, "order, one table twice")
local fewer = {p = 1}
rb, sb = c2(shared, fewer, x)
eb, esb = two(shared, fewer, x)
h.close(rb, eb, "second argument with other keys")
h.eq(sb, esb, "order, second argument with other keys")
