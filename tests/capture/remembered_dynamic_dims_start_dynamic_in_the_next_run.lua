-- Dims that turned dynamic in a function's recompiles are remembered in the cache directory: the
-- next run of the same code compiles them dynamic at its first call (one trace instead of a static
-- one and a recompile) and says so under --log=recompiles. --no-cache, tc.config.remember_dynamic =
-- false and tc.compile(f, {dynamic = false}) leave it out; a damaged file is discarded with a line on
-- stderr and rebuilt.
local h = require "helpers"

local dir = os.tmpname()
os.remove(dir)
local script = [[
local tc = require "tc"
local nn = require "tc.nn"
tc.manual_seed(0)
local lin = nn.Linear(4, 2)
local function loss(x, y) return ((lin(x) - y) ^ 2):mean() end
local f = tc.compile(loss, {dynamic = DYN})
for _, b in ipairs({8, 4, 6}) do
  local x, y = tc.randn(b, 4), tc.randn(b, 2)
  assert(tc.allclose(f(x, y), loss(x, y), 1e-5, 1e-6), "batch " .. b)
end
local s = tc.compiler.stats()
print(("traces=%d recompiles=%d"):format(s.traces, s.recompiles))
]]
local base = os.tmpname()  -- one script path for every run: the same code is the same function
local function run(dyn, options, env)
  local path = base .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write((script:gsub("DYN", dyn or "nil")))
  f:close()
  local p = assert(io.popen(("%s %s %s %s 2>&1"):format(env or "TC_REMEMBER_DYNAMIC=1", h.tcrun or "build/tcrun", options, path)))
  local out = p:read("a")
  p:close()
  os.remove(path)
  return out
end
local cache = "--cache-dir " .. dir

local out = run(nil, cache)
assert(out:find("traces=2 recompiles=1", 1, true), "first run: a static compile, then the dynamic one: " .. out)
out = run(nil, cache .. " --log=recompiles")
assert(out:find("traces=1 recompiles=0", 1, true), "second run: dynamic from the first call: " .. out)
assert(out:find("starts with what turned dynamic in an earlier run: arg[1] dim 1, arg[2] dim 1", 1, true), out)

assert(run(nil, "--no-cache"):find("traces=2 recompiles=1", 1, true), "--no-cache remembers nothing")
assert(run(nil, cache .. [[ -e "require('tc').config.remember_dynamic = false"]]):find("traces=2 recompiles=1", 1, true),
       "remember_dynamic = false")
assert(run(nil, cache, "TC_REMEMBER_DYNAMIC=0"):find("traces=2 recompiles=1", 1, true), "TC_REMEMBER_DYNAMIC=0")
assert(run("false", cache):find("traces=3 recompiles=2", 1, true), "dynamic = false specializes every size")

-- a damaged file: discarded with a line, learned again, remembered again
local p = io.popen("ls " .. dir .. "/dynamic")
local files = {}
for n in p:lines() do files[#files + 1] = n end
p:close()
assert(#files >= 1, "a remembered file in " .. dir .. "/dynamic")
for _, n in ipairs(files) do
  local f = assert(io.open(dir .. "/dynamic/" .. n, "w"))
  f:write("garbage\n")
  f:close()
end
out = run(nil, cache)
assert(out:find("discarding", 1, true) and out:find("traces=2 recompiles=1", 1, true), out)
assert(run(nil, cache):find("traces=1 recompiles=0", 1, true), "remembered again after the damaged file")
os.execute("rm -rf '" .. dir .. "'")
os.remove(base)
