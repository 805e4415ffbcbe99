-- A trace that costs more than its bounds allow (tc.config.trace_max_guards, trace_max_memory_mb,
-- trace_max_ms) is abandoned: the function runs uncompiled from then on, with eager's results and
-- one log line, never taking the program down; under fullgraph = true it is a CompileError. So
-- is any internal failure while tracing (out of memory, a bug: injected at the end).
local tc = require "tc"
local h = require "helpers"

-- reads 200 fields: 200 guards (the same code runs in a fresh tcrun below, for its log)
local code = [[
local tc = require "tc"
local function sum_fields(t)
  local s = 0
  for i = 1, 200 do s = s + t["k" .. i] end
  return s
end
local t = {}
for i = 1, 200 do t["k" .. i] = i end
return sum_fields, t
]]
local sum_fields, t = load(code)()

tc.config.trace_max_guards = 50
local cf = tc.compile(sum_fields)
h.eq(cf(t), 20100, "eager's result")
h.eq(cf(t), 20100, "again")
local s = h.stats()
h.eq(s.traces, 0, "no trace finished")
h.eq(s.fallbacks, 1, "the function runs uncompiled")
assert(s.max_guards <= 50, "the trace stopped at its bound: " .. s.max_guards)
t.k1 = 2
h.eq(cf(t), 20101, "a changed table: still eager's result, no new attempt")
h.eq(h.stats().fallbacks, 1, "given up once")

-- fullgraph: a CompileError naming the bound, raised on each call
tc.compiler.reset()
local strict = tc.compile(sum_fields, {fullgraph = true})
local ok, err = pcall(strict, t)
h.eq(ok, false, "fullgraph raises")
h.eq(err.kind, "CompileError", "its kind")
assert(err.message:find("trace_max_guards", 1, true), err.message)
assert(err.message:find("fullgraph", 1, true), err.message)
h.eq(pcall(strict, t), false, "and again")
tc.config.trace_max_guards = nil

-- the memory bound: a trace that builds 4000 tables holds megabytes
local function build(n)
  local out = {}
  for i = 1, n do out[i] = {i, i + 1, i + 2, i + 3} end
  return #out
end
tc.compiler.reset()
tc.config.trace_max_memory_mb = 1
h.eq(tc.compile(build)(4000), 4000, "eager's result past the memory bound")
h.eq(h.stats().fallbacks, 1, "runs uncompiled")
tc.config.trace_max_memory_mb = nil

-- the time bound: 0 ms (any trace of thousands of instructions takes longer)
tc.compiler.reset()
tc.config.trace_max_ms = 0
h.eq(tc.compile(build)(3000), 3000, "eager's result past the time bound")
h.eq(h.stats().fallbacks, 1, "runs uncompiled")
tc.config.trace_max_ms = nil

-- one log line, on stderr, naming the function and the bound
local out = h.run(code:gsub("return sum_fields, t", "") .. [[
tc.config.trace_max_guards = 50
local cf = tc.compile(sum_fields)
for _ = 1, 3 do assert(cf(t) == 20100) end
print("done")
]])
h.eq(h.count(out, "runs uncompiled"), 1, "one log line:\n" .. out)
assert(out:find("tc: function <[^>]+:2> runs uncompiled: the trace made more than 50 guards %(tc%.config%.trace_max_guards%)"), out)
assert(out:find("done", 1, true), out)

-- Out of memory and a bug while tracing (injected through the test hook TC_TEST_TRACE_FAILURE):
-- eager's results with one log line, a CompileError under fullgraph; the program goes on.
local script = os.tmpname() .. ".lua"
local f = assert(io.open(script, "w"))
f:write([[
local tc = require "tc"
local cf = tc.compile(function(x) return x * 2 + 1 end)
for _ = 1, 3 do assert(cf(tc.ones(2)):sum():item() == 6) end
local ok, err = pcall(tc.compile(function(x) return x + 1 end, {fullgraph = true}), tc.ones(2))
assert(not ok and err.kind == "CompileError", tostring(err))
print("fullgraph: " .. err.message)
print("done")
]])
f:close()
for _, failure in ipairs({"bad_alloc", "bug"}) do
  local p = assert(io.popen("TC_TEST_TRACE_FAILURE=" .. failure .. " " .. (h.tcrun or "build/tcrun") ..
                            " " .. script .. " 2>&1"))
  local out = p:read("a")
  p:close()
  local what = failure == "bad_alloc" and "std::bad_alloc" or "injected by TC_TEST_TRACE_FAILURE=bug"
  h.eq(h.count(out, "runs uncompiled"), 1, failure .. ": one log line:\n" .. out)
  assert(out:find("runs uncompiled: tc internal error while compiling: " .. what, 1, true), out)
  assert(out:find("fullgraph: tc.compile(fullgraph=true): function <", 1, true), out)
  assert(out:find("cannot be compiled: tc internal error while compiling: " .. what, 1, true), out)
  assert(out:find("done", 1, true), failure .. ": the program goes on:\n" .. out)
end
os.remove(script)
