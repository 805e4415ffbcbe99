-- ResNet-18 (eval) and a tiny GPT-2 exported on the CPU and compiled for device = "cuda" (NVRTC
-- only: this part runs without a GPU): the packages hold the CUDA backend's code, ResNet's fc and
-- GPT-2's linear layers as cuBLASLt calls with their bias (and gelu) epilogues, stored by name.
-- On a GPU, loaded with the models' state dicts (moved to the GPU) bound by name, their outputs
-- equal eager on the GPU. Skipped where this tc has no NVRTC.
local tc = require "tc"
local h = require "helpers"
local R = require "resnet"
local G = require "gpt2"
tc.manual_seed(4)

local net = R.resnet18(10)
net:eval()
local x = tc.randn(2, 3, 32, 32)
local rpath, rbytes = h.compile_for_cuda(tc.export(net, {x}), "cuda-resnet18")
if not rpath then h.skip("no NVRTC here") end
assert(rbytes:find('"library":"linear + bias (cuBLASLt epilogue)"', 1, true), "resnet's fc is one cuBLASLt call")
local gpt = G.gpt2({vocab_size = 64, n_positions = 16, n_embd = 32, n_layer = 2, n_head = 2})
gpt:eval()
local ids = tc.randint(1, 65, {2, 8})
local gpath, gbytes = h.compile_for_cuda(tc.export(gpt, {ids}), "cuda-gpt2")
assert(gbytes:find("cuBLASLt epilogue", 1, true), "gpt2's linears are cuBLASLt calls")

local function matches_eager_on_gpu(path, model, input, what)
  if not tc.cuda.is_available() then
    h.expect_kind("DeviceError", "this machine has no CUDA GPU", tc.aot.load, path)
  else
    model = model:cuda()
    input = input:cuda()
    local pkg = tc.aot.load(path)
    pkg:load_constants(model:state_dict(), {strict = true})
    h.close_to_eager(pkg(input):cpu(), tc.no_grad(function() return model(input) end):cpu(), what)
  end
  os.remove(path)
end
matches_eager_on_gpu(rpath, net, x, "resnet18 on the GPU")
matches_eager_on_gpu(gpath, gpt, ids, "gpt2 on the GPU")
