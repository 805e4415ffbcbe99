-- A table made in the traced code and held by two registers (or a register and a result) at a
-- break is one table after it: a write through one alias is seen through the other, and rawequal
-- holds. (Each reference used to get its own copy; found under tcrun --compile-all.)
local tc = require "tc"
local h = require "helpers"

local function aliases()
  local t = {}
  local u = t
  io.write("")  -- a break: t and u are rebuilt from the entry's plans
  u.x = 1
  return t.x, rawequal(t, u)
end
local x, same = tc.compile(aliases)()
h.eq(x, 1, "write through the alias is seen")
h.eq(same, true, "one table")

local function nested()
  local inner = {1}
  local outer = {inner, inner}
  io.write("")
  outer[1][1] = 2
  return outer[2][1], inner[1]
end
local a, b = tc.compile(nested)()
h.eq(a, 2, "shared inner table")
h.eq(b, 2, "shared inner table, through the register")

-- a class table that holds itself (A.__index = A) and is live at a break: built once, cyclic
-- (the walk that finds tc.Size tables among the plans recursed forever on it)
local function class()
  local A = {}
  A.__index = A
  function A.get(self) return self.v end
  io.write("")
  local o = setmetatable({v = 7}, A)
  return o:get(), A.__index == A
end
local v, cyclic = tc.compile(class)()
h.eq(v, 7, "method through the class")
h.eq(cyclic, true, "A.__index is A")
