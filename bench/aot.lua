-- Seed 001's measurement (issue 14): ahead-of-time compilation of the 64-layer seed model, whole
-- vs one layer (regional: one package loaded 64 times with each layer's weights), the load time
-- of a package, and the per-call time of the loaded packages next to tc.compile of the same model.
-- Usage: TC_CACHE_DIR= tcrun bench/aot.lua [--device cpu|cuda] [--threads N]
-- (TC_CACHE_DIR= turns the disk cache off, so every compile is cold, as the recipe's
-- fresh_inductor_cache). Prints "key value" lines; times in ms (per call: best of 200).
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
local common = require "bench_common"
local S = require "seed_layers"

local device, jit_only = "cpu", nil
for i = 1, #arg do
  if arg[i] == "--jit-only" then jit_only = arg[i + 1] end
  if arg[i] == "--device" then device = arg[i + 1] end
  if arg[i] == "--threads" then tc.set_num_threads(tonumber(arg[i + 1])) end
end
local clock, say = tc.utils.perf_counter, common.say
local function sync() if device == "cuda" then tc.cuda.synchronize() end end
local function ms(t0) return (clock() - t0) * 1e3 end
local function best_ms(f, iters, ...)
  f(...)
  local best = math.huge
  for _ = 1, iters do
    local t0 = clock()
    f(...)
    sync()
    best = math.min(best, ms(t0))
  end
  return best
end
local dir = (os.getenv("TMPDIR") or "/tmp") .. "/tc-bench-aot-" .. math.random(1, 1 << 30)
os.execute("mkdir -p " .. dir)

tc.manual_seed(0)
local model = S.Model():to(device)
model:eval()
local x = tc.randn(10, 10, {device = device})
if not jit_only then say("device_" .. device, 1) end

tc.no_grad(function()
  local eager = model(x)
  -- tc.compile's cold start (trace + lower + codegen + LLVM/NVRTC + first run), whole and
  -- regional, each in a process of its own (kernels compiled by one would serve the other)
  local cm = tc.compile(model, {backend = "tc"})
  local t0
  local rlayers = {}
  for i = 1, 64 do rlayers[i] = tc.compile(model.layers[i], {backend = "tc"}) end
  local function regional_jit(v)
    v = model.linear(v)
    for i = 1, 64 do v = rlayers[i](v) end
    return v
  end
  if jit_only then
    if jit_only == "regional" then
      t0 = clock()
      regional_jit(x)
      sync()
      say("jit_regional_first_call_ms", ms(t0))
    else
      t0 = clock()
      cm(x)
      sync()
      say("jit_whole_first_call_ms", ms(t0))
    end
    return
  end
  for _, which in ipairs({"whole", "regional"}) do
    local p = io.popen(("%s bench/aot.lua --device %s --jit-only %s"):format(arg[-1] or "build/tcrun", device, which))
    io.write(p:read("a"))
    p:close()
  end

  -- AOT, whole model: export + compile (constants packaged) + load
  local whole_path = dir .. "/model.tcpkg"
  t0 = clock()
  local ep = tc.export(model, {x})
  local export_ms = ms(t0)
  local _, report = tc.aot.compile(ep, {path = whole_path, device = device, package_constants = true})
  local compile_ms = ms(t0) - export_ms
  local t1 = clock()
  local whole = tc.aot.load(whole_path)
  local load_ms = ms(t1)
  say("aot_whole_total_ms", ms(t0))
  say("aot_whole_export_ms", export_ms)
  say("aot_whole_compile_ms", compile_ms)
  say("aot_whole_compile_llvm_ms", report.compile_ms)
  say("aot_whole_load_ms", load_ms)
  say("aot_whole_kernels", report.kernels)
  say("aot_whole_distinct_kernels", report.distinct_kernels)
  say("aot_whole_package_bytes", report.bytes)

  -- AOT, regional: export + compile one layer, then 64 loads with each layer's weights
  local layer_path = dir .. "/layer.tcpkg"
  t0 = clock()
  local lep = tc.export(model.layers[1], {x})
  local lexport_ms = ms(t0)
  local _, lreport = tc.aot.compile(lep, {path = layer_path, device = device, package_constants = false})
  local lcompile_ms = ms(t0) - lexport_ms
  t1 = clock()
  local layers = {}
  for i = 1, 64 do
    layers[i] = tc.aot.load(layer_path)
    layers[i]:load_constants(model.layers[i]:state_dict(), {strict = true})
  end
  local loads_ms = ms(t1)
  say("aot_regional_total_ms", ms(t0))
  say("aot_regional_export_ms", lexport_ms)
  say("aot_regional_compile_ms", lcompile_ms)
  say("aot_regional_64_loads_ms", loads_ms)
  say("aot_regional_package_bytes", lreport.bytes)

  -- load time of a package already linked in this process (parse + bind), and in a new process
  say("aot_layer_load_ms", best_ms(function() tc.aot.load(layer_path) end, 50))
  say("aot_whole_load_again_ms", best_ms(function() tc.aot.load(whole_path) end, 20))
  local exe = (arg[-1] or "build/tcrun"):gsub("tcrun$", "aot_load_example")
  tc.save(dir .. "/x.safetensors", {x = x:cpu()})
  do
    local p = io.popen(("%s %s - %s 2>&1"):format(exe, whole_path, dir .. "/x.safetensors"))
    local out = p:read("a")
    p:close()
    local cold = out:match("in ([%d.]+) ms")
    if cold then say("aot_whole_load_new_process_ms", tonumber(cold)) end
  end

  -- the outputs equal eager's, then per call
  local function regional_aot(v)
    v = model.linear(v)
    for i = 1, 64 do v = layers[i](v) end
    return v
  end
  local dw = (whole(x) - eager):abs():max():item()
  local dr = (regional_aot(x) - eager):abs():max():item()
  say("aot_whole_max_diff", dw)
  say("aot_regional_max_diff", dr)
  say("call_eager_ms", best_ms(model, 200, x))
  say("call_jit_whole_ms", best_ms(cm, 200, x))
  say("call_aot_whole_ms", best_ms(whole, 200, x))
  say("call_jit_regional_ms", best_ms(regional_jit, 200, x))
  say("call_aot_regional_ms", best_ms(regional_aot, 200, x))
end)
os.execute("rm -rf " .. dir)
