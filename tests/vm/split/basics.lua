-- Split-check cases: straight-line code, arithmetic, int/float, string coercion, calls.
local function arith(a, b)
  local s = a + b
  local d = a - b
  local m = a * b
  local q = a / b
  local f = a // b
  local r = a % b
  local p = a ^ 2
  local x = (a & 7) | (b ~ 3)
  local y = (a << 2) >> 1
  local z = -a + ~b
  return s, d, m, q, f, r, p, x, y, z, 1 - a, 2 * b, a % 3.5
end

local function bitwise(a, b)
  local x, y, z, w = a & b, a ~ b, a << b, a >> b
  local v = a | b
  return x, y, z, w, v, a - 1000, a - 2.5, ~a, a // b, a % b
end

local function floats(a, b)
  return a / b, a // b, a % b, math.type(a + 0.0), math.type(a // 1), 3 // 0.0, -3 % math.huge
end

local function strings(a, b)
  local s = a .. b .. 1 .. 2.0
  local n = "10" + a
  local m = "0x10" * 2
  return s, n, m, #s, s:upper(), ("x"):rep(3, ",")
end

local function calls(t)
  local a, b, c = table.unpack(t)
  local n = select("#", table.unpack(t))
  local m = math.max(table.unpack(t))
  print("calls", a, b, c, n, m)
  return string.format("%d-%d", a, b), tostring(c), m
end

local function errors(x)
  if x == 1 then error("plain") end
  if x == 2 then error({code = 2}) end
  if x == 3 then return x + nil end
  if x == 4 then return #x end
  local ok, e = pcall(function() error("inner") end)
  return ok, e
end

return {
  {arith, 7, 3},
  {arith, 7.5, 2},
  {arith, -9, 4},
  {bitwise, 12, 3}, {bitwise, -5, 70}, {bitwise, "8", 1}, {bitwise, 1.5, 1},
  {floats, 7, 2},
  {floats, 7.0, -2},
  {strings, "a", 3},
  {strings, 1, 2},
  {calls, {3, 1, 2}},
  {errors, 1}, {errors, 2}, {errors, 3}, {errors, 4}, {errors, 5},
}
