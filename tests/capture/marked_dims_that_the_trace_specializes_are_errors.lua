-- tc.compiler.mark_dynamic on a dim that an op ties to a fixed size is a CompileError naming that
-- op's line (torch's constraint violation), not a silent specialization; marks that can hold (x and
-- y sharing their batch) compile one graph for every size; tc.compiler.mark_static keeps a changing
-- dim specialized (one graph per size).
local tc = require "tc"
local h = require "helpers"

local f = tc.compile(function(x)
  return x:view(2, 2, 3) * 2  -- the line the error names
end)
local x = tc.randn(4, 3)
tc.compiler.mark_dynamic(x, 1)
local ok, e = pcall(f, x)
assert(not ok and type(e) == "table" and e.kind == "CompileError", "a CompileError: " .. tostring(e))
local line = debug.getinfo(1, "l").currentline - 6
assert(e.message:find(("marked_dims_that_the_trace_specializes_are_errors.lua:%d"):format(line), 1, true), e.message)
assert(e.message:find("dim 1 of arg[1] dynamic, but view", 1, true) and e.message:find("needs it to be 4", 1, true), e.message)

tc.compiler.reset()
local function g(a, b) return ((a - b) ^ 2):sum(2) end
local cg = tc.compile(g)
for _, n in ipairs({5, 7, 3}) do
  local a, b = tc.randn(n, 3), tc.randn(n, 3)
  tc.compiler.mark_dynamic(a, 1)
  tc.compiler.mark_dynamic(b, 1)
  h.close(cg(a, b), g(a, b), "marked shared batch " .. n)
end
h.eq(h.stats().traces, 1, "one graph for every batch")
h.eq(h.stats().fallback_nodes, 0, "compiled, not on eager")

tc.compiler.reset()
local k = tc.compile(function(z) return z * 3 end)
for _, n in ipairs({4, 5, 6}) do
  local z = tc.randn(n)
  tc.compiler.mark_static(z, 1)
  h.close(k(z), z * 3, "static " .. n)
end
h.eq(h.stats().traces, 3, "a static dim: one graph per size")
local ok2, e2 = pcall(tc.compiler.mark_static, tc.randn(3), 2)
assert(not ok2 and e2.kind == "IndexError", tostring(e2))

-- mark_dynamic with a range: sizes in it share the entry, one outside misses the guard (a recompile
-- whose log shows the range), and bad ranges are ValueErrors
tc.compiler.reset()
local r = tc.compile(function(z) return z * 2 end)
local function call(n, mark)
  local z = tc.randn(n, 3)
  if mark then tc.compiler.mark_dynamic(z, 1, {min = 4, max = 16}) end
  h.close(r(z), z * 2, "range " .. n)
end
call(8, true); call(12); call(16); call(4)
h.eq(h.stats().traces, 1, "every size in [4, 16] on the first entry")
call(20)
h.eq(h.stats().recompiles, 1, "20 is past max: a recompile")
for _, bad in ipairs({{tc.randn(3, 3), {min = 4, max = 16}}, {tc.randn(5, 3), {min = 8, max = 4}},
                      {tc.randn(5, 3), {lo = 8}}, {tc.randn(5, 3), {min = 1}}}) do
  local ok3, e3 = pcall(tc.compiler.mark_dynamic, bad[1], 1, bad[2])
  assert(not ok3 and e3.kind == "ValueError", tostring(e3))
end
