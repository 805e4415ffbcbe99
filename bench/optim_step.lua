-- Optimizer step time, parameter by parameter (foreach=false) vs on flat buckets (foreach=true) vs
-- the fused multi-tensor ops (fused=true),
-- over a conv net's parameter shapes (50 x {(c, c, 3, 3), (c), (c)}, c = 32 * (1 + i % 8): 150
-- tensors, 11.5M values) with random gradients; bench/peer_torch_optim.py is PyTorch's side.
-- Run: tcrun bench/optim_step.lua [DEVICE [STEPS]]  (DEVICE "cpu" by default, or "cuda").
-- With TC_CUDA_PROFILE=1 the CUDA runtime prints each op's calls and kernel launches at exit.
-- Prints "optimizer per_param|foreach|fused ms_per_step" lines.
local tc = require "tc"
local optim = require "tc.optim"
local device = arg and arg[1] or "cpu"
local steps = tonumber(arg and arg[2]) or 10
local function sync() if device ~= "cpu" then tc.cuda.synchronize() end end

tc.manual_seed(0)
local params, n = {}, 0
for i = 1, 50 do
  local c = 32 * (1 + i % 8)
  for _, shape in ipairs {{c, c, 3, 3}, {c}, {c}} do
    local p = tc.randn(shape, {device = device})
    p.requires_grad = true
    p.grad = tc.randn_like(p) * 1e-3
    params[#params + 1], n = p, n + p:numel()
  end
end
print(("# %d parameter tensors, %d values, on %s"):format(#params, n, device))

local cases = {
  {"SGD", {lr = 0.1, momentum = 0.9, weight_decay = 1e-4}}, {"Adam", {lr = 1e-3}},
  {"AdamW", {lr = 1e-3, weight_decay = 1e-2}}, {"RMSprop", {lr = 1e-3, momentum = 0.9}}, {"Adagrad", {lr = 1e-2}},
}
for _, c in ipairs(cases) do
  for _, mode in ipairs {"per_param", "foreach", "fused"} do
    local opts = mode == "fused" and {fused = true} or {foreach = mode == "foreach", fused = false}
    for k, v in pairs(c[2]) do opts[k] = v end
    local opt = optim[c[1]](params, opts)
    opt:step()  -- state allocated
    sync()
    local t0 = tc.utils.perf_counter()
    for _ = 1, steps do opt:step() end
    sync()
    print(("%s %s %.3f"):format(c[1], mode, (tc.utils.perf_counter() - t0) * 1000 / steps))
  end
end
