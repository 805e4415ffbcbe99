-- A Lua function backend that raises while compiling keeps its message: a CompileError at the
-- user's call line naming the backend, its own error as `cause` (it used to come out as the input
-- tensor). A backend that returns something not callable says so; the seed's `return gm.forward`
-- runs the graph.
local tc = require "tc"
local h = require "helpers"

local function f(x) return x:sin() + 1 end
local x = tc.randn(3)
local FILE = "lua_backend_errors_keep_their_message.lua"

local raising = tc.compile(f, {backend = function(gm, ex) error("no kernels today") end})
local line = debug.getinfo(1, "l").currentline + 1
local ok, e = pcall(raising, x)
h.eq(ok, false, "raises")
h.eq(type(e), "table", "an error table, not " .. tostring(e))
h.eq(e.kind, "CompileError", "kind")
assert(e.message:find("the backend function <", 1, true) and e.message:find("raised: ", 1, true), e.message)
assert(e.message:find("no kernels today", 1, true), e.message)
h.eq(e.file:sub(-#FILE), FILE, "file")
h.eq(e.line, line, "the user's call line")
assert(type(e.cause) == "string" and e.cause:find("no kernels today", 1, true), tostring(e.cause))
-- the next call asks the backend again (nothing half-made was cached), and raises the same way
ok, e = pcall(raising, x)
h.eq(ok, false, "raises again")
h.eq(type(e) == "table" and e.kind, "CompileError", "again")

-- a tc error inside the backend: its kind is in the message, the error itself in `cause`
local shape = tc.compile(f, {backend = function(gm, ex) return tc.ones(2) + tc.ones(3) end})
ok, e = pcall(shape, x)
h.eq(ok, false, "raises")
assert(e.message:find("ShapeError: ", 1, true), e.message)
h.eq(e.cause.kind, "ShapeError", "cause")

-- not callable: says what it got and what to return
for _, v in ipairs {42, "forward", {}, false} do
  local bad = tc.compile(f, {backend = function(gm, ex) return v end})
  ok, e = pcall(bad, x)
  h.eq(ok, false, type(v))
  h.eq(e.kind, "CompileError", type(v))
  assert(e.message:find("returned a " .. type(v) .. ", not a callable", 1, true), e.message)
  assert(e.message:find("gm.forward", 1, true), e.message)
end
local none = tc.compile(f, {backend = function(gm, ex) end})
ok, e = pcall(none, x)
assert(not ok and e.message:find("returned nil, not a callable", 1, true), tostring(e))
-- a callable table is a callable
local callable = setmetatable({}, {__call = function(_, a) return f(a) end})
local via_table = tc.compile(f, {backend = function(gm, ex) return callable end})
h.close(via_table(x), f(x), "callable table")

-- the seed's backend: `gm:print_tabular(); return gm.forward`
local compiles = 0
local seed = tc.compile(f, {backend = function(gm, ex)
  compiles = compiles + 1
  return gm.forward
end})
h.close(seed(x), f(x), "gm.forward as the callable")
local y = tc.randn(3)
h.close(seed(y), f(y), "second call")
h.eq(compiles, 1, "one backend compile")
-- gm.forward bound to its gm checks its arguments
local got
tc.compile(f, {backend = function(gm, ex) got = gm return gm.forward end})(x)
ok, e = pcall(got.forward, x, x)
assert(not ok and e.kind == "ValueError" and e.message:find("expected 1 tensors, got 2", 1, true), tostring(e))
h.close(got:forward(x), f(x), "gm:forward(x) still works")
