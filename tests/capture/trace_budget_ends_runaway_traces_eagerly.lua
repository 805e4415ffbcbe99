-- Every trace is bounded: past tc.config.trace_max_instructions (TC0405), trace_max_depth
-- (TC0406) or trace_max_iterations (TC0410) it ends with a graph break at the user's line, and
-- the rest runs eagerly with eager's results.
local tc = require "tc"
local h = require "helpers"

local function first_break(f, ...)
  local report = tc.compiler.explain(f)(...)
  local b = assert(report.break_reasons[1], "expected a graph break")
  return b
end

-- A long loop: unrolled up to the iteration budget, then the rest runs uncompiled.
local function long_loop(x)
  for _ = 1, 20000 do
    x = x + 1
  end
  return x
end
local x = tc.zeros(3)
local b = first_break(long_loop, x)
h.eq(b.code, "TC0410", "iteration budget code")
h.eq(b.line, 16, "the user's line inside the loop")
local cl = tc.compile(long_loop)
h.close(cl(x), long_loop(x), "long loop")
h.close(cl(x), long_loop(x), "long loop, second call")

-- A while loop that only ends on a value the trace cannot see ends at the budget too.
local function spin(x, n)
  local i = 0
  while i < n do
    i = i + 1
    x = x * 1.0001
  end
  return x
end
h.eq(first_break(spin, x, 100000).code, "TC0410", "while loop")
local cs = tc.compile(spin)
h.close(cs(tc.ones(2), 100000), spin(tc.ones(2), 100000), "while loop result", 1e-3)

-- Deep recursion: inlined up to the depth budget; the call at the limit runs through the compiler.
local function deep(n, y)
  if n == 0 then return y end
  return deep(n - 1, y + 1) * 1
end
b = first_break(deep, 200, x)
h.eq(b.code, "TC0406", "depth budget code")
local cd = tc.compile(deep)
h.close(cd(200, x), deep(200, x), "deep recursion")

-- The instruction budget, lowered through tc.config, cuts a straight-line function.
local function straight(y)
  local a = y + 1
  local c = a * 2
  local d = c - 3
  local e = d / 4
  return e:relu() + a:sin() + c:cos()
end
tc.compiler.reset()
local old = tc.config.trace_max_instructions
tc.config.trace_max_instructions = 12
b = first_break(straight, x)
h.eq(b.code, "TC0405", "instruction budget code")
assert(b.line >= 53 and b.line <= 58, "the user's line: " .. tostring(b.line))
h.close(tc.compile(straight)(x), straight(x), "cut straight-line function")
tc.config.trace_max_instructions = old
