-- Seed 001's recipe: the 64-layer model exported and compiled whole, and ONE layer compiled ahead
-- of time and loaded 64 times, each with its own layer's weights; both equal eager.
local tc = require "tc"
local h = require "helpers"
local S = require "seed_layers"
tc.manual_seed(1)
local model = S.Model()
local x = tc.randn(10, 10)
local eager = tc.no_grad(function() return model(x) end)

-- whole: every parameter lifted into the state dict under its module path
local pkg, path, ep = h.round_trip(model, {x}, nil, {package_constants = false})
h.eq(#ep.constant_names, 2 + 64 * 4, "constants of the whole model")
assert(ep.state_dict["layers.64.linear2.bias"] == model.layers[64].linear2.bias, "state dict names follow module paths")
assert(tostring(ep):find("layers.17.linear1.weight: float32[10, 10]", 1, true), "print(ep) lists the state dict")
assert(ep:code():find("linear(x, linear_weight, linear_bias)", 1, true) and ep:code():find("%layers_64_linear2_bias", 1, true),
       "code names inputs and constants")
pkg:load_constants(model:state_dict(), {strict = true})
h.close_to_eager(pkg(x), eager, "whole model")
local m = pkg:manifest()
h.eq(m.format_version, 2, "format version")
h.eq(m.device, "cpu", "device")
h.eq(#m.constants, 258, "manifest constants")
h.eq(m.inputs[1].name, "x", "input named after forward's parameter")
h.eq(m.outputs[1].str, "float32[10, 10]", "output spec")
os.remove(path)

-- regional: one layer compiled, loaded 64 times with each layer's weights
local lep = tc.export(model.layers[1], {x})
h.eq(table.concat(lep.constant_names, " "), "linear1.weight linear1.bias linear2.weight linear2.bias", "layer constants")
local lpath = h.tmp("layer")
tc.aot.compile(lep, {path = lpath})
local y = tc.no_grad(function() return model.linear(x) end)
for i = 1, 64 do
  local layer = tc.aot.load(lpath)
  layer:load_constants(model.layers[i]:state_dict(), {strict = true})
  y = layer(y)
end
h.close_to_eager(y, eager, "regional 64 layers")
os.remove(lpath)

-- constants packaged: the package runs as loaded
local ppkg, ppath = h.round_trip(model.layers[3], {x}, nil, {package_constants = true})
h.close_to_eager(ppkg(x), tc.no_grad(function() return model.layers[3](x) end), "packaged constants")
assert(ppkg:manifest().constants_packaged, "manifest says constants are packaged")
os.remove(ppath)
