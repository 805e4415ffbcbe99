-- tc.compile over CUDA tensors (skipped without a GPU): the seed model, ResNet-18 and GPT-2 compile
-- to one graph each and equal eager on the GPU; a CPU input afterwards is a guard miss (device)
-- that recompiles instead of running the CUDA entry.
local tc = require "tc"
local h = require "helpers"
if not tc.cuda.is_available() then h.skip("no CUDA device") end

local function check(name, model, x, tol)
  model:eval()
  model = model:cuda()
  x = x:cuda()
  local cm = tc.compile(model)
  local ref = model(x)
  for _ = 1, 3 do h.close(cm(x):cpu(), ref:cpu(), name, tol) end
  local report = tc.compiler.explain(model)(x)
  h.eq(report.graph_count, 1, name .. " graphs")
  h.eq(report.graph_break_count, 0, name .. " breaks")
end
tc.manual_seed(0)
check("seed", require("seed_layers").Model(), tc.randn(10, 10))
check("resnet18", require("resnet").resnet18(), tc.randn(2, 3, 64, 64), 1e-4)
check("gpt2", require("gpt2").gpt2({n_layer = 2}), tc.randint(1, 100, {2, 16}), 1e-4)

tc.compiler.reset()
local f = function(a) return a:relu() * 2 end
local cf = tc.compile(f)
local xc = tc.randn(8):cuda()
h.close(cf(xc):cpu(), f(xc):cpu(), "cuda input")
local xh = xc:cpu()
h.close(cf(xh), f(xh), "cpu input after a cuda one")
h.eq(h.stats().recompiles, 1, "the device change recompiles")
