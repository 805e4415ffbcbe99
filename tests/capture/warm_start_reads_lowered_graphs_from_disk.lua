-- A warm start reads each graph's lowered form from the disk cache (backends/cpu/plan_cache.h):
-- a fresh process with a warm cache lowers nothing and compiles no kernel, and gives the cold
-- run's results; a damaged plan entry is discarded with a log line and rebuilt.
local h = require "helpers"

local dir = os.tmpname()
os.remove(dir)
local code = [[
local tc = require "tc"
local w = tc.arange(64):reshape(8, 8):float() / 64
local f = tc.compile(function(x) return (x:matmul(w)):relu():softmax(-1) * 2 + x:sin() end, {backend = "cpu"})
local y = f(tc.arange(32):reshape(4, 8):float() / 10)
local s = tc.compiler.stats()
print(("plans=%d kernels=%d cached=%d"):format(s.cached_plans, s.distinct_kernels, s.cached_kernels))
local v = {}
for i = 1, 4 do for j = 1, 8 do v[#v + 1] = ("%.6f"):format(y[i][j]:item()) end end
print(table.concat(v, " "))
]]
local script = os.tmpname() .. ".lua"
local sf = assert(io.open(script, "w"))
sf:write(code)
sf:close()
-- A fresh tcrun with the cache under `dir` (TC_CACHE_DIR: the backends read it, not tc.config),
-- whose explain report (JSON) says whether the lowered graph came from the cache.
local function run()
  local p = assert(io.popen(("TC_CACHE_DIR=%s %s --explain=json %s 2>&1"):format(dir, h.tcrun or "build/tcrun", script)))
  local out = p:read("a")
  assert(p:close(), out)
  local plans, kernels, cached = out:match("plans=(%d+) kernels=(%d+) cached=(%d+)")
  assert(plans, out)
  assert(out:match('"cached_plans": *(%d+)') == plans, "explain's cached_plans differs from stats':\n" .. out)
  return tonumber(plans), tonumber(kernels), tonumber(cached), out:match("\n([%d%.%- ]+)\n"), out
end

local plans, kernels, cached, cold = run()
assert(plans == 0 and kernels > 0 and cached == 0, ("cold: plans=%d cached=%d"):format(plans, cached))
local wplans, wkernels, wcached, warm = run()
assert(wplans == 1, "warm start lowered the graph again")
assert(wkernels == kernels and wcached == kernels, ("warm: %d of %d kernels from disk"):format(wcached, wkernels))
assert(warm == cold, "warm start results differ:\n" .. cold .. "\n" .. warm)

-- Damage the plan entry (one file under <dir>/cpu-plan): it is discarded, lowered again, rewritten.
local p = assert(io.popen('ls "' .. dir .. '/cpu-plan"'))
local entry = dir .. "/cpu-plan/" .. assert(p:read("l"))
p:close()
local f = assert(io.open(entry, "rb"))
local bytes = f:read("a")
f:close()
local at = #bytes - 10
f = assert(io.open(entry, "wb"))
f:write(bytes:sub(1, at - 1) .. string.char((bytes:byte(at) ~ 0x10)) .. bytes:sub(at + 1))
f:close()
local dplans, _, dcached, damaged, out = run()
assert(dplans == 0, "a damaged plan was trusted")
assert(out:find("cpu%-plan kernel cache: discarding"), out)
assert(dcached == kernels, "the kernels' objects are still good")
assert(damaged == cold, "results after rebuilding the plan differ")
local rplans = run()
assert(rplans == 1, "the rebuilt plan was not written back")
os.remove(script)
os.execute('rm -rf "' .. dir .. '"')
