-- A trace that runs tc.config.trace_pure_lua_instructions (2000 under tcrun --compile-all, off
-- otherwise) without touching a tensor is given up, as torch's Dynamo skips frames with no tensor
-- work: the function runs uncompiled from its start (nothing of the call has happened: tracing is
-- symbolic), and later calls without a tensor argument or upvalue run uncompiled without tracing
-- again. Calls that hand it a tensor still trace, and so do functions that make tensors early.
local tc = require "tc"
local h = require "helpers"

local function loop(n)
  local s = 0
  for i = 1, n do s = s + i % 7 end
  return s
end

-- explicit tc.compile with the bound set: traced once, then skipped
tc.config.trace_pure_lua_instructions = 500
local p = tc.compile(loop)
h.eq(p(1000), loop(1000), "the skipped call's result is eager's")
local s = h.stats()
h.eq(s.traces, 1, "traced once")
h.eq(s.pure_lua_skips, 1, "given up for having no tensor work")
h.eq(p(1000), loop(1000), "second call")
h.eq(p(7), loop(7), "a call that would have finished early")
s = h.stats()
h.eq(s.traces, 1, "no trace for later calls without tensors")
h.eq(s.pure_lua_calls, 2, "both ran uncompiled by the skip")

-- the same function given a tensor traces (the long pure-Lua part included) and compiles
local x = tc.ones(3)
local g = tc.compile(function(t, n) return t * loop(n) end)
h.close(g(x, 1000), x * loop(1000), "tensor argument")
s = h.stats()
h.eq(s.traces, 2, "a call with a tensor argument traces")
h.eq(s.pure_lua_skips, 1, "and is not skipped")
h.eq(s.backend_compiles, 1, "its graph is compiled")
-- a tensor upvalue counts as a tensor handed to the function
local up = tc.compile(function(n) return x + loop(n) end)
h.close(up(1000), x + loop(1000), "tensor upvalue")
h.eq(h.stats().pure_lua_skips, 1, "a tensor upvalue is not skipped")
-- a function that makes a tensor before the bound keeps its graph
local made = tc.compile(function(n) local y = tc.ones(2) * 2 return y + loop(n) end)
h.close(made(1000), tc.ones(2) * 2 + loop(1000), "tensor made inside")
h.eq(h.stats().pure_lua_skips, 1, "a function that makes a tensor early is not skipped")
tc.config.trace_pure_lua_instructions = nil

-- fullgraph=true never skips: the whole function is traced and kept
local fg = tc.compile(loop, {fullgraph = true})
h.eq(fg(1000), loop(1000), "fullgraph")
h.eq(h.stats().pure_lua_skips, 1, "fullgraph is not skipped")

-- under tcrun --compile-all the bound is on by default (and logged with TC_LOGS=skips)
local script = [[
local tc = require "tc"
local function loop(n) local s = 0 for i = 1, n do s = s + i % 7 end return s end
local a = loop(3000)
local p = tc.compile(loop)
local b = p(3000) + p(3000) + p(5)
local g = tc.compile(function(t, n) return t * loop(n) end)
local y = g(tc.ones(2), 3000)
local s = tc.compiler.stats()
print(a, b, y[1]:item(), s.pure_lua_skips, s.pure_lua_calls, s.backend_compiles)
]]
local want = ("%d\t%d\t%.1f"):format(loop(3000), 2 * loop(3000) + loop(5), loop(3000))
local plain, rc = h.run(script)
h.eq(rc, 0, "plain run: " .. plain)
h.eq(plain:match("^%S+%s+%S+%s+%S+"), want, "plain results")
local out, rc2 = h.run(script, "--compile-all --log skips")
h.eq(rc2, 0, "compile-all run: " .. out)
local line = out:match(want:gsub("%.", "%%.") .. "[^\n]*")
-- the main chunk (after require's break: its resume function) and p are skipped once each; p's
-- next two calls run uncompiled; g traces with its tensor argument and compiles
h.eq(line, want .. "\t2\t2\t1", "compile-all results and counts:\n" .. out)
assert(out:find("[tc skips] ", 1, true), "TC_LOGS=skips names the skip:\n" .. out)
