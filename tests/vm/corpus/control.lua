-- Comparisons of every kind, tests, boolean values, loops, goto, repeat/while and breaks.
local function cmp(a, b, c)
  local r = 0
  if a == b then r = r + 1 end
  if a ~= b then r = r + 1 end
  if a < b then r = r + 1 end
  if a <= b then r = r + 1 end
  if a > b then r = r + 1 end
  if a >= b then r = r + 1 end
  if a == "s" then r = r + 1 end
  if a == nil then r = r + 1 end
  if a == 1 then r = r + 1 end
  if a < 2 then r = r + 1 end
  if a <= 3 then r = r + 1 end
  if a > 4 then r = r + 1 end
  if a >= 5 then r = r + 1 end
  if 6 < a then r = r + 1 end
  if a == 1.5 then r = r + 1 end
  if a then r = r + 1 end
  if not b then r = r + 1 end
  local x = a and b
  local y = a or c
  local z = a < b
  local w = not (a == b)
  return r, x, y, z, w, a ~= nil, true, false, nil
end
local function loops(n, t)
  local s = 0
  for i = 1, n do s = s + i end
  for i = n, 1, -2 do s = s - i end
  for x = 0.5, n, 0.25 do s = s + x end
  for k, v in pairs(t) do s = s + v end
  for i, v in ipairs(t) do
    for j = 1, i do
      if j == 2 then break end
      s = s + j
    end
  end
  local i = 0
  while i < n do i = i + 1; if i == 3 then goto continue end; s = s + 1; ::continue:: end
  repeat local q = i; i = i - 1 until q < 2
  ::top::
  if s > 100 then s = s - 100; goto top end
  return s
end
return cmp(1, 2, 3), loops(5, {1, 2, 3})
