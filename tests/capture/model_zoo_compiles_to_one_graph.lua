-- Models of the zoo (GPT-2 with 2 layers, ResNet-18) compile whole into one graph, equal to eager.
local tc = require "tc"
local h = require "helpers"

local function check(name, model, x)
  model:eval()
  local ref = model(x)
  local report = tc.compiler.explain(model)(x)
  h.eq(report.graph_count, 1, name .. " graphs")
  h.eq(report.graph_break_count, 0, name .. " breaks")
  h.close(tc.compile(model)(x), ref, name)
end
tc.manual_seed(0)
check("gpt2", require("gpt2").gpt2({n_layer = 2}), tc.randint(1, 100, {2, 16}))
check("resnet18", require("resnet").resnet18(), tc.randn(1, 3, 32, 32))
