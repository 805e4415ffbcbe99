-- Eager CUDA forward time of the seed 64-layer model (10x10), ResNet-50 and DenseNet-121 (batch 16,
-- 3x128x128, float32), no grad, eval mode, TF32 allowed (set_float32_matmul_precision "high",
-- like PyTorch's peer with allow_tf32). Usage: tcrun bench/models_cuda.lua [MODEL...]
-- Prints "<name> <best ms> <median ms> <iterations>" per model (synchronized per call);
-- bench/run_cuda.sh puts these next to bench/peer_torch_models_cuda.py.
local tc = require "tc"
package.path = "bench/?.lua;scripts/models/?.lua;" .. package.path
local common = require "bench_common"
tc.set_float32_matmul_precision("high")
tc.set_default_device("cuda")
tc.manual_seed(0)

-- Single-layer convolution loops (50 convolutions per call) isolate the convolution path:
-- conv3x3 on 16x256x16x16 (256 out, padding 1) and conv1x1 on 16x1024x8x8 (256 out).
local function conv_loop(cin, cout, k, pad)
  return function()
    local w = tc.randn(cout, cin, k, k) * 0.02
    return setmetatable({eval = function() end}, {__call = function(_, x)
      local y
      for _ = 1, 50 do y = tc.conv2d(x, w, nil, 1, pad) end
      return y
    end})
  end
end

local models = {
  {"conv3x3_x50", conv_loop(256, 256, 3, 1), function() return tc.randn(16, 256, 16, 16) end, 20},
  {"conv1x1_x50", conv_loop(1024, 256, 1, 0), function() return tc.randn(16, 1024, 8, 8) end, 20},
  {"seed_64_layers", function() return require("seed_layers").Model() end, function() return tc.randn(10, 10) end, 100},
  {"resnet50", function() return require("resnet").resnet50() end, function() return tc.randn(16, 3, 128, 128) end, 20},
  {"densenet121", function() return require("densenet").densenet121() end, function() return tc.randn(16, 3, 128, 128) end, 20},
}
local wanted = {}
for i = 1, #arg do wanted[arg[i]] = true end

local median = common.median

for _, m in ipairs(models) do
  local name, make, input, iters = m[1], m[2], m[3], m[4]
  if next(wanted) == nil or wanted[name] then
    local model = make()
    model:eval()
    local x = input()
    tc.no_grad(function()
      for _ = 1, 3 do model(x) end  -- warm-up (kernel compilation, allocator)
      tc.cuda.synchronize()
      local times = {}
      for i = 1, iters do
        local t0 = tc.utils.perf_counter()
        model(x)
        tc.cuda.synchronize()
        times[i] = (tc.utils.perf_counter() - t0) * 1e3
      end
      local best = math.min(table.unpack(times))
      print(("%s %.4f %.4f %d"):format(name, best, median(times), iters))
      io.stdout:flush()
    end)
    model = nil
    collectgarbage()
  end
end
