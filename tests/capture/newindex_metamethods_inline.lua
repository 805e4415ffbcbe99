-- Writes of new keys through a __newindex metamethod trace as Lua runs them: a function is
-- inlined (its own rawsets are recorded writes, replayed in order after the graph), a table is
-- written through to. tc.nn modules storing new attributes in forward (module_newindex) keep one
-- graph, and eager and compiled runs leave the same fields.
local tc = require "tc"
local nn = require "tc.nn"
local h = require "helpers"

local function same(a, b, what) h.close(a, b, what, 0) end
-- arithmetic results: as DESIGN.md §4 (fused on a GPU, a * 10 + b is one fma)
local function close(a, b, what) h.close_to_eager(a, b, what) end

-- A class whose __newindex logs every new key and stores twice the value.
local Logged = {}
Logged.__index = Logged
Logged.__newindex = function(t, k, v)
  local log = rawget(t, "log")
  log[#log + 1] = k
  rawset(t, k, v * 2)
end
local function logged() return setmetatable({log = {}}, Logged) end

local function f(obj, x)
  obj.a = x + 1      -- new key: through __newindex
  obj.b = 3          -- new key
  obj.a = obj.a * 10 -- present now: a raw write
  return obj.a + obj.b
end
local cf = tc.compile(f, {fullgraph = true})
local x = tc.randn(4)
local o1, o2 = logged(), logged()
local r1, r2 = f(o1, x), cf(o2, x)
close(r2, r1, "result")
same(o2.a, o1.a, "field a")
h.eq(o2.b, o1.b, "field b")
h.eq(table.concat(o2.log, ","), "a,b", "the metamethod ran for new keys only")
-- second call on the same object: the keys exist, no metamethod (a recompile, same results)
r1, r2 = f(o1, x), cf(o2, x)
close(r2, r1, "second call")
h.eq(#o2.log, 2, "no new keys")

-- __newindex as a table: the write goes to that table (and through its own __newindex)
local store = {}
local proxy_mt = {__newindex = store, __index = store}
local inner_log = {}
local chained = setmetatable({}, {__newindex = function(t, k, v) inner_log[#inner_log + 1] = k rawset(t, k, v) end})
local g = function(p, q, x) p.w = x:relu() q.z = x p.w = p.w + 1 return p.w end
local cg = tc.compile(g, {fullgraph = true})
local p1, p2 = setmetatable({}, proxy_mt), setmetatable({}, proxy_mt)
local q = setmetatable({}, {__newindex = chained})
local y = cg(p2, q, x)
same(y, x:relu() + 1, "result")
h.eq(rawget(p2, "w"), nil, "nothing stored in the proxy itself")
same(store.w, x:relu() + 1, "stored in the __newindex table (twice, the second time through it too)")
same(rawget(chained, "z"), x, "the chain reached the function")
h.eq(inner_log[1], "z", "the inner function ran once")
h.eq(#inner_log, 1, "once")

-- tables made in the compiled code: __newindex functions (closures too) and tables
local k = tc.compile(function(x)
  local seen = {}
  local t = setmetatable({}, {__newindex = function(t, key, v) seen[#seen + 1] = key rawset(t, key, v) end})
  t.one = x
  t.two = x * 2
  t.one = x * 3
  local sink = {}
  local u = setmetatable({}, {__newindex = sink})
  u.k = x
  return t.one + t.two, #seen, rawget(u, "k") == nil, sink.k
end, {fullgraph = true})
local a, n, empty, sunk = k(x)
close(a, x * 3 + x * 2, "result")
h.eq(n, 2, "two new keys")
h.eq(empty, true, "written through")
same(sunk, x, "the sink holds the value")

-- rawset itself as the metamethod
local raw = setmetatable({}, {__newindex = rawset})
tc.compile(function(t, x) t.v = x + 1 end, {fullgraph = true})(raw, x)
same(rawget(raw, "v"), x + 1, "rawset as __newindex")

-- a metamethod that errors: the error is eager's, raised at the write
local strict = setmetatable({}, {__newindex = function(t, key) error("no new field " .. key, 2) end})
local function w(t, x) t.oops = x return x end
local ok1, e1 = pcall(w, strict, x)
local ok2, e2 = pcall(tc.compile(w), strict, x)
h.eq(ok1, false)
h.eq(ok2, false)
h.eq(e2, e1, "the same error message")

-- a metamethod with a foreign call: the write breaks the graph and the effects stay in order
local printed = {}
local noisy = setmetatable({}, {__newindex = function(t, key, v) printed[#printed + 1] = os.time() > 0 and key rawset(t, key, v) end})
local function nz(t, x) t.before = 1 local y = x + 1 t.fresh = y rawset(t, "after", 2) return y * 2 end
local n1 = setmetatable({}, getmetatable(noisy))
local before = #printed
same(tc.compile(nz)(n1, x), (x + 1) * 2, "result across the break")
h.eq(#printed - before, 2, "the metamethod ran for both new keys")
h.eq(rawget(n1, "before"), 1)
same(rawget(n1, "fresh"), x + 1)
h.eq(rawget(n1, "after"), 2)

-- tc.nn: forward stores a new attribute and a tensor on self (module_newindex)
local Cache = nn.Module:extend("Cache")
function Cache:__init() self.lin = nn.Linear(4, 3) end
function Cache:forward(x)
  local y = self.lin(x)
  self.cache = y:relu()
  self.seen = true
  self.act = self.act or nn.ReLU()
  return self.act(y) + self.cache
end
tc.manual_seed(0)
local eager_m = Cache()
tc.manual_seed(0)
local compiled_m = Cache()
local cm = tc.compile(function(m, x) return m(x) end)
tc.compiler.reset()
for call = 1, 3 do
  local xi = tc.randn(2, 4)
  -- Linear(4, 3) is a tiny matmul: a generated reduction, summed in another order than BLAS
  h.close_to_eager(cm(compiled_m, xi), eager_m(xi), "module result, call " .. call)
  h.close_to_eager(compiled_m.cache, eager_m.cache, "cached tensor, call " .. call)
  h.eq(compiled_m.seen, eager_m.seen, "flag, call " .. call)
  h.eq(table.concat(compiled_m._order, ","), table.concat(eager_m._order, ","), "registered children")
  h.eq(compiled_m._kind.act, "module", "act registered as a module")
  local names = {}
  for name in compiled_m:named_children() do names[#names + 1] = name end
  h.eq(table.concat(names, ","), "lin,act", "children")
end
h.eq(h.stats().graph_breaks, 0, "no breaks")
h.eq(h.stats().recompiles, 1, "one recompile: the second call finds the keys present")
h.eq(h.stats().cache_hits, 1, "the third call runs the second entry")

-- an argument tensor stored on the module in forward: module_newindex asks whether it is a
-- parameter (a weak table read at a key that is a graph input): one graph, no break
local Keep = nn.Module:extend("Keep")
function Keep:__init() self.lin = nn.Linear(4, 4) end
function Keep:forward(x)
  self.last_in = x
  return self.lin(x)
end
tc.compiler.reset()
local keep = Keep()
local ck = tc.compile(keep, {fullgraph = true})
for call = 1, 3 do
  local xi = tc.randn(2, 4)
  h.close_to_eager(ck(xi), keep.lin(xi), "stored argument, call " .. call)
  assert(rawequal(keep.last_in, xi), "the module holds the caller's tensor, call " .. call)
  assert(not nn.is_parameter(keep.last_in), "not registered as a parameter")
end
h.eq(h.stats().graph_breaks, 0, "storing an argument does not break")
-- a Parameter stored into a fresh module registers, in the compiled call as in eager
local p = nn.Parameter(tc.randn(2, 4))
local fresh, eager_fresh = Keep(), Keep()
h.close_to_eager(tc.compile(fresh)(p), fresh.lin(p), "a parameter as the argument")
eager_fresh(p)
h.eq(fresh._kind.last_in, eager_fresh._kind.last_in, "registration as in eager")
h.eq(fresh._kind.last_in, "param", "a Parameter stored by forward registers")
