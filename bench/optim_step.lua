-- Optimizer step time, parameter by parameter (foreach=false) vs on flat buckets (foreach=true),
-- over ResNet-50's parameters (161 tensors, 25.6M values) with random gradients.
-- Run: tcrun bench/optim_step.lua [DEVICE [STEPS]]  (DEVICE "cpu" by default, or "cuda").
-- With TC_CUDA_PROFILE=1 the CUDA runtime prints each op's calls and kernel launches at exit.
-- Prints "optimizer foreach ms_per_step" lines.
local tc = require "tc"
local optim = require "tc.optim"
package.path = "scripts/models/?.lua;" .. package.path
local resnet = require "resnet"
local device = arg and arg[1] or "cpu"
local steps = tonumber(arg and arg[2]) or 10
local function sync() if device ~= "cpu" then tc.cuda.synchronize() end end

tc.manual_seed(0)
local params = resnet.resnet50():to(device):parameters()
local n = 0
for _, p in ipairs(params) do p.grad = tc.randn_like(p) * 1e-3; n = n + p:numel() end
print(("# %d parameter tensors, %d values, on %s"):format(#params, n, device))

local cases = {
  {"SGD", {lr = 0.1, momentum = 0.9, weight_decay = 1e-4}}, {"Adam", {lr = 1e-3}},
  {"AdamW", {lr = 1e-3, weight_decay = 1e-2}}, {"RMSprop", {lr = 1e-3, momentum = 0.9}}, {"Adagrad", {lr = 1e-2}},
}
for _, c in ipairs(cases) do
  for _, foreach in ipairs {false, true} do
    local opts = {foreach = foreach}
    for k, v in pairs(c[2]) do opts[k] = v end
    local opt = c[1] and optim[c[1]](params, opts)
    opt:step()  -- state allocated
    sync()
    local t0 = tc.utils.perf_counter()
    for _ = 1, steps do opt:step() end
    sync()
    print(("%s %s %.3f"):format(c[1], foreach and "foreach" or "per_param", (tc.utils.perf_counter() - t0) * 1000 / steps))
  end
end
