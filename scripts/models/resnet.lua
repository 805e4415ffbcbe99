-- ResNet-18 and ResNet-50 (torchvision's architecture and parameter names, so
-- tc.utils.from_torch_state_dict(torchvision_sd) loads into them).
local tc = require "tc"
local nn = require "tc.nn"
-- this folder on package.path, so `tcrun scripts/models/resnet.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}

local function conv3x3(cin, cout, stride)
  return nn.Conv2d(cin, cout, 3, {stride = stride or 1, padding = 1, bias = false})
end
local function conv1x1(cin, cout, stride)
  return nn.Conv2d(cin, cout, 1, {stride = stride or 1, bias = false})
end

local BasicBlock = nn.Module:extend("BasicBlock")
BasicBlock.expansion = 1
function BasicBlock:__init(cin, planes, stride, downsample)
  self.conv1 = conv3x3(cin, planes, stride)
  self.bn1 = nn.BatchNorm2d(planes)
  self.relu = nn.ReLU()
  self.conv2 = conv3x3(planes, planes)
  self.bn2 = nn.BatchNorm2d(planes)
  if downsample then self.downsample = downsample end
end
function BasicBlock:forward(x)
  local out = self.relu(self.bn1(self.conv1(x)))
  out = self.bn2(self.conv2(out))
  local identity = self.downsample and self.downsample(x) or x
  return self.relu(out + identity)
end

local Bottleneck = nn.Module:extend("Bottleneck")
Bottleneck.expansion = 4
function Bottleneck:__init(cin, planes, stride, downsample)
  self.conv1 = conv1x1(cin, planes)
  self.bn1 = nn.BatchNorm2d(planes)
  self.conv2 = conv3x3(planes, planes, stride)
  self.bn2 = nn.BatchNorm2d(planes)
  self.conv3 = conv1x1(planes, planes * 4)
  self.bn3 = nn.BatchNorm2d(planes * 4)
  self.relu = nn.ReLU()
  if downsample then self.downsample = downsample end
end
function Bottleneck:forward(x)
  local out = self.relu(self.bn1(self.conv1(x)))
  out = self.relu(self.bn2(self.conv2(out)))
  out = self.bn3(self.conv3(out))
  local identity = self.downsample and self.downsample(x) or x
  return self.relu(out + identity)
end

local ResNet = nn.Module:extend("ResNet")
-- width: the first stage's planes (torchvision's 64); the stages have width, 2, 4 and 8 times it
function ResNet:__init(block, layers, num_classes, width)
  local w = width or 64
  self.inplanes = w
  self.conv1 = nn.Conv2d(3, w, 7, {stride = 2, padding = 3, bias = false})
  self.bn1 = nn.BatchNorm2d(w)
  self.relu = nn.ReLU()
  self.maxpool = nn.MaxPool2d(3, {stride = 2, padding = 1})
  self.layer1 = self:_make_layer(block, w, layers[1], 1)
  self.layer2 = self:_make_layer(block, 2 * w, layers[2], 2)
  self.layer3 = self:_make_layer(block, 4 * w, layers[3], 2)
  self.layer4 = self:_make_layer(block, 8 * w, layers[4], 2)
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.fc = nn.Linear(8 * w * block.expansion, num_classes or 1000)
end
function ResNet:_make_layer(block, planes, blocks, stride)
  local downsample
  if stride ~= 1 or self.inplanes ~= planes * block.expansion then
    downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
      nn.BatchNorm2d(planes * block.expansion))
  end
  local seq = nn.Sequential(block(self.inplanes, planes, stride, downsample))
  self.inplanes = planes * block.expansion
  for _ = 2, blocks do seq:add(block(self.inplanes, planes)) end
  return seq
end
function ResNet:forward(x)
  x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
  x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
  return self.fc(self.avgpool(x):flatten(2))
end

M.ResNet, M.BasicBlock, M.Bottleneck = ResNet, BasicBlock, Bottleneck
-- opts.width: the first stage's planes (default 64, torchvision's); smaller for quick CPU runs
function M.resnet18(num_classes, opts) return ResNet(BasicBlock, {2, 2, 2, 2}, num_classes, opts and opts.width) end
function M.resnet50(num_classes, opts) return ResNet(Bottleneck, {3, 4, 6, 3}, num_classes, opts and opts.width) end

function M.main()
  local n = tonumber(arg[1]) or 2
  local x = tc.randn(n, 3, 128, 128)
  common.time_forward("resnet18", M.resnet18(), x)
  common.time_forward("resnet50", M.resnet50(), x)
end

if common.is_main("resnet.lua") then M.main() end
return M
