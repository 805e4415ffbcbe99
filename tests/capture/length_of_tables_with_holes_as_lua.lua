-- `#` of a table made in the trace with holes is the border Lua itself gives, which depends on
-- how the table was built ({1, nil, 3} is 3, {nil, nil, 3} is 3, t[1], t[2], t[4] set is 4):
-- the trace replays the construction on a real table and asks it. (It gave 1, 0 and 2.)
local tc = require "tc"
local h = require "helpers"

local function borders()
  local a = {1, nil, 3}
  local b = {nil, nil, 3}
  local c = {}
  c[1] = 1; c[2] = 2; c[4] = 4
  local d = {1, 2, 3}
  d[3] = nil
  return #a, #b, #c, #d
end
local want = {borders()}
local got = {tc.compile(borders)()}
for i = 1, 4 do h.eq(got[i], want[i], "border " .. i) end
h.eq(h.stats().fallbacks, 0, "traced")

-- a metatable without __len does not stop `#`
local function with_mt()
  local t = setmetatable({1, 2}, {__index = function() return 0 end})
  return #t
end
h.eq(tc.compile(with_mt)(), 2, "# with a metatable")
