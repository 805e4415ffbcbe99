-- The program generator of the differential fuzzer: a seed gives one random, well-formed Lua
-- program (as a tree the shrinker can cut) mixing tensor ops with Lua's own semantics.
--
-- Every value has a type, so programs are well-formed by construction:
--   T  float32 [A,B] tensor    R  [B] tensor      K  [A] tensor      Z  0-dim tensor
--   W  [B,B] tensor            i  integer         f  float           s  string
--   b  boolean                 L  list of T       Q  record {a=T, n=i}
--   O  Vec object (metatables)  M  nn module [*,B] -> [*,B]
-- Expressions are nodes {ty, f, a}: `f` is the text with $1..$n standing for the rendered
-- children `a`. Statements are {k="s", f, a} (one line) or {k="b", f, a, body, els, close}
-- (a block). The rendered program is a chunk called as chunk(C, OUT): C wraps a function for
-- the run's mode (identity when eager, tc.compile otherwise), OUT is a file the program writes
-- to through C calls; the chunk returns its results R.
local G = {}

-- The leaf each type simplifies to (the shrinker's last resort for an expression).
local function leaf_text(ty)
  return ({
    T = "tc.ones(A, B)", R = "tc.ones(B)", K = "tc.ones(A)", Z = "tc.tensor(1.5)", W = "tc.eye(B)",
    i = "1", f = "0.5", s = '"s"', b = "true", L = "{tc.ones(A, B)}", Q = "{a = tc.ones(A, B), n = 1}",
    O = "Vec.new(tc.ones(A, B))", M = "nn.Identity()",
  })[ty]
end
G.leaf_text = leaf_text

local PRELUDE = [[
local C, OUT = ...
local tc = require "tc"
local nn = require "tc.nn"
local F = tc.nn.functional
local A, B = %d, %d
tc.manual_seed(%d)
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
]]

-- ---------------------------------------------------------------- random source
local rng_state
local function rand(n) -- 1..n
  -- xorshift64*, deterministic across platforms (Lua integers are 64-bit)
  local x = rng_state
  x = x ~ (x >> 12); x = x ~ (x << 25); x = x ~ (x >> 27)
  rng_state = x
  return ((x * 2685821657736338717) >> 33) % n + 1
end
local function chance(p) return rand(1000) <= p * 1000 end
local function pick(t) return t[rand(#t)] end

-- ---------------------------------------------------------------- scopes
local Gen = {}
Gen.__index = Gen

local function new_gen(seed)
  rng_state = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) | 1
  for _ = 1, 4 do rand(2) end
  local g = setmetatable({seed = seed, counter = 0, scopes = {{}}, funcs = {}, loop = 0, depth = 0,
    vararg = false, in_fn = false}, Gen)
  g.A, g.B = pick({2, 3, 3}), pick({3, 4, 4, 3})
  return g
end

function Gen:name(prefix)
  self.counter = self.counter + 1
  return prefix .. self.counter
end
function Gen:push() self.scopes[#self.scopes + 1] = {} end
function Gen:pop() self.scopes[#self.scopes] = nil end
function Gen:declare(name, ty, fixed, sig)
  local s = self.scopes[#self.scopes]
  s[#s + 1] = {name = name, ty = ty, fixed = fixed, sig = sig}
end
function Gen:vars(ty, assignable)
  local out = {}
  for _, s in ipairs(self.scopes) do
    for _, v in ipairs(s) do
      if v.ty == ty and not (assignable and v.fixed) then out[#out + 1] = v end
    end
  end
  return out
end

local function E(ty, f, ...) return {ty = ty, f = f, a = {...}} end

-- ---------------------------------------------------------------- expressions
local rules = {} -- rules[ty] = list of {weight, function(g, d) -> node or nil}
local function rule(ty, w, fn) rules[ty] = rules[ty] or {}; table.insert(rules[ty], {w, fn}) end

function Gen:literal(ty)
  if ty == "i" then
    if chance(0.05) then return E("i", pick({"math.maxinteger", "math.mininteger", "(1 << 62)", "-0"})) end
    return E("i", tostring(rand(13) - 4))
  end
  if ty == "f" then
    if chance(0.05) then return E("f", pick({"math.huge", "(-0.0)", "(-math.huge)", "2^53", "1e38", "5e-324"})) end
    return E("f", pick({"0.5", "-1.25", "2.0", "3.75", "0.125", "-0.5"}))
  end
  if ty == "s" then return E("s", pick({'"a"', '"xy"', '"tc"', '"Z9"', '"q q"'})) end
  if ty == "b" then return E("b", pick({"true", "false"})) end
  if ty == "T" then
    return pick({
      function() return E("T", "tc.ones(A, B)") end,
      function() return E("T", "tc.full({A, B}, $1)", self:literal("f")) end,
      function() return E("T", "tc.randn(A, B)") end,
      function() return E("T", "(tc.arange(1, A * B + 1):view(A, B):float() / 4)") end,
      function() return E("T", "tc.linspace(-2, 2, A * B):view(A, B)") end,
    })()
  end
  if ty == "R" then return pick({E("R", "tc.ones(B)"), E("R", "tc.linspace(-1, 1, B)"), E("R", "tc.randn(B)")}) end
  if ty == "K" then return pick({E("K", "tc.ones(A)"), E("K", "tc.zeros(A)"), E("K", "tc.randn(A)")}) end
  if ty == "Z" then return pick({E("Z", "tc.tensor($1)", self:literal("f")), E("Z", "tc.randn(A):sum()")}) end
  if ty == "W" then return pick({E("W", "tc.eye(B)"), E("W", "(tc.randn(B, B) * 0.5)"), E("W", "(tc.ones(B, B) / B)")}) end
  if ty == "L" then
    local n = rand(3)
    local parts, a = {}, {}
    for k = 1, n do parts[k] = "$" .. k; a[k] = self:expr("T", 1) end
    return {ty = "L", f = "{" .. table.concat(parts, ", ") .. "}", a = a}
  end
  if ty == "Q" then return E("Q", "{a = $1, n = $2}", self:expr("T", 1), self:expr("i", 1)) end
  if ty == "O" then return E("O", "Vec.new($1)", self:expr("T", 1)) end
  if ty == "M" then
    return pick({E("M", "nn.Linear(B, B)"), E("M", "nn.Sequential(nn.Linear(B, B), nn.Tanh())"),
      E("M", "nn.LayerNorm(B)"), E("M", "nn.ReLU()"), E("M", "Block(B)"), E("M", "C(nn.Linear(B, B))"), E("M", "C(Block(B))")})
  end
  error("no literal for " .. ty)
end

function Gen:expr(ty, d)
  d = d or 3
  local vs = self:vars(ty)
  if #vs > 0 and (d <= 0 or chance(0.35)) then return E(ty, pick(vs).name) end
  if d <= 0 or not rules[ty] or chance(0.15) then return self:literal(ty) end
  local total = 0
  for _, r in ipairs(rules[ty]) do total = total + r[1] end
  for _ = 1, 8 do
    local x = rand(total)
    for _, r in ipairs(rules[ty]) do
      x = x - r[1]
      if x <= 0 then
        local node = r[2](self, d - 1)
        if node then return node end
        break
      end
    end
  end
  return self:literal(ty)
end

-- T: the main [A, B] tensor
rule("T", 6, function(g, d) return E("T", "($1 " .. pick({"+", "-", "*"}) .. " $2)", g:expr("T", d), g:expr("T", d)) end)
rule("T", 3, function(g, d) return E("T", "($1 " .. pick({"+", "-", "*", "/"}) .. " $2)", g:expr("T", d), g:expr("f", d)) end)
rule("T", 2, function(g, d) return E("T", "($1 " .. pick({"+", "*", "-"}) .. " $2)", g:expr("f", d), g:expr("T", d)) end)
rule("T", 2, function(g, d) return E("T", "($1 + $2)", g:expr("T", d), g:expr("R", d)) end)
rule("T", 2, function(g, d) return E("T", "($1 * $2:unsqueeze(2))", g:expr("T", d), g:expr("K", d)) end)
rule("T", 1, function(g, d) return E("T", "($1 * $2)", g:expr("T", d), g:expr("Z", d)) end)
rule("T", 1, function(g, d) return E("T", "($1 * $2)", g:expr("T", d), g:expr("i", d)) end)
rule("T", 6, function(g, d)
  return E("T", "$1:" .. pick({"relu()", "sin()", "cos()", "tanh()", "sigmoid()", "abs()", "neg()", "floor()",
    "clamp(-1, 1)", "softmax(2)", "softmax(-1)", "log_softmax(2)", "t():t()", "clone()", "contiguous()",
    "flip(1)", "flip(2)", "detach()", "exp():tanh()", "gelu()", "silu()", "sign()", "round()"}), g:expr("T", d))
end)
rule("T", 1, function(g, d) return E("T", "(-$1)", g:expr("T", d)) end)
rule("T", 2, function(g, d) return E("T", "(function(x, y) return tc.where(x:gt($2), x, y) end)($1, $3)", g:expr("T", d), g:expr("f", 0), g:expr("T", d)) end)
rule("T", 1, function(g, d) return E("T", "(function(x) return x:masked_fill(x:lt(0), $2) end)($1)", g:expr("T", d), g:expr("f", 0)) end)
rule("T", 2, function(g, d) return E("T", "$1:matmul($2)", g:expr("T", d), g:expr("W", d)) end)
rule("T", 1, function(g, d) return E("T", "tc.cat({$1, $2}, 1):narrow(1, $3, A)", g:expr("T", d), g:expr("T", d), E("i", tostring(rand(2)))) end)
rule("T", 1, function(g, d) return E("T", "tc.stack({$1, $2}):sum(1)", g:expr("T", d), g:expr("T", d)) end)
rule("T", 1, function(g, d) return E("T", "$1:reshape(A * B):view(A, B)", g:expr("T", d)) end)
rule("T", 1, function(g, d) return E("T", "$1:transpose(1, 2):reshape(A, B)", g:expr("T", d)) end)
rule("T", 1, function(g, d) return E("T", "($1 * $2:sum(2, {keepdim = true}))", g:expr("T", d), g:expr("T", d)) end)
rule("T", 1, function(g, d) return E("T", "$1:expand(A, B):contiguous()", g:expr("R", d)) end)
rule("T", 2, function(g, d) return E("T", "$1.t", g:expr("O", d)) end)
rule("T", 1, function(g, d) return E("T", "$1($2)", g:expr("O", d), g:expr("f", d)) end)
rule("T", 1, function(g, d) return E("T", "$1[1]", g:expr("L", d)) end)
rule("T", 1, function(g, d) return E("T", "$1.a", g:expr("Q", d)) end)
rule("T", 2, function(g, d) return E("T", "$1($2)", g:expr("M", 0), g:expr("T", d)) end)
rule("T", 1, function(g, d)
  if not g.vararg then return nil end
  return pick({E("T", "(...)"), E("T", "tc.stack({...}):sum(1)"), E("T", "select(-1, ...)")})
end)
rule("T", 1, function(g, d) -- a coroutine passing tensors both ways
  return E("T", "(function(p) local co = coroutine.wrap(function(q) local r = coroutine.yield(q * 2) return r + q end) local first = co(p) return co(first:tanh()) end)($1)", g:expr("T", d))
end)
rule("T", 1, function(g, d) -- varargs through a local function, multiple results
  return E("T", "(function(...) local n = select('#', ...) local a, b = ... return (a + b) * n end)($1, $2)", g:expr("T", d), g:expr("T", d))
end)
rule("T", 1, function(g, d) -- pcall returning a value
  return E("T", "select(2, pcall(function(p) return p:relu() + 1 end, $1))", g:expr("T", d))
end)
rule("T", 1, function(g, d) -- upvalue counter in a closure made here
  return E("T", "(function(p) local n = 0 local function bump(v) n = n + 1 return v * n end return bump(bump(p)) + n end)($1)", g:expr("T", d))
end)
rule("T", 1, function(g, d) return E("T", "F.linear($1, $2)", g:expr("T", d), g:expr("W", d)) end)
rule("T", 2, function(g, d) return g:call("T", d) end)
rule("T", 1, function(g, d) -- a closure made here, returned and called
  return E("T", "(function(c) return function(k) return c * k end end)($1)($2)", g:expr("T", d), g:expr("f", 0))
end)
rule("T", 1, function(g, d) return E("T", "({fn = function(x) return x + 1 end}).fn($1)", g:expr("T", d)) end)
rule("T", 1, function(g, d) -- a method defined on a table made here
  return E("T", "(function(x) local o = {k = $2} function o:m(y) return y * self.k end return o:m(x) end)($1)", g:expr("T", d), g:expr("f", 0))
end)
rule("T", 1, function(g, d) return E("T", "coroutine.wrap(function(x) coroutine.yield(x:relu()) end)($1)", g:expr("T", d)) end)
rule("T", 1, function(g, d)
  return E("T", pick({"($1:double() * 2):float()", "$1:round():long():float()", "($1:sort(2))", "$1:cumsum(2)",
    "(select(2, $1:sort(2)):float())", "$1:to(tc.float64):to(tc.float32)", "tc.tensor($1:tolist())"}), g:expr("T", d))
end)

rule("R", 3, function(g, d) return E("R", "$1:" .. pick({"sum(1)", "mean(1)", "amax(1)", "amin(1)"}), g:expr("T", d)) end)
rule("R", 1, function(g, d) return E("R", "($1:max(1))", g:expr("T", d)) end)
rule("R", 2, function(g, d) return E("R", "$1[$2]", g:expr("T", d), E("i", tostring(rand(2)))) end)
rule("R", 2, function(g, d) return E("R", "($1 " .. pick({"+", "*", "-"}) .. " $2)", g:expr("R", d), g:expr("R", d)) end)
rule("R", 1, function(g, d) return E("R", "($1 * $2)", g:expr("R", d), g:expr("f", d)) end)
rule("R", 1, function(g, d) return E("R", "$1:" .. pick({"relu()", "tanh()", "cumsum(1)", "flip(1)"}), g:expr("R", d)) end)
rule("R", 1, function(g, d) return E("R", "$1:select(1, 1)", g:expr("T", d)) end)

rule("K", 3, function(g, d) return E("K", "$1:" .. pick({"sum(2)", "mean(2)", "amax(2)", "logsumexp(2)", "norm(2, 2)"}), g:expr("T", d)) end)
rule("K", 1, function(g, d) return E("K", "$1[{{}, $2}]", g:expr("T", d), E("i", tostring(rand(3)))) end)
rule("K", 2, function(g, d) return E("K", "($1 " .. pick({"+", "*"}) .. " $2)", g:expr("K", d), g:expr("K", d)) end)
rule("K", 1, function(g, d) return E("K", "$1:argmax(2):float()", g:expr("T", d)) end)
rule("K", 1, function(g, d) return E("K", "$1:" .. pick({"sigmoid()", "abs()", "exp():log()"}), g:expr("K", d)) end)

rule("Z", 3, function(g, d) return E("Z", "$1:" .. pick({"sum()", "mean()", "amax()", "norm()", "abs():sum()"}), g:expr("T", d)) end)
rule("Z", 1, function(g, d) return E("Z", "$1:sum()", g:expr("R", d)) end)
rule("Z", 1, function(g, d) return E("Z", "$1:mean()", g:expr("K", d)) end)
rule("Z", 1, function(g, d) return E("Z", "$1[{1, $2}]", g:expr("T", d), E("i", tostring(rand(3)))) end)
rule("Z", 1, function(g, d) return E("Z", "($1 * $2 + $3)", g:expr("Z", d), g:expr("Z", d), g:expr("f", 0)) end)
rule("Z", 1, function(g, d) return E("Z", "$1:total()", g:expr("O", d)) end)

rule("W", 1, function(g, d) return E("W", "$1:t()", g:expr("W", d)) end)
rule("W", 1, function(g, d) return E("W", "($1 + $2)", g:expr("W", d), g:expr("W", d)) end)
rule("W", 1, function(g, d) return E("W", "(function(x) return x:t():matmul(x) end)($1)", g:expr("T", d)) end)

rule("i", 4, function(g, d) return E("i", "($1 " .. pick({"+", "-", "*"}) .. " $2)", g:expr("i", d), g:expr("i", d)) end)
rule("i", 2, function(g, d) return E("i", "($1 " .. pick({"//", "%"}) .. " " .. pick({"2", "3", "-4"}) .. ")", g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "($1 " .. pick({"&", "|", "~", "<<", ">>"}) .. " " .. rand(3) .. ")", g:expr("i", d)) end)
rule("i", 2, function(g, d) return E("i", pick({"#$1", "$1:size(1)", "$1:size(2)", "$1:dim()", "$1:numel()", "$1.shape[2]"}), g:expr("T", d)) end)
rule("i", 1, function(g, d) return E("i", "#$1", g:expr("L", d)) end)
rule("i", 1, function(g, d) return E("i", "#$1", g:expr("s", d)) end)
rule("i", 1, function(g, d) return E("i", "#$1", g:expr("O", d)) end)
rule("i", 1, function(g, d) return E("i", "$1.n", g:expr("Q", d)) end)
rule("i", 1, function(g, d) return E("i", "math." .. pick({"max", "min"}) .. "($1, $2)", g:expr("i", d), g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "math.abs($1)", g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "$1:argmax():item()", g:expr("T", d)) end)
rule("i", 1, function(g, d) return E("i", "G1") end)
rule("i", 1, function(g, d)
  if not g.vararg then return nil end
  return E("i", "select('#', ...)")
end)
rule("i", 1, function(g, d) -- table.sort with a Lua comparator (a C function calling back into Lua)
  return E("i", "(function(t) table.sort(t, function(x, y) return x > y end) return t[1] end)({$1, $2, $3})",
    g:expr("i", d), g:expr("i", d), g:expr("i", d))
end)
rule("i", 1, function(g, d) return E("i", "($1 and $2 or $3)", g:expr("b", d), g:expr("i", d), g:expr("i", d)) end)
rule("i", 1, function(g, d) return g:call("i", d) end)
rule("i", 1, function(g, d) return E("i", "(\"10\" + $1)", g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "((($1 % 1000) + 0.0) | 1)", g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "($1 " .. pick({"//", "%"}) .. " $2)", g:expr("i", d), E("i", pick({"-3", "7", "-1", "math.mininteger"}))) end)
rule("i", 1, function(g, d) return E("i", "(math.tointeger(math.floor($1)) or 0)", g:expr("f", d)) end)
rule("i", 1, function(g, d)
  return E("i", "(function(m) local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end return fact(m % 6) end)($1)", g:expr("i", d))
end)
rule("i", 1, function(g, d) return E("i", "($1:find(\"a\", 1, true) or 0)", g:expr("s", d)) end)
rule("i", 1, function(g, d) return E("i", "select('#', $1, nil, $2)", g:expr("T", d), g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "(math.tointeger($1 * 2.0) or 0)", g:expr("i", d)) end)
rule("i", 1, function(g, d) return E("i", "#$1:tolist()", g:expr("T", d)) end)
rule("i", 1, function(g, d) -- integer, float and string keys
  return E("i", "(({[1] = 10, [2.0] = 20, [\"1\"] = 30, [3] = 40})[" .. pick({"$1 % 3 + 1", "($1 % 2 + 1.0)", "tostring($1 % 2)"}) .. "] or 0)", g:expr("i", d))
end)

rule("f", 3, function(g, d) return E("f", "$1:item()", g:expr("Z", d)) end)
rule("f", 2, function(g, d) return E("f", "($1 " .. pick({"+", "-", "*"}) .. " $2)", g:expr("f", d), g:expr("f", d)) end)
rule("f", 1, function(g, d) return E("f", "($1 / " .. pick({"2", "4", "0.5"}) .. ")", g:expr("i", d)) end)
rule("f", 1, function(g, d) return E("f", "($1 + 0.5)", g:expr("i", d)) end)
rule("f", 1, function(g, d) return E("f", "math.sqrt(math.abs($1))", g:expr("f", d)) end)
rule("f", 1, function(g, d) return E("f", "math.max($1, $2)", g:expr("f", d), g:expr("f", d)) end)
rule("f", 1, function(g, d) return E("f", "$1:sum():item()", g:expr("T", d)) end)
rule("f", 1, function(g, d) return E("f", "tonumber($1)", E("s", pick({'"1.5"', '"0x10p-2"', '"2e-1"'}))) end)
rule("f", 1, function(g, d) return g:call("f", d) end)
rule("f", 1, function(g, d) return E("f", "($1 " .. pick({"%", "//", "/", "^"}) .. " $2)", g:expr("f", d), g:expr("f", d)) end)
rule("f", 1, function(g, d) return E("f", "($1 / 0)", g:expr("i", d)) end)
rule("f", 1, function(g, d) return E("f", "(\"3.5\" + $1)", g:expr("i", d)) end)
rule("f", 1, function(g, d) return E("f", "math.fmod($1, $2)", g:expr("f", d), E("f", pick({"1.5", "-2.0", "0.75"}))) end)

rule("s", 2, function(g, d) return E("s", "($1 .. $2)", g:expr("s", d), g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "($1 .. $2)", g:expr("s", d), g:expr("i", d)) end)
rule("s", 2, function(g, d) return E("s", "string.format(\"%s:%d\", $1, $2)", g:expr("s", d), g:expr("i", d)) end)
rule("s", 1, function(g, d) return E("s", "string.format(\"%.2f\", $1)", g:expr("f", d)) end)
rule("s", 1, function(g, d) return E("s", "tostring($1)", g:expr(pick({"i", "b", "f"}), d)) end)
rule("s", 2, function(g, d) return E("s", "$1:" .. pick({"upper()", "lower()", "rep(2)", "sub(1, 2)", "reverse()"}), g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "table.concat({$1, $2}, \",\")", g:expr("s", d), g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "Lazy[$1]", g:expr("s", d)) end)
-- tostring(): Lua 5.4.4 (the eager reference) can fail a longer concat whose middle operand calls
-- __concat (a stale stack pointer after the metamethod: "attempt to call a nil value")
rule("s", 1, function(g, d) return E("s", "tostring($1 .. \"x\")", g:expr("O", d)) end)
rule("s", 1, function(g, d) return E("s", "type($1)", g:expr(pick({"T", "i", "L", "O", "s"}), d)) end)
rule("s", 1, function(g, d) return E("s", "string.format(\"%q\", $1)", g:expr("s", d)) end)
rule("s", 1, function(g, d) return g:call("s", d) end)
rule("s", 2, function(g, d) return E("s", "math.type($1)", g:expr(pick({"i", "f"}), d)) end)
rule("s", 1, function(g, d) return E("s", "($1:gsub(\"%a\", \"%0.\"))", g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "($1:gsub(\".\", function(c) return c:byte() .. \"\" end))", g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "setmetatable({}, {__index = function(t, k) return k .. \"?\" end})[$1]", g:expr("s", d)) end)
rule("s", 1, function(g, d) return E("s", "tostring($1 == $2)", g:expr("i", d), g:expr("f", d)) end)
rule("s", 1, function(g, d) return E("s", "tostring($1)", g:expr(pick({"T", "R", "Z"}), d)) end)
rule("s", 1, function(g, d) return E("s", "($1 .. \"\")", g:expr("f", d)) end)

rule("b", 3, function(g, d) return E("b", "($1 " .. pick({"<", "<=", ">", ">=", "==", "~="}) .. " $2)", g:expr("i", d), g:expr("i", d)) end)
rule("b", 3, function(g, d) return E("b", "($1 " .. pick({">", "<"}) .. " $2)", g:expr("Z", d), g:expr("f", 0)) end)
rule("b", 2, function(g, d) return E("b", "($1:item() " .. pick({">", "<="}) .. " $2)", g:expr("Z", d), g:expr("f", 0)) end)
rule("b", 1, function(g, d) return E("b", "$1:gt(0):any():item()", g:expr("T", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 " .. pick({"<", "<="}) .. " $2)", g:expr("f", d), g:expr("f", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 == $2)", g:expr("s", d), g:expr("s", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 < $2)", g:expr("O", d), g:expr("O", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 " .. pick({"==", "~="}) .. " $2)", g:expr("O", d), g:expr("O", d)) end)
rule("b", 1, function(g, d) return E("b", "(not $1)", g:expr("b", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 " .. pick({"and", "or"}) .. " $2)", g:expr("b", d), g:expr("b", d)) end)
rule("b", 1, function(g, d) return E("b", "tc.is_tensor($1)", g:expr(pick({"T", "i", "O"}), d)) end)
rule("b", 1, function(g, d) return E("b", "($1 == nil)", g:expr("T", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 < $2)", g:expr("s", d), g:expr("s", d)) end)
rule("b", 1, function(g, d) return E("b", "rawequal($1, $2)", g:expr("L", d), g:expr("L", d)) end)
rule("b", 1, function(g, d) return E("b", "(next($1) ~= nil)", g:expr("Q", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 " .. pick({"==", "<", "<="}) .. " $2)", g:expr("i", d), g:expr("f", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 == $1 + 0.0)", g:expr("i", d)) end)
rule("b", 1, function(g, d) return E("b", "($1 ~= $1)", g:expr("f", d)) end)
rule("b", 1, function(g, d) return E("b", "math.ult($1, $2)", g:expr("i", d), g:expr("i", d)) end)

rule("L", 1, function(g, d) return E("L", "{$1, table.unpack($2)}", g:expr("T", d), g:expr("L", d)) end)
rule("L", 1, function(g, d) return E("L", "$1:split(B, 2)", g:expr("T", d)) end)
rule("L", 1, function(g, d) return E("L", "{$1:chunk(1, 1)[1]}", g:expr("T", d)) end)
rule("O", 2, function(g, d) return E("O", "($1 + $2)", g:expr("O", d), g:expr("O", d)) end)
rule("O", 1, function(g, d) return E("O", "($1 * $2)", g:expr("O", d), g:expr("f", d)) end)
rule("O", 1, function(g, d) return E("O", "$1:scale($2)", g:expr("O", d), g:expr("i", d)) end)
rule("O", 1, function(g, d) return E("O", "(-$1)", g:expr("O", d)) end)
rule("Q", 1, function(g, d) return E("Q", "(function(q) return {a = q.a * 2, n = q.n + 1} end)($1)", g:expr("Q", d)) end)

-- A call of a function in scope whose first result has type ty.
function Gen:call(ty, d)
  local cands = {}
  for _, s in ipairs(self.scopes) do
    for _, v in ipairs(s) do
      if v.sig and v.sig.rets[1] == ty then cands[#cands + 1] = v end
    end
  end
  if #cands == 0 then return nil end
  local v = pick(cands)
  local node = self:call_node(v, d)
  node.ty = ty
  if #v.sig.rets > 1 or v.sig.vararg then node.f = "(" .. node.f .. ")" end -- one value, even as a last argument
  return node
end

function Gen:call_node(v, d)
  local parts, a = {}, {}
  for k, pty in ipairs(v.sig.params) do parts[k] = "$" .. k; a[k] = self:expr(pty, d) end
  if v.sig.vararg then
    for _ = 1, rand(3) - 1 + 1 do a[#a + 1] = self:expr("T", d); parts[#parts + 1] = "$" .. #a end
  end
  return {ty = v.sig.rets[1], f = v.name .. "(" .. table.concat(parts, ", ") .. ")", a = a}
end

-- ---------------------------------------------------------------- statements
local function S(f, ...) return {k = "s", f = f, a = {...}} end
local function Blk(f, a, body, close, els) return {k = "b", f = f, a = a or {}, body = body, close = close or "end", els = els} end

local LOCAL_TYPES = {"T", "T", "T", "T", "R", "K", "Z", "i", "i", "f", "s", "s", "b", "L", "Q", "O", "W"}

function Gen:stmt_local(ty)
  ty = ty or pick(LOCAL_TYPES)
  local n = self:name("v")
  local e = self:expr(ty)
  self:declare(n, ty)
  return S("local " .. n .. " = $1", e)
end

function Gen:block(n)
  local out = {}
  self:push()
  for _ = 1, n do out[#out + 1] = self:stmt() end
  self:pop()
  return out
end

local stmt_rules = {}
local function srule(w, fn) stmt_rules[#stmt_rules + 1] = {w, fn} end

srule(8, function(g) return g:stmt_local() end)
srule(6, function(g)
  local ty = pick({"T", "T", "T", "i", "s", "f", "R", "O", "L", "Q", "b"})
  local vs = g:vars(ty, true)
  if #vs == 0 then return nil end
  -- strings are cut so that doubling in loops and repeated calls stays small
  return S(pick(vs).name .. (ty == "s" and " = ($1):sub(1, 40)" or " = $1"), g:expr(ty))
end)
srule(2, function(g) -- in place on a tensor
  local vs = g:vars("T", true)
  if #vs == 0 then return nil end
  local v = pick(vs).name
  return pick({
    function() return S(v .. ":add_($1)", g:expr("T")) end,
    function() return S(v .. ":mul_($1)", g:expr("f", 1)) end,
    function() return S(v .. ":clamp_(-3, 3)") end,
    function() return S(v .. "[$1] = $2", E("i", tostring(rand(2))), g:expr("R")) end,
    function() return S(v .. "[{{}, $1}] = $2", E("i", tostring(rand(3))), g:expr("f", 1)) end,
    function() return S(v .. "[" .. v .. ":lt(0)] = $1", g:expr("f", 1)) end,
  })()
end)
srule(3, function(g) return S("OUT:write($1, \"\\n\")", g:expr("s")) end)
srule(1, function(g) return S("OUT:write(string.format(\"%s|%s|%s\\n\", tostring($1), $2, tostring($3)))", g:expr("i"), g:expr("s"), g:expr("b")) end)
srule(1, function(g) return S("G1 = G1 + $1", g:expr("i", 1)) end)
srule(2, function(g) -- table writes
  local which = pick({"L", "Q", "O"})
  local vs = g:vars(which)
  if #vs == 0 then return nil end
  local v = pick(vs).name
  if which == "L" then
    return pick({S("table.insert(" .. v .. ", $1)", g:expr("T")), S(v .. "[#" .. v .. " + 1] = $1", g:expr("T")),
      S("if #" .. v .. " > 1 then table.remove(" .. v .. ") end")})
  elseif which == "Q" then
    return pick({S(v .. ".a = $1", g:expr("T")), S(v .. ".n = " .. v .. ".n + $1", g:expr("i", 1))})
  else
    return pick({S(v .. ".t = $1", g:expr("T")), S(v .. ".extra = $1", g:expr("T"))})
  end
end)
srule(4, function(g) -- if / else, often on tensor data
  if g.depth >= 3 then return nil end
  g.depth = g.depth + 1
  local c = g:expr("b")
  local body = g:block(rand(3))
  local els = chance(0.5) and g:block(rand(2)) or nil
  g.depth = g.depth - 1
  return Blk("if $1 then", {c}, body, "end", els)
end)
srule(3, function(g) -- numeric for with goto continue and break
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  g.loop = g.loop + 1
  local iv, label = g:name("k"), g:name("continue")
  local head = pick({"for " .. iv .. " = 1, " .. rand(3) .. " do", "for " .. iv .. " = " .. rand(3) .. ", 1, -1 do",
    "for " .. iv .. " = 1, " .. rand(3) .. " do", "for " .. iv .. " = math.maxinteger - 1, math.maxinteger do",
    "for " .. iv .. " = math.mininteger + 1, math.mininteger, -1 do", "for " .. iv .. " = 7, 1, -" .. (rand(3) + 2) .. " do"})
  g:push()
  g:declare(iv, "i", true)
  local body = {}
  if chance(0.4) then body[#body + 1] = S("if $1 then goto " .. label .. " end", g:expr("b", 2)) end
  for _ = 1, rand(3) do body[#body + 1] = g:stmt() end
  if chance(0.2) then body[#body + 1] = S("if $1 then break end", g:expr("b", 2)) end
  g:pop()
  g.loop = g.loop - 1
  g.depth = g.depth - 1
  return Blk(head, {}, body, "::" .. label .. ":: end")
end)
srule(1, function(g) -- float for
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local iv = g:name("x")
  g:push()
  g:declare(iv, "f", true)
  local body = {}
  for _ = 1, rand(2) do body[#body + 1] = g:stmt() end
  g:pop()
  g.depth = g.depth - 1
  return Blk("for " .. iv .. " = 0.5, 1.5, 0.5 do", {}, body)
end)
srule(2, function(g) -- ipairs over a list
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local iv, vv = g:name("j"), g:name("e")
  local lst = g:expr("L", 1)
  g:push()
  g:declare(iv, "i", true)
  g:declare(vv, "T", true)
  local body = {}
  for _ = 1, rand(3) do body[#body + 1] = g:stmt() end
  g:pop()
  g.depth = g.depth - 1
  return Blk("for " .. iv .. ", " .. vv .. " in ipairs({table.unpack($1, 1, 3)}) do", {lst}, body) -- a copy: the body may append
end)
srule(1, function(g) -- pairs over a record: key order must agree
  local kv, vv = g:name("key"), g:name("val")
  return Blk("for " .. kv .. ", " .. vv .. " in pairs($1) do", {g:expr("Q", 1)},
    {S("OUT:write(" .. kv .. ", type(" .. vv .. "), \"\\n\")")})
end)
-- A counted loop body: `w = w + 1` then a few statements (while and repeat).
function Gen:counted_body(w)
  self:push()
  local body = {S(w .. " = " .. w .. " + 1")}
  for _ = 1, rand(2) do body[#body + 1] = self:stmt() end
  self:pop()
  return body
end
srule(2, function(g) -- while with a data-dependent condition, bounded by a counter
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local w = g:name("w")
  local c = g:expr("b", 2)
  local body = g:counted_body(w)
  g.depth = g.depth - 1
  return Blk("local " .. w .. " = 0 while " .. w .. " < " .. rand(3) .. " and $1 do", {c}, body)
end)
srule(1, function(g) -- repeat until
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local w = g:name("r")
  local c = g:expr("b", 2)
  local body = g:counted_body(w)
  g.depth = g.depth - 1
  return Blk("local " .. w .. " = 0 repeat", {}, body, "until " .. w .. " >= " .. rand(3) .. " or $1", nil), c
end)
srule(1, function(g) -- backward goto loop
  local w = g:name("gl")
  g:push()
  local body = {S(w .. " = " .. w .. " + 1"), g:stmt()}
  g:pop()
  return Blk("do local " .. w .. " = 0 ::top" .. w .. "::", {}, body,
    "if " .. w .. " < " .. rand(3) .. " then goto top" .. w .. " end end")
end)
srule(1, function(g) -- to-be-closed variables: tc.no_grad() and a __close that writes
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local c = g:name("cl")
  local head = pick({"do local " .. c .. " <close> = tc.no_grad()",
    "do local " .. c .. " <close> = setmetatable({}, {__close = function(_, e) OUT:write(\"close " .. c .. " \", tostring(e ~= nil), \"\\n\") end})"})
  local body = g:block(rand(2))
  g.depth = g.depth - 1
  return Blk(head, {}, body)
end)
srule(1, function(g) -- yield out of the function when it runs in a coroutine
  return S("if coroutine.isyieldable() then coroutine.yield($1) end", g:expr(pick({"T", "i", "s"}), 2))
end)
srule(1, function(g) -- swap through multiple assignment
  local ty = pick({"T", "i", "s"})
  local vs = g:vars(ty, true)
  if #vs < 2 then return nil end
  local a, b = pick(vs).name, pick(vs).name
  return S(a .. ", " .. b .. " = " .. b .. ", " .. a)
end)
srule(1, function(g) return S("io.write($1, \"\\n\")", g:expr("s")) end)
srule(1, function(g) return S("G2 = (G2 or 0) + $1", g:expr("i", 1)) end) -- a global made by the program
srule(1, function(g) -- one target twice in a multiple assignment (Lua assigns right to left)
  local which = pick({"Q", "L", "i"})
  local vs = g:vars(which, true)
  if #vs == 0 then return nil end
  local v = pick(vs).name
  if which == "Q" then return S(v .. ".n, " .. v .. ".n = $1, $2", g:expr("i", 1), g:expr("i", 1)) end
  if which == "L" then return S("if #" .. v .. " > 1 then " .. v .. "[1], " .. v .. "[2] = " .. v .. "[2], " .. v .. "[1] end") end
  return S(v .. ", " .. v .. " = $1, $2", g:expr("i", 1), g:expr("i", 1))
end)
srule(2, function(g) -- pcall around code that may raise (strings, tables, levels, op errors)
  if g.depth >= 2 then return nil end
  g.depth = g.depth + 1
  local ok, err = g:name("ok"), g:name("err")
  local saved = g.vararg
  g.vararg = false
  g:push()
  local body = {}
  for _ = 1, rand(2) do body[#body + 1] = g:stmt() end
  local raise = pick({
    function() return S("if $1 then error($2) end", g:expr("b", 2), g:expr("s", 1)) end,
    function() return S("if $1 then error({code = $2}) end", g:expr("b", 2), g:expr("i", 1)) end,
    function() return S("if $1 then error($2, 0) end", g:expr("b", 2), g:expr("s", 1)) end,
    function() return S("if $1 then local _ = $2:matmul(tc.ones(A + 1, 2)) end", g:expr("b", 2), g:expr("T", 1)) end,
    function() return S("if $1 then local _ = $2 + nil end", g:expr("b", 2), g:expr("T", 1)) end,
    function() return S("if $1 then assert(false, $2) end", g:expr("b", 2), g:expr("s", 1)) end,
    function() return S("if $1 then local _ = $2 // 0 end", g:expr("b", 2), g:expr("i", 1)) end,
    function() return S("if $1 then local _ = $2 % 0 end", g:expr("b", 2), g:expr("i", 1)) end,
    function() return S("if $1 then local _ = math.tointeger($2) | 1 end", g:expr("b", 2), g:expr("f", 1)) end,
    function() return S("if $1 then local _ = $2.zzz + 1 end", g:expr("b", 2), g:expr("Q", 1)) end,
    function() return S("if $1 then local _ = $2:frobnicate() end", g:expr("b", 2), g:expr("T", 1)) end,
    function() return S("if $1 then local _ = $2[{A + 5, 1}] end", g:expr("b", 2), g:expr("T", 1)) end,
  })()
  body[#body + 1] = raise
  body[#body + 1] = S("return $1", g:expr("T"))
  g:pop()
  g.vararg = saved
  g.depth = g.depth - 1
  local tv = g:vars("T", true)
  local handler
  if #tv > 0 then
    handler = S("if " .. ok .. " then " .. pick(tv).name .. " = " .. err .. " else OUT:write(type(" .. err ..
      ") == \"table\" and tostring(" .. err .. ".code or " .. err .. ".message) or tostring(" .. err .. "), \"\\n\") end")
  else
    handler = S("OUT:write(tostring(" .. ok .. "), \"\\n\")")
  end
  return {k = "b", f = "local " .. ok .. ", " .. err .. " = pcall(function()", a = {}, body = body, close = "end)",
    after = handler}
end)
srule(1, function(g) -- an nn module built here (parameters filled with copy_) and called
  local m = g:name("m")
  g:declare(m, "M")
  return S("local " .. m .. " = $1", g:literal("M"))
end)
srule(1, function(g)
  local vs = g:vars("M")
  if #vs == 0 then return nil end
  local m = pick(vs).name
  return S("for _, p in ipairs(" .. m .. ":parameters()) do p:copy_(p * 0 + $1) end", g:expr("f", 0))
end)
srule(2, function(g) -- a local closure over upvalues, called later
  if g.depth >= 2 then return nil end
  return (g:func(true))
end)
srule(1, function(g) -- multiple assignment from a call with several results
  local cands = {}
  for _, s in ipairs(g.scopes) do
    for _, v in ipairs(s) do if v.sig and #v.sig.rets > 1 then cands[#cands + 1] = v end end
  end
  if #cands == 0 then return nil end
  local v = pick(cands)
  local names = {}
  local node = g:call_node(v, 2)
  for k, rty in ipairs(v.sig.rets) do names[k] = g:name("m"); end
  for k, rty in ipairs(v.sig.rets) do g:declare(names[k], rty) end
  return S("local " .. table.concat(names, ", ") .. " = $1", node)
end)

function Gen:stmt()
  local total = 0
  for _, r in ipairs(stmt_rules) do total = total + r[1] end
  for _ = 1, 10 do
    local x = rand(total)
    for _, r in ipairs(stmt_rules) do
      x = x - r[1]
      if x <= 0 then
        local st, extra = r[2](self)
        if st then
          if extra then table.insert(st.a, extra) end
          return st
        end
        break
      end
    end
  end
  return self:stmt_local()
end

-- A function: parameters, a body, returns. Local closures (nested=true) see their enclosing
-- scope (upvalues, assignments included); top-level ones are wrapped by C.
-- poly: the function shadows A and B with its first argument's sizes and sees nothing from
-- outside but the prelude, so it can be called with tensors of other sizes (dynamic shapes).
function Gen:func(nested, poly)
  local name = self:name(nested and "g" or "f")
  local np = rand(3)
  local params, pnames = {}, {}
  for k = 1, np do
    params[k] = pick({"T", "T", "T", "i", "s", "f", "L", "Q", "O", "R", "b"})
    pnames[k] = self:name("a")
  end
  if poly then params[1] = "T" end
  local outer = self.scopes
  if poly then self.scopes = {{}} end
  local vararg = not nested and chance(0.25)
  local nr = pick({1, 1, 1, 2, 3})
  local rets = {}
  for k = 1, nr do rets[k] = pick({"T", "T", "T", "i", "s", "f", "R", "Z", "b"}) end
  if nested then rets = {pick({"T", "T", "i", "s"})} end
  local sig = {params = params, vararg = vararg, rets = rets}
  local saved_va, saved_depth = self.vararg, self.depth
  self.vararg = vararg
  self.depth = nested and self.depth + 1 or 0
  self:push()
  for k = 1, np do self:declare(pnames[k], params[k]) end
  local body = {}
  if poly then body[1] = S("local A, B = " .. pnames[1] .. ":size(1), " .. pnames[1] .. ":size(2)") end
  for _ = 1, nested and rand(3) or rand(7) + 2 do body[#body + 1] = self:stmt() end
  local rparts, ra = {}, {}
  for k, rty in ipairs(rets) do rparts[k] = "$" .. k; ra[k] = self:expr(rty) end
  if vararg and chance(0.3) then rparts[#rparts + 1] = "..." end
  body[#body + 1] = {k = "s", f = "return " .. table.concat(rparts, ", "), a = ra, keep = true}
  self:pop()
  self.scopes = outer
  self.vararg, self.depth = saved_va, saved_depth
  if vararg then pnames[#pnames + 1] = "..." end
  self:declare(name, "fn", true, sig)
  return Blk("local function " .. name .. "(" .. table.concat(pnames, ", ") .. ")", {}, body), name, sig
end

-- A recursive function f(x, n): calls itself (compiled, through C) n times.
function Gen:recursive()
  local name, x, n = self:name("f"), self:name("a"), self:name("a")
  self:push()
  self:declare(x, "T")
  self:declare(n, "i", true)
  local base = self:expr("T", 2)
  local step = {}
  for _ = 1, rand(2) do step[#step + 1] = self:stmt() end
  local combine = self:expr("T", 1)
  self:pop()
  local sig = {params = {"T", "i"}, rets = {"T"}}
  local body = {S("if " .. n .. " <= 0 or " .. n .. " > 4 then return $1 end", base)}
  for _, st in ipairs(step) do body[#body + 1] = st end
  body[#body + 1] = {k = "s", f = "return " .. name .. "(" .. x .. " * 0.5, " .. n .. " - 1) + $1", a = {combine}, keep = true}
  self:declare(name, "fn", true, sig)
  return Blk("local function " .. name .. "(" .. x .. ", " .. n .. ")", {}, body), name, sig
end

-- ---------------------------------------------------------------- programs
function G.generate(seed, opts)
  opts = opts or {}
  local g = new_gen(seed)
  local prog = {seed = seed, A = g.A, B = g.B, body = {}}
  local body = prog.body
  local nf = rand(4)
  for _ = 1, nf do
    -- a few top-level locals the functions capture as upvalues
    if chance(0.5) then body[#body + 1] = g:stmt_local(pick({"T", "i", "s", "Q", "L"})) end
    local st, name, sig
    local poly = chance(0.2)
    if poly then st, name, sig = g:func(false, true)
    elseif chance(0.15) then st, name, sig = g:recursive()
    else st, name, sig = g:func(false) end
    body[#body + 1] = st
    body[#body + 1] = {k = "s", f = name .. " = C(" .. name .. ")", a = {}}
    if chance(0.2) then
      g:push()
      g:declare("it", "i", true)
      local node = g:call_node({name = name, sig = sig}, 1)
      for k, pty in ipairs(sig.params) do if pty == "i" and chance(0.7) then node.a[k] = E("i", "it") end end
      g:pop()
      local inner = node.f:match("^[^(]*%((.*)%)$")
      node.f = "for it = 1, " .. (rand(3) * 4) .. " do R[#R + 1] = P(pcall(" .. name .. (inner ~= "" and ", " .. inner or "") .. ")) end"
      body[#body + 1] = {k = "s", f = node.f, a = node.a}
    end
    for call = 1, rand(3) do
      local args = {}
      local parts = {}
      local outer = g.scopes
      if poly then g.scopes = {{}} end -- arguments of other sizes: made from literals only
      local node = g:call_node({name = name, sig = sig}, 2)
      g.scopes = outer
      for k = 1, #node.a do
        args[k] = "c" .. k
      end
      local list = #args > 0 and table.concat(args, ", ") or ""
      local decl = #args > 0 and ("local " .. list .. " = " .. node.f:gsub("^[^(]*%((.*)%)$", "%1") .. " ") or ""
      local callargs = name .. (#args > 0 and ", " .. list or "")
      local run = "R[#R + 1] = P(pcall(" .. callargs .. "))"
      if chance(0.25) then -- driven as a coroutine: yields inside come out here
        run = "local co = coroutine.create(" .. name .. ") local res = {} for _ = 1, 4 do res[#res + 1] = P(coroutine.resume(co" ..
          (#args > 0 and ", " .. list or "") .. ")) if coroutine.status(co) == \"dead\" then break end end R[#R + 1] = res"
      end
      local sizes = poly and ("local A, B = A + " .. (rand(3) - 1) .. ", B + " .. (rand(3) - 1) .. " ") or ""
      body[#body + 1] = {k = "s", f = "do " .. sizes .. decl .. run .. " R[#R + 1] = {" .. list .. "} end", a = node.a}
    end
  end
  return prog
end

-- ---------------------------------------------------------------- rendering
-- A child followed by `:`, `.`, `[` or `(` must be a prefix expression: parenthesized unless a name.
local function fill(f, a, render)
  return (f:gsub("%$(%d+)(.?)", function(k, after)
    local text = render(a[tonumber(k)])
    if after:match("^[:.%[(]$") and not text:match("^[%a_][%w_]*$") then text = "(" .. text .. ")" end
    return text .. after
  end))
end
local function render_expr(e)
  if not e.a or #e.a == 0 then return e.f end
  return fill(e.f, e.a, render_expr)
end
G.render_expr = render_expr

local function render_block(stmts, indent, out)
  for _, st in ipairs(stmts) do
    local fill = function(f) return fill(f, st.a, render_expr) end
    if st.k == "s" then
      out[#out + 1] = indent .. fill(st.f)
    else
      out[#out + 1] = indent .. fill(st.f)
      render_block(st.body, indent .. "  ", out)
      if st.els then
        out[#out + 1] = indent .. "else"
        render_block(st.els, indent .. "  ", out)
      end
      out[#out + 1] = indent .. fill(st.close)
      if st.after then out[#out + 1] = indent .. fill(st.after.f) end
    end
  end
end

function G.render(prog)
  local out = {}
  out[1] = "-- tc fuzz program, seed " .. prog.seed .. "\n" .. PRELUDE:format(prog.A, prog.B, prog.seed)
  local lines = {}
  render_block(prog.body, "", lines)
  out[2] = table.concat(lines, "\n")
  out[3] = "\nreturn R\n"
  return table.concat(out)
end

return G
