-- aot_regional.lua: seed 001's recipe, ahead-of-time regional compilation (docs/aot.md).
-- Run: ./build/tcrun scripts/examples/aot_regional.lua [cpu|cuda]
-- One layer of the 64-layer model is exported and compiled into a package once; the package is
-- then loaded 64 times, each copy bound to its own layer's weights, and replaces that layer.
local tc = require "tc"
package.path = "scripts/models/?.lua;" .. package.path
local S = require "seed_layers"

local device = arg[1] or "cpu"
tc.manual_seed(0)
local model = S.Model():to(device)
model:eval()
local x = tc.randn(10, 10, {device = device})
local eager = tc.no_grad(function() return model(x) end)

local t0 = tc.utils.perf_counter()
local ep = tc.export(model.layers[1], {x}, {dynamic = {x = {1}}})  -- one graph, weights lifted
print(ep)
local path = os.tmpname() .. ".tcpkg"
tc.aot.compile(ep, {path = path, device = device, package_constants = false})
for i, layer in ipairs(model.layers) do
  local pkg = tc.aot.load(path)                          -- no tracing, no code generation
  pkg:load_constants(layer:state_dict(), {strict = true})
  model.layers[i] = pkg                                  -- a package is called like the layer
end
print(("export + compile + 64 loads: %.1f ms"):format((tc.utils.perf_counter() - t0) * 1e3))

local y = tc.no_grad(function() return model(x) end)
print("max difference to eager:", (y - eager):abs():max():item())
print(tc.aot.load(path))
os.remove(path)
