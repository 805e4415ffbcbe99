-- Errors raised from compiled code carry eager's message, kind and user line: a call of a value
-- that is not callable at a graph break names it as Lua does (method, global, field, upvalue),
-- an op that fails while its graph runs reports the line that made the node (not the caller's),
-- a comparison run at a break raises at its own line, an integer division by zero raises
-- ZeroDivisionError as eager does (generated code would give 0). --log=bogus and TC_LOGS=bogus are clear
-- errors listing the valid log names.
local tc = require "tc"
local h = require "helpers"

local obj, up = {}, nil
G_errors = {}
local cases = {
  function(x) local y = x + 1; return obj:frobnicate(y) end,
  function(x) local y = x + 1; local z = y:frobnicate(); return z end,
  function(x) local y = x + 1; return no_such_global(y) end,
  function(x) local y = x + 1; return G_errors.fn(y) end,
  function(x) local y = x + 1; return up(y) end,
  function(x) local y = x + 1; local t = {}; return t[1](y) end,
  function(x) local y = x + 1; return y < {} end,
  function(x)
    local y = x + 1
    local i = tc.tensor({5}, {dtype = tc.int64})
    return y:index_select(1, i)
  end,
  function(x) local y = x:exp(); return y:view(7) end,
  function(x) local y = x + 1; return y + tc.ones(3) end,
  -- integer division by zero: eager's ZeroDivisionError, also where generated code divides
  function(x) local i = x:to(tc.int64); local d = i - 1; return (i + 1) // d end,
  function(x) local i = x:to(tc.int64); return tc.remainder(i * 3, i - 1) end,
  function(x) local i = x:to(tc.int32); return tc.div(i, i - 1, {rounding_mode = "trunc"}) + 1 end,
  function(x) local i = x:to(tc.int64); return (i + 2) // 0 end,
}

local function describe(e)
  if type(e) == "table" then return ("%s: %s @%s:%s"):format(e.kind, e.message, e.file, e.line) end
  return tostring(e)
end

for n, fn in ipairs(cases) do
  local ok1, e1 = pcall(fn, tc.ones(2))
  local ok2, e2 = pcall(tc.compile(fn), tc.ones(2))
  h.eq(ok1, false, "case " .. n .. " fails eagerly")
  h.eq(ok2, false, "case " .. n .. " fails compiled")
  h.eq(describe(e2), describe(e1), "case " .. n)
end

local out, rc = h.run("print(1)", "--log=bogus")
assert(rc ~= 0 and out:find("unknown log 'bogus'", 1, true) and out:find("graph_breaks", 1, true), out)
out, rc = h.run("print(1)", "--log=graph_breaks,recompiles")
h.eq(rc, 0, "valid logs")
local p = assert(io.popen("TC_LOGS=bogus " .. (h.tcrun or "build/tcrun") .. " -e 'print(1)' 2>&1"))
out = p:read("a")
local _, _, code = p:close()
assert(code ~= 0 and out:find("TC_LOGS: unknown log 'bogus'", 1, true), out)
local old = tc.config.log
tc.config.log = "graph_breaks,nope"
local ok, err = pcall(tc.compile(function(x) return x + 1 end), tc.ones(1))
tc.config.log = old
h.eq(ok, false, "tc.config.log checked")
h.eq(err.kind, "ValueError", "kind")
assert(err.message:find("unknown log 'nope'", 1, true), err.message)
