-- Split-check cases: every comparison form, tests, and/or values, booleans from conditions.
local function compare(a, b)
  local r = {}
  r[#r + 1] = a == b
  r[#r + 1] = a ~= b
  r[#r + 1] = a < b
  r[#r + 1] = a <= b
  r[#r + 1] = a > b
  r[#r + 1] = a >= b
  r[#r + 1] = a == 1
  r[#r + 1] = a ~= 2.5
  r[#r + 1] = a == "x"
  r[#r + 1] = a == nil
  r[#r + 1] = a < 3
  r[#r + 1] = a <= 4
  r[#r + 1] = a > 5
  r[#r + 1] = a >= 6
  r[#r + 1] = 7 < a
  r[#r + 1] = 1.5 <= a
  r[#r + 1] = a == true
  local n = 0
  for i, v in ipairs(r) do if v then n = n + i end end
  return n
end

local function branches(x)
  if x == nil then return "nil"
  elseif x == false then return "false"
  elseif type(x) == "number" then
    if x < 0 then return "neg" elseif x == 0 then return "zero" elseif x > 100 then return "big" end
    return "pos"
  elseif not x then return "never"
  end
  return "other"
end

local function logic(a, b, c)
  local x = a and b or c
  local y = a or b and c
  local z = not a == not b
  local w = (a and 1) or (b and 2) or 3
  local v = a ~= nil and b ~= nil
  return x, y, z, w, v
end

local function minmax(t)
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(t) do
    if v < lo then lo = v end
    if v > hi then hi = v end
  end
  return lo, hi, lo <= hi and "ok" or "empty"
end

local function mixed_numbers(a, b)
  return a == b, a < b, math.type(a), math.type(b), a + b, 1 == 1.0, math.tointeger(3.0),
         2^63 == math.maxinteger + 1.0, -0.0 == 0, 3 % -2, -3 % 2, 3.0 % -2, 7 // -2, 7.0 // -2
end

return {
  {compare, 1, 2}, {compare, 7, 7}, {compare, 2.5, 1},
  {branches, nil}, {branches, false}, {branches, -1}, {branches, 0}, {branches, 500},
  {branches, 5}, {branches, "s"},
  {logic, 1, 2, 3}, {logic, nil, 2, 3}, {logic, false, nil, 3},
  {minmax, {3, 1, 4, 1, 5}}, {minmax, {}},
  {mixed_numbers, 1, 1.0}, {mixed_numbers, 2, 3},
}
