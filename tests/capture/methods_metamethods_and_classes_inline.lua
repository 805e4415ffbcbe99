-- Inlining: tensor methods (x:relu()), tensor metamethods (+, *, unary -, //, %), Lua classes
-- with __index/__call/__add, closures made in the traced code, varargs and multiple results.
local tc = require "tc"
local h = require "helpers"

local Vec = {}
Vec.__index = Vec
Vec.__add = function(a, b) return setmetatable({t = a.t + b.t}, Vec) end
Vec.__call = function(self, s) return self.t * s end
function Vec.new(t) return setmetatable({t = t}, Vec) end
function Vec:norm() return (self.t * self.t):sum():sqrt() end

local function f(x, ...)
  local n = select("#", ...)
  local a, b = ...
  local v = Vec.new(x) + Vec.new(x:relu())
  local scale = function(y) return y * n end  -- a closure made in compiled code
  local y = scale(v(2)) - (-x) // 1 + x % 2
  local mx, idx = x:max(1)
  return y + v:norm() + a * b, mx, idx
end
local cf = tc.compile(f)
local x = tc.randn(5)
local r1, m1, i1 = cf(x, 2, 3)
local r2, m2, i2 = f(x, 2, 3)
h.close(r1, r2, "result")
h.close(m1, m2, "max")
h.close(i1, i2, "argmax")
h.eq(h.stats().graph_breaks, 0, "no breaks")
