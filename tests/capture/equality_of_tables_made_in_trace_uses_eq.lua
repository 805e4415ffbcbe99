-- `==` between tables made in the trace (or one made there and one from outside) goes through
-- __eq as in Lua (it answered false without asking; found under tcrun --compile-all).
local tc = require "tc"
local h = require "helpers"

local always = {__eq = function() return true end}
local function made_here(outside)
  local a, b = setmetatable({}, always), setmetatable({}, always)
  local plain1, plain2 = {}, {}
  return a == b, a == outside, plain1 == plain2, plain1 == plain1
end
local r = {tc.compile(made_here)(setmetatable({}, always))}
local want = {made_here(setmetatable({}, always))}
for i = 1, 4 do h.eq(r[i], want[i], "comparison " .. i) end
