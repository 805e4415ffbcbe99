-- DenseNet-121 (torchvision's architecture and parameter names: features.denseblock1.denselayer1...).
local tc = require "tc"
local nn = require "tc.nn"
-- this folder on package.path, so `tcrun scripts/models/densenet.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}

local DenseLayer = nn.Module:extend("DenseLayer")
function DenseLayer:__init(cin, growth, bn_size)
  self.norm1 = nn.BatchNorm2d(cin)
  self.relu1 = nn.ReLU()
  self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, {bias = false})
  self.norm2 = nn.BatchNorm2d(bn_size * growth)
  self.relu2 = nn.ReLU()
  self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, {padding = 1, bias = false})
end
function DenseLayer:forward(features)
  local x = tc.cat(features, 2)
  x = self.conv1(self.relu1(self.norm1(x)))
  return self.conv2(self.relu2(self.norm2(x)))
end

local DenseBlock = nn.Module:extend("DenseBlock")
function DenseBlock:__init(num_layers, cin, bn_size, growth)
  self.n = num_layers
  for i = 1, num_layers do
    self:add_module("denselayer" .. i, DenseLayer(cin + (i - 1) * growth, growth, bn_size))
  end
end
function DenseBlock:forward(x)
  local features = {x}
  for i = 1, self.n do features[#features + 1] = self["denselayer" .. i](features) end
  return tc.cat(features, 2)
end

local function transition(cin, cout)
  local t = nn.Sequential()
  t:add_module("norm", nn.BatchNorm2d(cin))
  t:add_module("relu", nn.ReLU())
  t:add_module("conv", nn.Conv2d(cin, cout, 1, {bias = false}))
  t:add_module("pool", nn.AvgPool2d(2, {stride = 2}))
  return t
end

local DenseNet = nn.Module:extend("DenseNet")
function DenseNet:__init(growth, block_config, num_init, bn_size, num_classes)
  local f = nn.Sequential()
  f:add_module("conv0", nn.Conv2d(3, num_init, 7, {stride = 2, padding = 3, bias = false}))
  f:add_module("norm0", nn.BatchNorm2d(num_init))
  f:add_module("relu0", nn.ReLU())
  f:add_module("pool0", nn.MaxPool2d(3, {stride = 2, padding = 1}))
  local c = num_init
  for i, n in ipairs(block_config) do
    f:add_module("denseblock" .. i, DenseBlock(n, c, bn_size, growth))
    c = c + n * growth
    if i ~= #block_config then
      f:add_module("transition" .. i, transition(c, c // 2))
      c = c // 2
    end
  end
  f:add_module("norm5", nn.BatchNorm2d(c))
  self.features = f
  self.classifier = nn.Linear(c, num_classes or 1000)
end
function DenseNet:forward(x)
  local out = tc.relu(self.features(x))
  out = tc.adaptive_avg_pool2d(out, {1, 1}):flatten(2)
  return self.classifier(out)
end

M.DenseNet = DenseNet
function M.densenet121(num_classes) return DenseNet(32, {6, 12, 24, 16}, 64, 4, num_classes) end

function M.main()
  local n = tonumber(arg[1]) or 2
  common.time_forward("densenet121", M.densenet121(), tc.randn(n, 3, 128, 128))
end

if common.is_main("densenet.lua") then M.main() end
return M
