-- device = "cuda" packages: compiled anywhere NVRTC loads (no GPU needed: the cubins are sm_90
-- without a GPU, the GPU's own arch with one), from an export made on the CPU, with the code the
-- CUDA backend generates (the whole seed model is one tiny-graph kernel). Without a GPU the
-- load is refused with a DeviceError naming the package; with one (the lead's GPU runs), the
-- whole model, the regional recipe (one layer package loaded 64 times) and a dynamic batch dim
-- equal eager on the GPU. Skipped where this tc has no NVRTC.
local tc = require "tc"
local h = require "helpers"
local S = require "seed_layers"
tc.manual_seed(6)
local model = S.Model()
model:eval()
local x = tc.randn(10, 10)

local path, bytes, report = h.compile_for_cuda(tc.export(model, {x}), "cuda")
if not path then h.skip("no NVRTC here") end
-- the CUDA backend's code: the 64 layers' 10x10 steps as ONE kernel (the tiny graph), one launch
-- per call as under tc.compile
h.eq(report.kernels, 1, "launches per call of the whole model")
assert(bytes:find("cuda.cubin.0", 1, true), "the package has a cubin section")
assert(bytes:find("\127ELF", 1, true), "the cubin is an ELF image")
local lpath = h.compile_for_cuda(tc.export(model.layers[1], {tc.randn(4, 10)}, {dynamic = {x = {1}}}), "cuda-layer")

if not tc.cuda.is_available() then
  local msg = h.expect_kind("DeviceError", "is a CUDA package (sm_", tc.aot.load, path)
  assert(msg:find("this machine has no CUDA GPU", 1, true) and msg:find(path, 1, true), msg)
  os.remove(path)
  os.remove(lpath)
  return
end

-- on a GPU
model = model:cuda()
local xc = x:cuda()
local eager = tc.no_grad(function() return model(xc) end)
local pkg = tc.aot.load(path)
assert(pkg:manifest().target:match("^sm_%d+$"), "manifest names the arch")
pkg:load_constants(model:state_dict(), {strict = true})
h.close_to_eager(pkg(xc):cpu(), eager:cpu(), "whole model on the GPU")
h.expect_error("is on cpu; the package runs on cuda:0", function() return pkg(x) end)
local y = tc.no_grad(function() return model.linear(xc) end)
for i = 1, 64 do
  local layer = tc.aot.load(lpath)
  layer:load_constants(model.layers[i]:state_dict(), {strict = true})
  y = layer(y)
end
h.close_to_eager(y:cpu(), eager:cpu(), "regional on the GPU")
local layer = tc.aot.load(lpath)
layer:load_constants(model.layers[2]:state_dict())
for _, n in ipairs({1, 7, 300}) do
  local xb = tc.randn(n, 10):cuda()
  h.close_to_eager(layer(xb):cpu(), tc.no_grad(function() return model.layers[2](xb) end):cpu(), "batch " .. n)
end
os.remove(path)
os.remove(lpath)
