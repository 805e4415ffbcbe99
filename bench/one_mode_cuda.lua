-- One compiled mode of ResNet-50 or DenseNet-121 (batch 16, 3x128x128, eval, no_grad) on the GPU:
-- its first call, max |difference| from eager and the median ms per call (synchronized), for A/B runs
-- of two tcrun binaries in one device call. Usage: tcrun bench/one_mode_cuda.lua MODEL [MODE] [ITERS] [DEVICE]
local tc = require "tc"
package.path = "scripts/models/?.lua;bench/?.lua;" .. package.path
local name, mode, iters = arg[1], arg[2] or "default", tonumber(arg[3] or "30")
tc.set_float32_matmul_precision("high")
tc.set_default_device(arg[4] or "cuda")
tc.manual_seed(0)
local model = require(name == "resnet50" and "resnet" or "densenet")[name]()
model:eval()
local x = tc.randn(16, 3, 128, 128)
local cm = tc.compile(model, {mode = mode})
tc.no_grad(function()
  local ref = model(x)
  if tc.cuda.is_available() then tc.cuda.synchronize() end
  local t0 = tc.utils.perf_counter()
  local y = cm(x)
  if tc.cuda.is_available() then tc.cuda.synchronize() end
  print(("%s %s first call %.1f ms"):format(name, mode, (tc.utils.perf_counter() - t0) * 1e3))
  if tc.cuda.is_available() then tc.cuda.synchronize() end
  print(("%s %s max abs diff vs eager %.3g (max |ref| %.3g)"):format(name, mode, (y - ref):abs():max():item(), ref:abs():max():item()))
  for _ = 1, 3 do cm(x) end
  if tc.cuda.is_available() then tc.cuda.synchronize() end
  local t = {}
  for i = 1, iters do
    local t0 = tc.utils.perf_counter()
    cm(x)
    if tc.cuda.is_available() then tc.cuda.synchronize() end
    t[i] = (tc.utils.perf_counter() - t0) * 1e3
  end
  table.sort(t)
  print(("%s %s median %.4f ms (min %.4f)"):format(name, mode, t[(iters + 1) // 2], t[1]))
end)
