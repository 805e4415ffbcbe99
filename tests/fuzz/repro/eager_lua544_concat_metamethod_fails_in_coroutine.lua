-- NOT a tc bug: the eager reference (Lua 5.4.4) fails here. `"s" .. (v .. "x")` with v's __concat, in a
-- coroutine, raises "attempt to call a nil value" under stock lua5.4 too (the compiled run, which folds
-- the concat in the tracer, is right). gen.lua now wraps the metamethod concat in tostring().
-- mismatch, shrunk from seed 403564 by tests/fuzz/shrink.lua (146 checks, 16s)
-- reproduce: tcrun tests/fuzz/check.lua --file /tmp/fuzz-snap4/out/seed-403564.min.lua --backends eager
-- FAIL 403564 mismatch: [eager] R.2.3: tensors differ
-- eager:
-- tensor([[1., 1., 1., 1.],
--         [1., 1., 1., 1.],
--         [1., 1., 1., 1.]])
-- [tc.float32 of size 3x4 on cpu]
-- compiled:
-- tensor([[2., 2., 2., 2.],
--         [2., 2., 2., 2.],
--         [2., 2., 2., 2.]])
-- [tc.float32 of size 3x4 on cpu]
-- 
-- tc fuzz program, seed 403564
local C, OUT = ...
local tc = require "tc"
local nn = require "tc.nn"
local F = tc.nn.functional
local A, B = 3, 4
tc.manual_seed(403564)
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
local v17 = tc.ones(A, B)
do local c1, c2, c3, c4 = 0.5, tc.ones(A, B), v17, tc.ones(A, B) R[#R + 1] = P(pcall(f25, c1, c2, c3, c4)) R[#R + 1] = {c1, c2, c3, c4} end
local function f48(a49, a50, ...)
  OUT:write(("s" .. (Vec.new(tc.ones(A, B)) .. "x")), "\n")
  local v58 = v17
  v58:add_(tc.ones(A, B))
end
f48 = C(f48)
do local c1, c2, c3, c4 = {a = tc.ones(A, B), n = 1}, Vec.new(tc.ones(A, B)), tc.ones(A, B), tc.ones(A, B) local co = coroutine.create(f48) local res = {} for _ = 1, 4 do res[#res + 1] = P(coroutine.resume(co, c1, c2, c3, c4)) if coroutine.status(co) == "dead" then break end end R[#R + 1] = res R[#R + 1] = {c1, c2, c3, c4} end
return R
