-- Errors raised inside compiled functions name the user's line, as eager does, not tc's own Lua
-- ([tc]/tc._tensor.lua, [tc]/compile.lua) nor the caller's line: x:cuda() without a GPU (its
-- graph is compiled on its own inside tc._tensor.lua), a module's layer given the wrong number
-- of features in a tail call (tc's __call trampoline), an in-place op on a leaf that requires
-- grad, and unbounded recursion (Lua's stack overflow).
local tc = require "tc"
local nn = tc.nn
local h = require "helpers"

local function describe(e)
  if type(e) == "table" then return ("%s: %s @%s:%s"):format(e.kind, e.message, e.file, e.line) end
  return tostring(e)
end
local function same_error(name, f, ...)
  local ok1, e1 = pcall(f, ...)
  local ok2, e2 = pcall(tc.compile(f), ...)
  h.eq(ok1, false, name .. " fails eagerly")
  h.eq(ok2, false, name .. " fails compiled")
  h.eq(describe(e2), describe(e1), name)
  assert(describe(e2):find("errors_inside_compiled_calls_name_the_users_line.lua", 1, true), describe(e2))
end

if not tc.cuda.is_available() then
  same_error("x:cuda() in a tail call", function(a)
    local b = a * 2
    return b:cuda()
  end, tc.ones(2))
  same_error("x:cuda()", function(a)
    local b = a * 2
    local c = b:cuda()
    return c
  end, tc.ones(2))
end

local M = nn.Module:extend("M")
function M:__init() self.fc = nn.Linear(3, 4) end
function M:forward(x)
  local y = x * 2
  return self.fc(y)
end
local m = M()
local ok1, e1 = pcall(m, tc.ones(2, 5))
local ok2, e2 = pcall(tc.compile(m), tc.ones(2, 5))
h.eq(ok1 or ok2, false, "wrong feature count fails")
h.eq(describe(e2), describe(e1), "Linear given 5 features instead of 3")
h.eq(e2.line, debug.getinfo(M.forward, "S").linedefined + 2, "the line of self.fc(y)")

local w = tc.ones(2, {requires_grad = true})
same_error("in-place op on a leaf", function(x)
  local y = x + 1
  w:add_(y)
  return y
end, tc.ones(2))
same_error("in-place op on a leaf, tail call", function(x) return w:mul_(x) end, tc.ones(2))

local function deep(x) return deep(x) + 1 end
same_error("stack overflow", deep, tc.ones(2))
