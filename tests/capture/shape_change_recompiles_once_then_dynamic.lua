-- A new size recompiles once with that dimension dynamic (range guard); later sizes hit it.
local tc = require "tc"
local h = require "helpers"

local function f(x) return (x:sin() * 2):sum(2) end
local cf = tc.compile(f)
for _, n in ipairs {10, 20, 30, 40, 7} do
  local x = tc.randn(n, 5)
  h.close(cf(x), f(x), "n = " .. n)
end
local s = h.stats()
h.eq(s.traces, 2, "traces")
h.eq(s.recompiles, 1, "recompiles")
-- a size read into Lua specializes the dimension again (sound: the value was used)
tc.compiler.reset()
local g = tc.compile(function(x) return x:view(x:size(1) * 5) end)
for _, n in ipairs {2, 3, 4} do
  local x = tc.randn(n, 5)
  h.close(g(x), x:view(n * 5), "view n = " .. n)
end
h.eq(h.stats().traces, 3, "x:size(1) read: one entry per size")
-- mark_dynamic: dynamic from the first trace
tc.compiler.reset()
local cm = tc.compile(function(x) return x * 2 end)
local a = tc.randn(6, 3)
tc.compiler.mark_dynamic(a, 1)
h.close(cm(a), a * 2)
local b = tc.randn(9, 3)
h.close(cm(b), b * 2)
h.eq(h.stats().traces, 1, "marked dynamic: no recompile")
