-- getmetatable of a table with a protected metatable returns its __metatable field; of a string
-- it is the string library's metatable; next with a key the table never had raises as in Lua.
-- (Each differed under tcrun --compile-all: nil for strings, the raw metatable, a Lua error
-- raised through the tracer.)
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
