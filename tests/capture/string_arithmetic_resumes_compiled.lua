-- Arithmetic on numeric strings ("10" * n: Lua converts through the string metatable) runs at a
-- break as Lua's own operation and the trace resumes after it (the rest of the function ran
-- uncompiled); operands that would raise keep the stock-Lua path and its error.
local tc = require "tc"
local h = require "helpers"

local function f(s, n)
  local a = s + 1
  local b = "10" * n
  local c = -s
  local d = s // "3"
  return a, b, c, d, math.type(a), n + 1
end
local cf = tc.compile(f)
for _, s in ipairs({"5", "6", "2.5"}) do
  local got, want = {cf(s, 2)}, {f(s, 2)}
  for i = 1, 6 do h.eq(got[i], want[i], s .. ": result " .. i) end
end
h.eq(h.stats().fallbacks, 0, "no frame ran uncompiled")
assert(h.stats().traces >= 5, "the resume functions after each string operation are traced")
local ok1, e1 = pcall(f, "x", 2)
local ok2, e2 = pcall(cf, "x", 2)
h.eq(ok2, ok1, "a string that does not convert fails")
h.eq(e2, e1, "with eager's message")
