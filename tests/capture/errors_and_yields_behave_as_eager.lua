-- Calls made at a graph break run from Lua: a coroutine may yield through a compiled function,
-- and errors raised by called functions name the user's line, as without compilation.
local tc = require "tc"
local h = require "helpers"

local f = tc.compile(function(x)
  local y = x * 2
  local got = coroutine.yield(y)
  return y + got
end)
local co = coroutine.wrap(function(x) return f(x) end)
h.close(co(tc.ones(2)), tc.ones(2) * 2, "yielded value")
h.close(co(10), tc.ones(2) * 2 + 10, "result after resume")

local function boom(x)
  local y = x + 1
  error("boom")
end
local ok, err = pcall(tc.compile(boom), tc.ones(1))
h.eq(ok, false)
h.eq(err, "tests/capture/errors_and_yields_behave_as_eager.lua:17: boom", "error position")

local function bad_arg(x)
  local y = x + 1
  return y, string.rep(nil, 2)
end
local ok2, err2 = pcall(tc.compile(bad_arg), tc.ones(1))
local ok3, err3 = pcall(bad_arg, tc.ones(1))
h.eq(ok2, false)
h.eq(err2, err3, "argument error as in eager")
