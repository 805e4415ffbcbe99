-- A method call whose name is a long string (over 40 bytes: SELF with a long-string constant,
-- which Lua's compiler emits) no longer makes the resume functions of its function fail
-- verification (the whole frame ran uncompiled; found by calls.lua of the Lua 5.4 suite).
local tc = require "tc"
local h = require "helpers"

local obj = {}
function obj:_0123456789012345678901234567890123456789_long_name() return 41 end
local function f(o)
  io.write("")  -- a break before the method call: its resume function holds the SELF
  return o:_0123456789012345678901234567890123456789_long_name() + 1
end
h.eq(tc.compile(f)(obj), 42, "result")
h.eq(h.stats().fallbacks, 0, "the frame resumed compiled")
