-- Modelled builtins as Lua runs them: getmetatable of a table with a protected metatable returns
-- its __metatable field, of a string the string library's metatable; next with a key the table
-- never had raises; a missing argument raises. (Each differed under tcrun --compile-all: nil for
-- strings, the raw metatable, a Lua error raised through the tracer, nil for a missing argument.)
local tc = require "tc"
local h = require "helpers"

local function protected()
  local a = setmetatable({}, {__metatable = "locked"})
  return getmetatable(a), getmetatable("")
end
local p, smt = tc.compile(protected)()
h.eq(p, "locked", "protected metatable")
h.eq(smt, getmetatable(""), "string metatable")

local function bad_next()
  return pcall(next, {10, 20}, 3)
end
local ok, err = tc.compile(bad_next)()
h.eq(ok, false, "next with a missing key fails")
h.eq(err:find("invalid key", 1, true) ~= nil, true, "with Lua's message")

local function relock()
  local a = setmetatable({}, {__metatable = false})
  return pcall(setmetatable, a, {})
end
h.eq(tc.compile(relock)(), false, "a protected metatable cannot be changed")

-- a missing argument is an error even where nil would do (ipairs(), math.type(), rawequal(1))
local function missing()
  return (pcall(ipairs)), (pcall(math.type)), (pcall(rawequal, 1)), (pcall(ipairs, nil))
end
local a, b, c, d = tc.compile(missing)()
h.eq(a, false, "ipairs()")
h.eq(b, false, "math.type()")
h.eq(c, false, "rawequal(1)")
h.eq(d, true, "ipairs(nil) makes an iterator")

-- table.unpack with explicit bounds reads exactly t[i..j]: far from 1, or too many to return
-- (a trace of unpack({}, 1, 2^31 - 1) used to run out of memory)
local function unpack_far(t, i, j) return pcall(table.unpack, t, i, j) end
local cu = tc.compile(unpack_far)
local big = (1 << 31) - 1
local ok2, v2 = cu({[big] = 20}, big, big)
h.eq(ok2 and v2, 20, "one value far from 1")
local ok3, e3 = cu({}, 1, big)
h.eq(ok3, false, "too many results")
h.eq(e3:find("too many results", 1, true) ~= nil, true, "with Lua's message")
h.eq(select("#", cu({1, 2, 3}, 2, 5)), 5, "true and t[2..5]")
