-- Under tcrun --compile-all a trace that runs trace_pure_lua_instructions (2000) without a
-- tensor is given up and its function runs in stock Lua, and so does every Lua function it calls.
-- Tensor work that then runs in it (a script's main chunk that prepares data in pure Lua first)
-- is uncompiled: it is not silent. The first tensor op such a call runs prints one notice, and
-- the function is no longer skipped: its next call traces and compiles. Pure-Lua scripts print
-- nothing, and outputs are plain tcrun's.
local h = require "helpers"

local function notices(out)
  local n = 0
  for _ in out:gmatch("tc: tensor work in [^\n]* runs uncompiled: it was skipped after %d+ "
                      .. "instructions without tensor work") do n = n + 1 end
  return n
end
local function without_notices(out)
  return (out:gsub("tc: tensor work in [^\n]*\n?", ""))
end

-- a main chunk that runs > 2000 pure-Lua instructions, then tensor work (ops in the chunk and in
-- a function it calls, several times)
local main = [[
local tc = require "tc"
local data = {}
for i = 1, 1500 do data[i] = (i * 7) % 13 end
local s = 0
for i = 1, #data do s = s + data[i] end
local function scale(t, k) return t * k + 1 end
local x = tc.ones(4) * s
for i = 1, 5 do x = scale(x, 0.5) end
print(s, x[1]:item(), x:sum():item())
]]
local plain, rc = h.run(main)
h.eq(rc, 0, "plain run: " .. plain)
h.eq(notices(plain), 0, "plain tcrun skips nothing")
local out, rc2 = h.run(main, "--compile-all")
h.eq(rc2, 0, "compile-all run: " .. out)
h.eq(notices(out), 1, "one notice for the skipped main chunk's tensor work:\n" .. out)
assert(out:find("2000 instructions", 1, true) and out:find("0 compiles it", 1, true), out)
h.eq(without_notices(out), plain, "compile-all prints what plain tcrun prints")
-- with the bound off the main chunk is traced, and nothing is said
local off = h.run("local tc = require 'tc' tc.config.trace_pure_lua_instructions = 0\n" .. main,
                  "--compile-all")
h.eq(notices(off), 0, "trace_pure_lua_instructions = 0: no skip, no notice:\n" .. off)

-- a pure-Lua script (Are-We-Fast-Yet-like: classes, calls, a long loop) says nothing
local pure = [[
local Point = {}
Point.__index = Point
function Point.new(x, y) return setmetatable({x = x, y = y}, Point) end
function Point:add(o) return Point.new(self.x + o.x, self.y + o.y) end
local function run(n)
  local p = Point.new(0, 0)
  for i = 1, n do p = p:add(Point.new(i % 3, i % 5)) end
  return p
end
local p = run(5000)
print(p.x, p.y, run(10).x)
]]
local pure_plain = h.run(pure)
local pure_all, rc3 = h.run(pure, "--compile-all")
h.eq(rc3, 0, pure_all)
h.eq(pure_all, pure_plain, "a pure-Lua script: same output, no notice")

-- a function skipped by its first call compiles from the next call that does tensor work; an
-- error out of a skipped call ends it (tensor work after it is not attributed to it)
local loop = [[
local tc = require "tc"
tc.config.trace_pure_lua_instructions = 500
local function f(n, fail)
  local s = 0
  for i = 1, n do s = s + i % 7 end
  if fail then error("boom") end
  return tc.ones(2) * s
end
local p = tc.compile(f)
print(pcall(p, 1000, true))
print(tc.ones(1)[1]:item())
for i = 1, 3 do print(p(1000)[1]:item()) end
local s = tc.compiler.stats()
print(s.pure_lua_skips, s.pure_lua_calls, s.backend_compiles, s.cache_hits)
]]
local lout, rc4 = h.run(loop)
h.eq(rc4, 0, lout)
h.eq(notices(lout), 1, "one notice, for the second call:\n" .. lout)
assert(lout:find("boom", 1, true), lout)
-- skipped once (the failing call), run uncompiled once (the call that did the tensor work and
-- printed the notice), then traced and compiled, and the last call hits
h.eq(without_notices(lout):match("[^\n]*\n$"), "1\t1\t1\t1\n", "counts:\n" .. lout)
