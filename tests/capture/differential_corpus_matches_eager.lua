-- The differential corpus: functions mixing tensor ops with tables, closures, varargs, multiple
-- returns, loops, goto, string building, metatables, pcall/error and coroutines. Each runs
-- compiled and eager on the same inputs, several times with changing inputs; results and side
-- effects (the `s` state table each writes to) must be equal.
local tc = require "tc"
local h = require "helpers"

local function deep_eq(a, b, path, seen)
  if tc.is_tensor(a) or tc.is_tensor(b) then
    if not (tc.is_tensor(a) and tc.is_tensor(b)) then return false, path .. ": tensor vs " .. type(b) end
    if a.shape ~= b.shape or a.dtype ~= b.dtype then return false, path .. ": metadata" end
    if a:numel() > 0 and (a:double() - b:double()):abs():max():item() > 1e-5 then return false, path .. ": values" end
    return true
  end
  if type(a) ~= type(b) then return false, path .. ": " .. type(a) .. " vs " .. type(b) end
  if type(a) == "table" then
    seen = seen or {}
    if seen[a] then return true end
    seen[a] = true
    for k, v in pairs(a) do
      local ok, why = deep_eq(v, b[k], path .. "." .. tostring(k), seen)
      if not ok then return false, why end
    end
    for k in pairs(b) do
      if a[k] == nil then return false, path .. "." .. tostring(k) .. ": missing" end
    end
    return true
  end
  if type(a) == "function" or type(a) == "thread" or type(a) == "userdata" then return true end
  if a ~= b and not (a ~= a and b ~= b) then return false, path .. ": " .. tostring(a) .. " vs " .. tostring(b) end
  return true
end

local Point = {}
Point.__index = Point
Point.__add = function(p, q) return setmetatable({x = p.x + q.x, y = p.y + q.y}, Point) end
function Point.new(x, y) return setmetatable({x = x, y = y}, Point) end
function Point:scale(k) return Point.new(self.x * k, self.y * k) end

