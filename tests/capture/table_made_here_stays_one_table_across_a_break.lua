-- A table made in the compiled function and passed to a call at a graph break is one table: the
-- callee's writes are seen by the rest of the function (regression: each register holding it
-- was rebuilt as its own copy, so `o.a` was nil after `init(o)`; tc.nn constructors called in a
-- compiled function lost their parameters).
local tc = require "tc"
local h = require "helpers"

local function init(self) self.a = 1; io.write(""); self.b = 2 end
local function f() local o = {}; init(o); return o end
local o = tc.compile(f)()
h.eq(o.a, 1, "write before the callee's break")
h.eq(o.b, 2, "write after the callee's break")

local C = {}
C.__index = C
function C:init(t) self.w = t * 2; io.write("") end
local function g(t)
  local obj = setmetatable({}, C)
  obj:init(t)
  local same = {obj, obj}
  return obj.w, same[1] == same[2], same[1] == obj
end
local w, s1, s2 = tc.compile(g)(tc.ones(2))
h.close(w, tc.full({2}, 2), "method writes into a made table")
h.eq(s1, true, "one table in two slots")
h.eq(s2, true, "one table in a slot and a register")

local nn = tc.nn
local m = tc.compile(function(x) local l = nn.Linear(4, 4); return l(x), l end)
local x = tc.randn(2, 4)
local y, l = m(x)
h.close(y, l(x), "a Linear built in a compiled function has its parameters")
