-- Split-check cases: constructors, array/hash access, SETLIST with open results, length.
local function construct(a, b)
  local t = {a, b, a + b, x = a, y = b, [a * 10] = "k", ["key"] = true}
  local nested = {{1, 2}, {3, {4, 5}}, n = {m = a}}
  return t[3], t.x, t[a * 10], t.key, nested[2][2][1], nested.n.m, #t
end

local function fill(n)
  local t = {}
  for i = 1, n do t[i] = i * i end
  t[n + 1] = "end"
  local u = {}
  for i = 1, n do u[#u + 1] = t[i] + 1 end
  return #t, t[n], u[1], u[n], table.concat(u, ",")
end

local function open_constructor(...)
  local t = {1, 2, ...}
  local u = {string.byte("hello", 1, -1)}
  local w = {n = select("#", ...), ...}
  return #t, #u, w.n, u[5], t[#t]
end

local function index_forms(t, k)
  local a = t[1]
  local b = t[k]
  local c = t.name
  local d = t[300]
  t[2] = a
  t[k] = "set"
  t.name = c .. "!"
  t[301] = 3.5
  t[k .. "2"] = b
  return a, b, c, d, t[2], t[k], t.name, t[301], t[k .. "2"]
end

local function table_lib(n)
  local t = {}
  for i = n, 1, -1 do table.insert(t, i) end
  table.sort(t)
  table.insert(t, 1, 0)
  local removed = table.remove(t)
  local s = table.concat(t, "-")
  local moved = table.move(t, 1, 3, 2, {})
  return s, removed, #t, moved[2], moved[4], select("#", table.unpack(t))
end

local function big_constructor()
  local t = {
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
    21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60,
  }
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return #t, s
end

local function index_errors(kind)
  local t = nil
  if kind == 1 then return t.x end
  if kind == 2 then t = {}; return t.x.y end
  if kind == 3 then local s = "str"; return s.len(s), s:upper(), ("x").y end
  return "none"
end

Global_counter = 0
local function globals(n)
  Global_counter = Global_counter + n
  New_global = {value = Global_counter}
  return Global_counter, New_global.value, rawget(_ENV, "Missing")
end

return {
  {construct, 2, 3},
  {fill, 6},
  {open_constructor, "a", "b", "c"},
  {index_forms, {"one", "two", name = "n", [300] = 3}, "k"},
  {table_lib, 5},
  {big_constructor},
  {index_errors, 1}, {index_errors, 2}, {index_errors, 3}, {index_errors, 4},
  {globals, 4},
}
