-- Split-check cases: metamethods for arithmetic, comparison, indexing, calls, length, concat.
local V = {}
V.__index = V
local function vec(x, y) return setmetatable({x = x, y = y}, V) end
V.__add = function(a, b) return vec(a.x + b.x, a.y + b.y) end
V.__sub = function(a, b) return vec(a.x - b.x, a.y - b.y) end
V.__mul = function(a, b)
  if type(a) == "number" then return vec(a * b.x, a * b.y) end
  if type(b) == "number" then return vec(a.x * b, a.y * b) end
  return a.x * b.x + a.y * b.y
end
V.__unm = function(a) return vec(-a.x, -a.y) end
V.__eq = function(a, b) return a.x == b.x and a.y == b.y end
V.__lt = function(a, b) return a.x < b.x end
V.__le = function(a, b) return a.x <= b.x end
V.__len = function(a) return 2 end
V.__concat = function(a, b)
  local function s(v) return type(v) == "table" and ("(" .. v.x .. "," .. v.y .. ")") or tostring(v) end
  return s(a) .. s(b)
end
V.__call = function(self, k) return self[k] end
V.__idiv = function(a, b) return vec(a.x // b, a.y // b) end
V.__mod = function(a, b) return vec(a.x % b, a.y % b) end
V.__div = function(a, b) return vec(a.x / b, a.y / b) end
V.__pow = function(a, b) return vec(a.x ^ b, a.y ^ b) end
V.__band = function(a, b) return "band" end
V.__shl = function(a, b) return "shl" .. type(a) .. type(b) end
V.__shr = function(a, b) return "shr" end
V.__bnot = function(a) return "bnot" end
V.__bor = function(a, b) return "bor" end
V.__bxor = function(a, b) return "bxor" end
function V:norm2() return self * self end

local function vector_math(a, b)
  local u, w = vec(a, b), vec(b, a)
  local s = u + w
  local d = u - w
  local m = u * w
  local k = 2 * u
  local r = u * 3
  local n = -u
  return s.x, s.y, d.x, m, k.y, r.x, n.x, u:norm2(), #u, u .. w, u .. 1, "v" .. u
end

local function vector_compare(a, b)
  local u, w = vec(a, 0), vec(b, 0)
  return u == w, u ~= w, u < w, u <= w, u > w, u >= w, u("x"), u("y")
end

local function vector_ops(a)
  local u = vec(a, a + 1)
  local i, m, q, p = u // 2, u % 2, u / 2, u ^ 2
  return i.x, m.y, q.x, p.y, u & 1, u << 3, u >> 1, ~u, u | 1, u ~ 2, 1 & u, 1 << u
end

local function proxy(log)
  local store = {}
  local t = setmetatable({}, {
    __index = function(_, k) log[#log + 1] = "get " .. k; return store[k] end,
    __newindex = function(_, k, v) log[#log + 1] = "set " .. k; store[k] = v end,
  })
  t.a = 1
  t.b = t.a + 1
  t[1] = t.b * 2
  local s = t.a + t.b + t[1]
  return s, table.concat(log, ";"), rawget(t, "a")
end

local function inherit()
  local Base = {}
  Base.__index = Base
  function Base.new(n) return setmetatable({n = n}, Base) end
  function Base:get() return self.n end
  local Derived = setmetatable({}, {__index = Base})
  Derived.__index = Derived
  function Derived.new(n) local o = Base.new(n); return setmetatable(o, Derived) end
  function Derived:get() return Base.get(self) * 10 end
  local b, d = Base.new(2), Derived.new(3)
  return b:get(), d:get(), getmetatable(d) == Derived
end

local function string_coercion(a)
  local s = "12"
  return s + a, s * 2, s / 4, "3" ^ 2, s // 5, -s, s % 5, "0x1p4" + 0, 10 .. 20, 1.5 .. ""
end

return {
  {vector_math, 1, 2},
  {vector_compare, 1, 2}, {vector_compare, 3, 3},
  {vector_ops, 5},
  {proxy, {}},
  {inherit},
  {string_coercion, 1}, {string_coercion, 2.5},
}
