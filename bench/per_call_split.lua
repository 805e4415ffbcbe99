-- Where a compiled call's time goes on the GPU, per call (ms, medians): total (call + synchronize),
-- host (the call alone, the device idle before it: until it returns, its work maybe still
-- running), idle-sync (synchronize with nothing queued), back-to-back (calls without a sync: the
-- device's time per call when it is the bottleneck). Usage:
--   tcrun bench/per_call_split.lua MODEL [MODE]    MODEL: seed resnet50 densenet121 gpt2 tiny tiny3
--   (tiny: x + 1 on 10x10; tiny3: three outputs over two storages). MODE: default and
--   reduce-overhead unless given.
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
tc.set_float32_matmul_precision("high")
tc.set_default_device(os.getenv("TC_SPLIT_DEVICE") or "cuda")  -- cpu: a check of the script alone
tc.manual_seed(0)
local clock = tc.utils.perf_counter
local sync = tc.get_default_device() == "cpu" and function() end or tc.cuda.synchronize

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local function split(name, f, x, iters)
  for _ = 1, 5 do f(x) end
  sync()
  local total, host, idle = {}, {}, {}
  for i = 1, iters do
    sync()
    local t0 = clock()
    f(x)
    local t1 = clock()
    sync()
    total[i], host[i] = (clock() - t0) * 1e3, (t1 - t0) * 1e3
  end
  for i = 1, iters do
    local t0 = clock()
    sync()
    idle[i] = (clock() - t0) * 1e3
  end
  sync()
  local t0 = clock()
  for _ = 1, iters do f(x) end
  sync()
  local b2b = (clock() - t0) * 1e3 / iters
  print(("%-28s total %.4f host %.4f idle-sync %.4f back-to-back %.4f"):format(name, median(total), median(host),
                                                                               median(idle), b2b))
end

local which = assert(arg[1], "usage: tcrun bench/per_call_split.lua MODEL [MODE]")
local models = {
  seed = function() return require("seed_layers").Model(), tc.randn(10, 10), 300 end,
  tiny = function() return function(v) return v + 1 end, tc.randn(10, 10), 300 end,
  tiny3 = function() return function(v) return v + 1, v * 2, (v + 1):view(100) end, tc.randn(10, 10), 300 end,
  resnet50 = function() return require("resnet").resnet50(), tc.randn(16, 3, 128, 128), 40 end,
  densenet121 = function() return require("densenet").densenet121(), tc.randn(16, 3, 128, 128), 40 end,
  gpt2 = function() return require("gpt2").gpt2(), tc.randint(1, 50258, {8, 256}), 20 end,
}
local model, x, iters = assert(models[which], "unknown model " .. which)()
if type(model) == "table" then model:eval() end
tc.no_grad(function()
  for _, mode in ipairs(arg[2] and {arg[2]} or {"default", "reduce-overhead"}) do
    split(which .. " " .. mode, tc.compile(model, {mode = mode}), x, iters)
  end
end)
