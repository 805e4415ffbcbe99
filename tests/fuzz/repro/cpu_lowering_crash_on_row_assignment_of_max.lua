-- cpu backend (backends/lower, not capture): SIGSEGV in tc::lower::Lowering::emit (schedule.cpp:94) from
-- store_into (values.cpp:120): a row of an upvalue tensor assigned a max(1) of a max(1).
-- crash, shrunk from seed 14069 by tests/fuzz/shrink.lua (155 checks, 22s)
-- reproduce: tcrun tests/fuzz/check.lua --file tests/fuzz/repro/cpu_lowering_crash_on_row_assignment_of_max.lua --backends cpu
-- rc=139
-- 
-- tc fuzz program, seed 14069
local C, OUT = ...
local tc = require "tc"
local nn = require "tc.nn"
local F = tc.nn.functional
local A, B = 2, 3
tc.manual_seed(14069)
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
local v1 = tc.ones(A, B)
local function f41(a42, a43, a44)
  v1[1] = (((tc.ones(A, B) + ((tc.ones(A, B)):max(1)))):max(1))
end
f41 = C(f41)
do local c1, c2, c3 = tc.ones(A, B), tc.ones(A, B), 0.5 R[#R + 1] = P(pcall(f41, c1, c2, c3)) R[#R + 1] = {c1, c2, c3} end
return R
