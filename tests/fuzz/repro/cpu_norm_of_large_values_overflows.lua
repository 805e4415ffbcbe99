-- cpu backend (backends/lower/decompose.cpp): norm(2) of float32 values near 1e38 gave inf where eager's
-- (squares summed in float64) is finite; 0 * inf then made nan. Fixed by summing the squares in float64.
-- mismatch, shrunk from seed 519 by tests/fuzz/shrink.lua (122 checks, 23s)
-- reproduce: tcrun tests/fuzz/check.lua --file tests/fuzz/repro/cpu_norm_of_large_values_overflows.lua --backends eager,cpu
-- FAIL 519 mismatch: [cpu] R.1.4: tensors differ
-- eager:
-- tensor(0.5000)
-- [tc.float32 of size () on cpu]
-- compiled:
-- tensor(nan)
-- [tc.float32 of size () on cpu]
-- 
-- tc fuzz program, seed 519
local C, OUT = ...
local tc = require "tc"
local nn = require "tc.nn"
local F = tc.nn.functional
local A, B = 2, 4
tc.manual_seed(519)
local function P(...) local t = table.pack(...) t.call = true return t end
local Vec = {}
Vec.__index = Vec
function Vec.new(t) return setmetatable({t = t, n = 0}, Vec) end
function Vec:scale(k) return Vec.new(self.t * k) end
function Vec:total() return self.t:abs():sum() end
Vec.__add = function(a, b) return Vec.new(a.t + b.t) end
Vec.__mul = function(a, k) return Vec.new(a.t * k) end
Vec.__unm = function(a) return Vec.new(-a.t) end
Vec.__call = function(self, k) return self.t * k end
Vec.__len = function(self) return self.t:size(1) end
Vec.__lt = function(a, b) return a.t:sum() < b.t:sum() end
Vec.__concat = function(a, b) return "vec" .. tostring(b) end
Vec.__eq = function(a, b) return a.n == b.n end
Vec.__newindex = function(self, k, v) rawset(self, "n", rawget(self, "n") + 1) rawset(self, k, v) end
local Block = nn.Module:extend("Block")
function Block:__init(d) self.lin = nn.Linear(d, d) self.scale = 0.5 end
function Block:forward(x)
  local y = self.lin(x)
  if y:sum() > 0 then y = y:relu() end
  self.calls = (self.calls or 0) + 1
  return y * self.scale + self.calls
end
local Lazy = setmetatable({}, {__index = function(t, k) return k .. "!" end})
G1 = 0
local R = {}
local function f1(a2, a3, a4)
  return "s", "s", (a2:sum() * ((function(c) return function(k) return c * k end end)(tc.ones(A, B))(1e38)):norm() + 0.5)
end
f1 = C(f1)
do local c1, c2, c3 = tc.linspace(-1, 1, B), true, true R[#R + 1] = P(pcall(f1, c1, c2, c3)) R[#R + 1] = {c1, c2, c3} end
return R
