-- The seeds' repeated-layer model: Layer = linear, relu, sigmoid, linear, relu; Model = a linear
-- then 64 Layers (regional compilation compiles each Layer instead of the whole model).
local tc = require "tc"
local nn = require "tc.nn"
-- this folder on package.path, so `tcrun scripts/models/seed_layers.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}

local Layer = nn.Module:extend("Layer")
M.Layer = Layer
function Layer:__init()
  self.linear1 = nn.Linear(10, 10)
  self.relu1 = nn.ReLU()
  self.linear2 = nn.Linear(10, 10)
  self.relu2 = nn.ReLU()
end
function Layer:forward(x)
  local a = self.linear1(x)
  a = self.relu1(a)
  a = tc.sigmoid(a)
  local b = self.linear2(a)
  b = self.relu2(b)
  return b
end

local Model = nn.Module:extend("Model")
M.Model = Model
-- opts: {num_layers = 64, regional = false}
function Model:__init(opts)
  opts = opts or {}
  self.linear = nn.Linear(10, 10)
  local layers = {}
  for i = 1, opts.num_layers or 64 do
    layers[i] = Layer()
    if opts.regional then layers[i]:compile() end
  end
  self.layers = nn.ModuleList(layers)
end
function Model:forward(x)
  x = self.linear(x)
  for _, layer in ipairs(self.layers) do x = layer(x) end
  return x
end

function M.main()
  local device = tc.get_default_device and tc.get_default_device() or "cpu"
  local model = Model():to(device)
  common.time_forward("seed 64-layer model", model, tc.randn(10, 10, {device = device}), 10)
end

if common.is_main("seed_layers.lua") then M.main() end
return M
