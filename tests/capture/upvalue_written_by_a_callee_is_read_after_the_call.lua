-- A function inlined into a trace that assigns an upvalue shared with its caller (recursion, or
-- another closure over the same local) changes what the caller reads after the call returns
-- (found by the fuzzer: a recursive compiled function kept reading its own earlier write).
local tc = require "tc"
local h = require "helpers"

local function recursive(C)
  local last = tc.ones(2)
  local function f(x, n)
    if n <= 0 then return tc.ones(2) end
    last = x
    return f(x * 0.5, n - 1) + last
  end
  f = C(f)
  return f(tc.ones(2), 3)
end
h.close(tc.compile(function() return recursive(tc.compile) end)(), recursive(function(f) return f end), "recursive writer")
h.close(recursive(tc.compile), recursive(function(f) return f end), "recursive writer, compiled frames")

local shared = 0
local function set(v) shared = v end
local function body(x)
  shared = 1
  local before = shared
  set(5)
  local after = shared
  set(after + 2)
  return x * before + after + shared
end
local x = tc.ones(3)
local expected = body(x)
h.close(tc.compile(body)(x), expected, "setter closure over the same local")
h.eq(shared, 7, "the upvalue after the compiled call")