local upcount = 0
local cases = {}
local function case(name, fn, make) cases[#cases + 1] = {name = name, fn = fn, make = make} end
local function T(...) return tc.randn(...) end
local function one(n) return function(i) return T(n or 4) end end

case("arith chain", function(s, x) return x * 2 + 1 - x / 3 end, one())
case("multiple returns", function(s, x) return x:sin(), x:cos(), 3 end, one())
case("varargs sum", function(s, ...)
  local acc = 0
  for i = 1, select("#", ...) do acc = acc + select(i, ...) end
  return acc
end, function(i) return T(3), T(3), T(3) end)
case("varargs pass through", function(s, ...) local function g(...) return ... end return g(...) end,
  function(i) return T(2), i, "x" end)
case("table building", function(s, x) local t = {x, x + 1, n = 2} t[#t + 1] = x * 2 return t end, one())
case("table read write", function(s, x) s.a = x; s.b = s.a + 1; s.count = (s.count or 0) + 1; return s.b end, one())
case("nested tables", function(s, x) return {a = {b = {c = x:relu()}}} end, one())
case("closure counter", function(s, x)
  local n = 0
  local function inc(v) n = n + 1 return v + n end
  return inc(inc(x)), n
end, one())
case("closure over param", function(s, x, k) local f = function(y) return y * k end return f(x) + f(1) end,
  function(i) return T(3), i end)
case("upvalue write", function(s, x) upcount = upcount + 1 s.up = upcount return x + 1 end, one())
case("numeric for", function(s, x) local y = x for i = 1, 5 do y = y + i end return y end, one())
case("numeric for step", function(s, x) local y = x for i = 10, 1, -3 do y = y * 0.5 + i end return y end, one())
case("float for", function(s, x) local y = x for f = 0.5, 2.0, 0.5 do y = y + f end return y end, one())
case("while loop", function(s, x) local i, y = 0, x while i < 4 do y = y:tanh() i = i + 1 end return y end, one())
case("repeat until", function(s, x) local i, y = 0, x repeat y = y + 1 i = i + 1 until i >= 3 return y end, one())
case("goto continue", function(s, x)
  local y = x
  for i = 1, 6 do
    if i % 2 == 0 then goto continue end
    y = y + i
    ::continue::
  end
  return y
end, one())
case("ipairs over list", function(s, xs) local acc = xs[1] * 0 for _, v in ipairs(xs) do acc = acc + v end return acc end,
  function(i) return {T(2), T(2), T(2)} end)
case("string building", function(s, x)
  local parts = {}
  for i = 1, 3 do parts[#parts + 1] = "p" .. i end
  s.label = table.concat(parts, "-") .. ":" .. string.format("%d", #parts)
  return x + #s.label
end, one())
case("string methods", function(s, x, name) s.up = name:upper() .. ("!"):rep(2) return x * #name end,
  function(i) return T(2), "abc" .. i end)
case("metatable class", function(s, x) local p = Point.new(x, x * 2) + Point.new(1, 2) return p.x + p.y end, one())
case("method call", function(s, x) return Point.new(x, x):scale(3).y end, one())
case("setmetatable new", function(s, x)
  local mt = {__index = function(t, k) return k * 2 end}
  local t = setmetatable({}, mt)
  return x + t[5]
end, one())
case("pcall around error", function(s, x)
  local ok, err = pcall(error, "boom")
  s.ok = ok
  s.err = err
  return x * 2
end, one())
case("pcall ok", function(s, x) local ok, v = pcall(function() return x + 1 end) return ok, v end, one())
case("error caught", function(s, x)
  local ok, e = pcall(function() error({code = 7}) end)
  return e.code, x
end, one())
case("assert passes", function(s, x) assert(x, "needs x") return assert(x:abs()) end, one())
case("type checks", function(s, x, v) return type(v), tc.is_tensor(x), math.type(v) end,
  function(i) return T(2), i % 2 == 0 and i or i + 0.5 end)
case("math on constants", function(s, x, k) return x * math.sqrt(k) + math.floor(k / 2) + math.max(k, 3) end,
  function(i) return T(3), i + 1 end)
case("integer division and modulo", function(s, x, k) return x * (k // 2) + (k % 3) + x // 2 + x % 1.5 end,
  function(i) return T(3), i + 4 end)
case("comparisons of numbers", function(s, x, k) if k > 2 then return x * k else return x end end,
  function(i) return T(3), i end)
case("data-dependent if", function(s, x) if x:sum() > 0 then return x * 2 else return x - 1 end end, one())
case("data-dependent while", function(s, x) local n = 0 while x:abs():max() > 0.5 do x = x * 0.5 n = n + 1 end return x, n end,
  function(i) return T(4) * 3 end)
case("item read", function(s, x) local v = x:sum():item() s.v = math.floor(v * 1000) return x * 2 end, one())
case("print-like foreign call", function(s, x) local y = x + 1 s.t = os.time() > 0 return y * 2 end, one())
case("coroutine around compiled", function(s, x)
  local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end)
  local first = co(x)
  return first, co(first)
end, one())
case("and or", function(s, x, flag) local y = flag and x * 2 or x / 2 return y, flag or "none" end,
  function(i) return T(2), i % 2 == 0 end)
case("not and nil", function(s, x, v) return not v, v == nil, x end, function(i) return T(2), (i % 2 == 0) and i or nil end)
case("shape logic", function(s, x) local n = x:size(1) return x:view(n, 1):expand(n, 3):sum(2), #x, x:dim() end,
  function(i) return T(i + 2) end)
case("shape table", function(s, x) local sh = x.shape return x:reshape(sh[2], sh[1]), sh[1] * sh[2] end,
  function(i) return T(2, i + 1) end)
case("list results", function(s, x) local parts = x:split(2) return #parts, parts[1], parts[#parts] end,
  function(i) return T(6) end)
case("cat stack", function(s, x, y) return tc.cat({x, y}, 1), tc.stack({x, y}) end, function(i) return T(3), T(3) end)
case("options table", function(s, x) return x:sum(1, {keepdim = true}), x:softmax(-1), x:to(tc.float64) end,
  function(i) return T(2, 3) end)
case("indexing", function(s, x) return x[1], x[{{}, {2, 3}}], x[2][1] end, function(i) return T(3, 4) end)
case("in-place", function(s, x) local y = x:clone() y:add_(1) y:mul_(2) return y end, one())
case("reduction tuple", function(s, x) local v, idx = x:max(2) return v, idx end, function(i) return T(3, 4) end)
case("recursion", function(s, x)
  local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end
  return x * fact(5)
end, one())
case("global read", function(s, x) return x + (tc_corpus_global or 0) end, one())
case("global write", function(s, x) tc_corpus_counter = (tc_corpus_counter or 0) + 1 s.g = tc_corpus_counter return x end, one())
case("select negative", function(s, ...) return select(-1, ...) end, function(i) return 1, 2, T(2) end)
case("table.unpack", function(s, t) return table.unpack(t) end, function(i) return {T(2), i, "z"} end)
case("table.insert", function(s, x) local t = {} table.insert(t, x) table.insert(t, 1, x * 2) return t end, one())
case("rawget rawset", function(s, x) local t = {} rawset(t, "k", x) return rawget(t, "k") + 1, rawequal(t, t) end, one())
case("pairs over table", function(s, t) local n = 0 for k, v in pairs(t) do n = n + v end return n end,
  function(i) return {a = 1, b = i} end)
case("module layer", function(s, m, x) return m(x) end, function(i)
  tc.manual_seed(1)
  return require("tc.nn").Linear(4, 2), T(3, 4)
end)
case("no tensors at all", function(s, a, b) return a + b, a .. "" end, function(i) return i, i * 2 end)
case("returns nothing", function(s, x) s.done = true end, one())
case("tail call", function(s, x) local function g(y) return y * 3 end return g(x + 1) end, one())
case("long concat", function(s, x, n) local str = "" for i = 1, n do str = str .. i end s.str = str return x end,
  function(i) return T(2), i + 2 end)

case("custom iterator closure", function(s, x)
  local function iter(n) local i = 0 return function() i = i + 1 if i <= n then return i end end end
  local acc = x
  for i in iter(3) do acc = acc + i end
  return acc
end, one())
case("open results into constructors", function(s, x)
  local function multi() return 1, 2, 3 end
  local t = {multi()}
  return x + #t, {multi(), multi()}
end, one())
case("varargs into a table", function(s, x, ...) local t = {...} return x * #t, ... end, function(i) return T(2), i, i + 1 end)
case("goto loop", function(s, x) local i = 0 ::top:: i = i + 1 if i < 4 then goto top end return x * i end, one())
case("closures per iteration", function(s, x)
  local fs = {}
  for i = 1, 3 do fs[i] = function() return i end end
  return x + fs[2]()
end, one())
case("integer and bitwise arithmetic", function(s, x)
  local a, b = 10, 3
  return x + a // b + a % b + a / b + (-a) // b + 2 ^ 3 + (a & 6) + (a | 1) + (a ~ 3) + (a << 2) + (a >> 1) + ~a
end, one())
case("float keys are integer keys", function(s, x) local t = {} t[1.0] = x t[2] = x * 2 return t[1] + t[2], #t end, one())
case("break out of a loop", function(s, x) local r = x for i = 3, 1, -1 do if i == 2 then break end r = r + i end return r end, one())
case("aliased tables", function(s, x) local a = {x = 1} local b = a b.x = 2 return x * a.x end, one())
case("unpack with nils", function(s, x) local t = {1, 2, nil, 4} return x * select("#", table.unpack(t, 1, 4)) end, one())
case("views and matmul", function(s, x)
  local m = x:view(2, 2)
  return m:t():matmul(m), m:transpose(1, 2):contiguous(), m:unsqueeze(1):squeeze(1)
end, one())
case("where and masks", function(s, x) return tc.where(x:gt(0), x, x * 0.1), x:masked_fill(x:lt(0), 0) end, one())
case("tensor assignment into a clone", function(s, x) local y = x:clone() y[1] = 5 return y end, one())
case("tensor assignment into an argument", function(s, x)
  x[1] = x[2] * 2
  x[{{}, {2, 3}}] = -1
  x[x:gt(0.5)] = 0.5
  return x:sum()
end, function(i) return T(3, 4) end)
case("mask assignment with a tensor", function(s, x, v) x[x:lt(0)] = v return x end, function(i) return T(2, 3), T(2, 3) end)
case("tensor assignment into a table's tensor", function(s, m, x) m.buf[{2, {}}] = x m.buf[1] = m.buf[1] + 1 return m.buf[2] end,
  function(i) return {buf = tc.zeros(2, 3)}, T(3) end)
case("view taken before a write", function(s, x) local r = x[2] x[2] = 0 s.r = r return r + 1 end, function(i) return T(3, 2) end)
case("fresh tensor filled by rows", function(s, x)
  local y = tc.zeros(3, 2)
  for i = 1, 3 do y[i] = x * i end
  return y
end, function(i) return T(2) end)
case("appends to an outside table", function(s, x, t) t[#t + 1] = x t[#t + 1] = x * 2 return #t end,
  function(i) return T(2), {} end)
local Recorder = {}
Recorder.__index = Recorder
Recorder.__newindex = function(t, k, v)
  rawget(t, "keys")[#rawget(t, "keys") + 1] = k
  rawset(t, k, tc.is_tensor(v) and v:relu() or v)
end
case("__newindex function", function(s, r, x) r.a = x r.b = 2 r.a = r.a + r.b return r.a, #r.keys end,
  function(i) return setmetatable({keys = {}}, Recorder), T(3) end)
case("__newindex table", function(s, p, x) p.v = x * 2 s.v = p.v return rawget(p, "v") == nil end,
  function(i) local store = {} return setmetatable({}, {__newindex = store, __index = store}), T(2) end)
case("__newindex on a table made here", function(s, x)
  local n = 0
  local t = setmetatable({}, {__newindex = function(t, k, v) n = n + 1 rawset(t, k, v) end})
  t.a, t.b = x, x + 1
  t.a = x * 3
  return t.a + t.b, n
end, one())
case("__newindex loop raises as in eager", function(s, t, x) s.before = 1 t.k = x return x end,
  function(i) local t = {} return setmetatable(t, {__newindex = t, __index = t}), T(2) end)
case("__index loop raises as in eager", function(s, t, x) return x, t.k end,
  function(i) local t = {} return setmetatable(t, {__index = t}), T(2) end)
local Stash = require("tc.nn").Module:extend("Stash")
function Stash:__init() self.lin = require("tc.nn").Linear(3, 2) end
function Stash:forward(x) local y = self.lin(x) self.last = y:tanh() self.ready = true return y + self.last end
case("module stores attributes in forward", function(s, m, x) return m(x), m.last end, function(i)
  tc.manual_seed(1)
  return Stash(), T(2, 3)
end)

local failures = {}
for _, c in ipairs(cases) do
  local cf = tc.compile(c.fn)
  local ok_all = true
  for i = 1, 4 do
    -- twin arguments (same seed): writes into them must be equal too
    tc.manual_seed(100 + i)
    local args1 = table.pack(c.make(i))
    tc.manual_seed(100 + i)
    local args2 = table.pack(c.make(i))
    local s1, s2 = {}, {}
    tc_corpus_counter, upcount = 0, 0
    local r1 = table.pack(pcall(c.fn, s1, table.unpack(args1, 1, args1.n)))
    tc_corpus_counter, upcount = 0, 0
    local r2 = table.pack(pcall(cf, s2, table.unpack(args2, 1, args2.n)))
    local ok, why = deep_eq(r2, r1, "results")
    if ok then ok, why = deep_eq(s2, s1, "side effects") end
    if ok then ok, why = deep_eq(args2, args1, "arguments") end
    if not ok then
      failures[#failures + 1] = ("%s (call %d): %s"):format(c.name, i, why)
      ok_all = false
      break
    end
  end
end
tc_corpus_counter = nil
assert(#cases >= 50, "corpus size " .. #cases)
if #failures > 0 then error(#failures .. " of " .. #cases .. " cases differ:\n" .. table.concat(failures, "\n")) end
