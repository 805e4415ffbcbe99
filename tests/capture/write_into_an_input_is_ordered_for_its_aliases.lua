-- A value computed from one graph input before an in-place write into another input that shares
-- its memory (an upvalue and an argument holding the same tensor) is the value before the write,
-- on every backend: code generators must not fuse the read after the write (fuzz seed 30423).
local tc = require "tc"
local h = require "helpers"

local v
local function g(a)
  local half = a * 0.5
  v:add_(1)
  return half + 0
end

for _, backend in ipairs({"eager", "loopir", "cpu"}) do
  tc.compiler.reset()
  v = tc.ones(3, 4)
  local r = tc.compile(g, {backend = backend})(v)
  h.close(r, tc.full({3, 4}, 0.5), backend .. ": the read before the write", 0)
  h.close(v, tc.full({3, 4}, 2), backend .. ": the write", 0)
end
