-- An indexing whose __index or __newindex function breaks (a C call inside it) runs at the graph
-- break: the metamethod through the compiler (a code cache of its own), the rest of the frame in a
-- resume function that is compiled too (its tensor ops form a graph), with eager's results,
-- yields and errors. For every indexing instruction: GETFIELD, GETTABUP, GETTABLE, GETI, SELF,
-- SETFIELD, SETTABUP, SETTABLE, SETI.
local tc = require "tc"
local h = require "helpers"

local log = {}
local mt = {__index = function(t, k)
  log[#log + 1] = tostring(k)  -- io.write: a break inside the metamethod
  io.write("")
  return type(k) == "number" and k * 10 or (k == "scale" and 3 or function(self, x) return x * t.base end)
end}
local obj = setmetatable({base = 5}, mt)
local chained = setmetatable({}, {__index = obj})  -- a table, then the function

local cases = {
  getfield = function(x) local o = obj; local s = o.scale; return x * s + 1 end,
  gettabup = function(x) local s = obj.scale; return x * s + 1 end,
  gettable = function(x, k) local o = obj; local s = o[k]; return x * s + 1 end,
  geti = function(x) local o = obj; local s = o[4]; return x * s + 1 end,
  self = function(x) local o = obj; return o:mul(x) + 1 end,
  chain = function(x) local s = chained.scale; return x * s + 1 end,
}
local names = {}
for name in pairs(cases) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local fn = cases[name]
  log = {}
  local want = fn(tc.ones(2), "scale")
  local eager_log = table.concat(log, ",")
  log = {}
  tc.compiler.reset()
  local report = tc.compiler.explain(fn)(tc.ones(2), "scale")
  log = {}
  local cf = tc.compile(fn)
  h.close(cf(tc.ones(2), "scale"), want, name)
  h.eq(table.concat(log, ","), eager_log, name .. ": the metamethod runs as often as in eager")
  h.close(cf(tc.ones(2), "scale"), want, name .. ", second call")
  local caches, resumed_graph = {}, false
  for _, t in ipairs(report.compile_times) do caches[#caches + 1] = t["function"] end
  local all = table.concat(caches, "\n")
  assert(all:find("function <[^>]*:" .. debug.getinfo(mt.__index, "S").linedefined .. ">"),
         name .. ": the __index function is compiled:\n" .. all)
  assert(all:find("resume of function"), name .. ": the rest is compiled:\n" .. all)
  for i, ops in ipairs(report.ops_per_graph) do
    if table.concat(ops, ","):find("add") then resumed_graph = true end
  end
  assert(resumed_graph, name .. ": the resumed part has its graph")
end

-- a coroutine yields through the __index function run at the break
local ymt = {__index = function(_, k) local v = coroutine.yield(k); return v end}
local yobj = setmetatable({}, ymt)
local f = tc.compile(function(x) local o = yobj; local v = o.anything; return x + v end)
local co = coroutine.wrap(function(x) return f(x) end)
h.eq(co(tc.ones(2)), "anything", "yielded the key")
h.close(co(4), tc.ones(2) + 4, "resumed with the value")

-- errors: indexing nil (Lua's message, naming the field), an __index function that raises
local function index_nil(x) local y = x + 1; local t = nil; return t.field, y end
local ok1, e1 = pcall(index_nil, tc.ones(1))
local ok2, e2 = pcall(tc.compile(index_nil), tc.ones(1))
h.eq(ok2, ok1, "indexing nil fails")
h.eq(e2, e1, "indexing nil: eager's message")
local raising = setmetatable({}, {__index = function(_, k) io.write("") error("no " .. k) end})
local function index_raises(x) local y = x + 1; local r = raising; return r.thing, y end
local ok3, e3 = pcall(index_raises, tc.ones(1))
local ok4, e4 = pcall(tc.compile(index_raises), tc.ones(1))
h.eq(ok4, ok3, "__index raising fails")
h.eq(e4, e3, "__index raising: eager's message")

-- writes through a __newindex function that breaks, and raw writes at the break
local writes, store = {}, {}
local proxy = setmetatable({}, {__index = store, __newindex = function(t, k, v)
  io.write("")
  writes[#writes + 1] = tostring(k)
  store[k] = v
end})
local existing = setmetatable({kept = 0}, getmetatable(proxy))
local function write_all(x, k)
  local y = x + 1
  proxy.a = 1            -- SETTABUP (proxy is an upvalue)
  local p = proxy
  p.b = 2                -- SETFIELD
  p[k] = 3               -- SETTABLE
  p[4] = 4               -- SETI
  p.a = 5                -- through __newindex again: a is not a raw key of proxy
  local q = existing
  q.kept = 6             -- a raw key: written raw, no metamethod
  return y * 2, p.a
end
local want_y, want_a = write_all(tc.ones(2), "c")
local eager_writes = table.concat(writes, ",")
writes, store = {}, {}
getmetatable(proxy).__index = store
existing.kept = 0
tc.compiler.reset()
local report = tc.compiler.explain(write_all)(tc.ones(2), "c")
local caches = {}
for _, t in ipairs(report.compile_times) do caches[#caches + 1] = t["function"] end
assert(table.concat(caches, "\n"):find("function <[^>]*:" .. debug.getinfo(getmetatable(proxy).__newindex, "S").linedefined .. ">"),
       "the __newindex function is compiled:\n" .. table.concat(caches, "\n"))
h.eq(table.concat(writes, ","), eager_writes, "the __newindex function runs as often as in eager")
h.eq(store.a, 5, "a")
h.eq(store.c, 3, "written through the key in a register")
h.eq(store[4], 4, "written through the integer key")
h.eq(existing.kept, 6, "a raw key written raw")
h.eq(rawget(existing, "kept"), 6, "raw")
local cy, ca = tc.compile(write_all)(tc.ones(2), "c")
h.close(cy, want_y, "result")
h.eq(ca, want_a, "read back through __index")
local ok5, e5 = pcall(write_all, tc.ones(2), nil)
local ok6, e6 = pcall(tc.compile(write_all), tc.ones(2), nil)
h.eq(ok6, ok5, "a nil key fails")
h.eq(e6, e5, "a nil key: eager's message")
