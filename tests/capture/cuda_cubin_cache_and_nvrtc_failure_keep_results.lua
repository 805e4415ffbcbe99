-- On a GPU (skipped without one): the generated programs' cubins on disk (TC_CACHE_DIR/cuda),
-- across fresh tcrun processes. A warm start compiles no program; bit-flipped and then truncated
-- entries are discarded with a log line and rebuilt; a program NVRTC rejects (TC_CUDA_FAIL_NVRTC)
-- runs its graph on the eager backend after one warning, or raises CompileError under fullgraph.
-- Every run's result equals eager's.
local tc = require "tc"
local h = require "helpers"
if not tc.cuda.is_available() then h.skip("no CUDA device") end

local dir = os.tmpname()
os.remove(dir)
local script = os.tmpname() .. ".lua"
local sf = assert(io.open(script, "w"))
sf:write([[
local tc = require "tc"
tc.manual_seed(0)
local x = tc.randn(64, 33, {device = "cuda"})
local function f(v) return (tc.exp(v * 0.5) * 2 + 1):sum(2):sqrt() + v:sum(2) end
local got = tc.compile(f, {backend = "cuda"})(x)
local s = tc.compiler.stats()
local err = (got - f(x)):abs():max():item()
print(("distinct=%d launches=%d cached=%d fallback=%d err=%g"):format(s.distinct_kernels, s.kernels, s.cached_kernels,
                                                                    s.fallback_nodes, err))
local ok, e = pcall(tc.compile(function(v) return tc.sin(v) - 1 end, {backend = "cuda", fullgraph = true}), x)
print("fullgraph " .. (ok and "ran" or (type(e) == "table" and e.kind or tostring(e))))
]])
sf:close()

local function run(env)
  local p = assert(io.popen(("%s %s %s 2>&1"):format(env, h.tcrun or "build/tcrun", script)))
  local out = p:read("a")
  assert(p:close(), out)
  local kernels, launches, cached, fallback, err =
    out:match("distinct=(%d+) launches=(%d+) cached=(%d+) fallback=(%d+) err=(%S+)")
  assert(kernels, out)
  assert(tonumber(err) < 1e-4, "result differs from eager by " .. err .. ":\n" .. out)
  return {kernels = tonumber(kernels), launches = tonumber(launches), cached = tonumber(cached), fallback = tonumber(fallback),
          fullgraph = out:match("fullgraph (%S+)"), out = out}
end
local cached_run = function() return run("TC_CACHE_DIR=" .. dir) end

local cold = cached_run()
assert(cold.kernels > 0 and cold.cached == 0 and cold.fallback == 0, cold.out)
local warm = cached_run()
h.eq(warm.cached, warm.kernels, "warm start: kernels read from disk")

local function entries()
  local p = assert(io.popen('ls "' .. dir .. '/cuda"'))
  local files = {}
  for name in p:lines() do if name:match("%.o$") then files[#files + 1] = dir .. "/cuda/" .. name end end
  p:close()
  assert(#files > 0, "no cubin entry under " .. dir .. "/cuda")
  return files
end
local function rewrite(path, change)
  local f = assert(io.open(path, "rb"))
  local bytes = f:read("a")
  f:close()
  f = assert(io.open(path, "wb"))
  f:write(change(bytes))
  f:close()
end

for _, path in ipairs(entries()) do
  rewrite(path, function(b)
    local at = #b // 2
    return b:sub(1, at - 1) .. string.char(b:byte(at) ~ 0x5a) .. b:sub(at + 1)
  end)
end
local flipped = cached_run()
h.eq(flipped.cached, 0, "bit-flipped entries trusted")
assert(flipped.out:find("cuda kernel cache: discarding"), flipped.out)

for _, path in ipairs(entries()) do rewrite(path, function(b) return b:sub(1, #b // 3) end) end
local truncated = cached_run()
h.eq(truncated.cached, 0, "truncated entries trusted")
assert(truncated.out:find("cuda kernel cache: discarding"), truncated.out)

local rebuilt = cached_run()
h.eq(rebuilt.cached, rebuilt.kernels, "rebuilt entries read back")
assert(not rebuilt.out:find("discarding"), rebuilt.out)

local failed = run("TC_CACHE_DIR= TC_CUDA_FAIL_NVRTC=1")
assert(failed.fallback > 0 and failed.launches == 0, failed.out)
assert(failed.out:find("running a graph on the eager backend"), failed.out)
h.eq(failed.fullgraph, "CompileError", "fullgraph under an NVRTC failure")
h.eq(cold.fullgraph, "ran", "fullgraph without a failure")

os.execute('rm -rf "' .. dir .. '"')
os.remove(script)
