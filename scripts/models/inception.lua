-- Inception-v3 (torchvision's architecture and parameter names; no auxiliary classifier,
-- no input transform). Inputs of at least 75x75.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
-- this folder on package.path, so `tcrun scripts/models/inception.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}

local BasicConv2d = nn.Module:extend("BasicConv2d")
function BasicConv2d:__init(cin, cout, k, o)
  o = o or {}
  self.conv = nn.Conv2d(cin, cout, k, {stride = o.stride, padding = o.padding, bias = false})
  self.bn = nn.BatchNorm2d(cout, {eps = 0.001})
end
function BasicConv2d:forward(x) return tc.relu(self.bn(self.conv(x))) end

local function avg3(x) return F.avg_pool2d(x, 3, 1, 1) end
local function max3s2(x) return F.max_pool2d(x, 3, 2) end

local InceptionA = nn.Module:extend("InceptionA")
function InceptionA:__init(cin, pool_features)
  self.branch1x1 = BasicConv2d(cin, 64, 1)
  self.branch5x5_1 = BasicConv2d(cin, 48, 1)
  self.branch5x5_2 = BasicConv2d(48, 64, 5, {padding = 2})
  self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
  self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, {padding = 1})
  self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, {padding = 1})
  self.branch_pool = BasicConv2d(cin, pool_features, 1)
end
function InceptionA:forward(x)
  local b1 = self.branch1x1(x)
  local b5 = self.branch5x5_2(self.branch5x5_1(x))
  local b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
  local bp = self.branch_pool(avg3(x))
  return tc.cat({b1, b5, b3, bp}, 2)
end

local InceptionB = nn.Module:extend("InceptionB")
function InceptionB:__init(cin)
  self.branch3x3 = BasicConv2d(cin, 384, 3, {stride = 2})
  self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
  self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, {padding = 1})
  self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, {stride = 2})
end
function InceptionB:forward(x)
  local b3 = self.branch3x3(x)
  local bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
  return tc.cat({b3, bd, max3s2(x)}, 2)
end

local InceptionC = nn.Module:extend("InceptionC")
function InceptionC:__init(cin, c7)
  self.branch1x1 = BasicConv2d(cin, 192, 1)
  self.branch7x7_1 = BasicConv2d(cin, c7, 1)
  self.branch7x7_2 = BasicConv2d(c7, c7, {1, 7}, {padding = {0, 3}})
  self.branch7x7_3 = BasicConv2d(c7, 192, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_1 = BasicConv2d(cin, c7, 1)
  self.branch7x7dbl_2 = BasicConv2d(c7, c7, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_3 = BasicConv2d(c7, c7, {1, 7}, {padding = {0, 3}})
  self.branch7x7dbl_4 = BasicConv2d(c7, c7, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_5 = BasicConv2d(c7, 192, {1, 7}, {padding = {0, 3}})
  self.branch_pool = BasicConv2d(cin, 192, 1)
end
function InceptionC:forward(x)
  local b1 = self.branch1x1(x)
  local b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
  local bd = self.branch7x7dbl_1(x)
  bd = self.branch7x7dbl_5(self.branch7x7dbl_4(self.branch7x7dbl_3(self.branch7x7dbl_2(bd))))
  return tc.cat({b1, b7, bd, self.branch_pool(avg3(x))}, 2)
end

local InceptionD = nn.Module:extend("InceptionD")
function InceptionD:__init(cin)
  self.branch3x3_1 = BasicConv2d(cin, 192, 1)
  self.branch3x3_2 = BasicConv2d(192, 320, 3, {stride = 2})
  self.branch7x7x3_1 = BasicConv2d(cin, 192, 1)
  self.branch7x7x3_2 = BasicConv2d(192, 192, {1, 7}, {padding = {0, 3}})
  self.branch7x7x3_3 = BasicConv2d(192, 192, {7, 1}, {padding = {3, 0}})
  self.branch7x7x3_4 = BasicConv2d(192, 192, 3, {stride = 2})
end
function InceptionD:forward(x)
  local b3 = self.branch3x3_2(self.branch3x3_1(x))
  local b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
  return tc.cat({b3, b7, max3s2(x)}, 2)
end

local InceptionE = nn.Module:extend("InceptionE")
function InceptionE:__init(cin)
  self.branch1x1 = BasicConv2d(cin, 320, 1)
  self.branch3x3_1 = BasicConv2d(cin, 384, 1)
  self.branch3x3_2a = BasicConv2d(384, 384, {1, 3}, {padding = {0, 1}})
  self.branch3x3_2b = BasicConv2d(384, 384, {3, 1}, {padding = {1, 0}})
  self.branch3x3dbl_1 = BasicConv2d(cin, 448, 1)
  self.branch3x3dbl_2 = BasicConv2d(448, 384, 3, {padding = 1})
  self.branch3x3dbl_3a = BasicConv2d(384, 384, {1, 3}, {padding = {0, 1}})
  self.branch3x3dbl_3b = BasicConv2d(384, 384, {3, 1}, {padding = {1, 0}})
  self.branch_pool = BasicConv2d(cin, 192, 1)
end
function InceptionE:forward(x)
  local b1 = self.branch1x1(x)
  local b3 = self.branch3x3_1(x)
  b3 = tc.cat({self.branch3x3_2a(b3), self.branch3x3_2b(b3)}, 2)
  local bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
  bd = tc.cat({self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)}, 2)
  return tc.cat({b1, b3, bd, self.branch_pool(avg3(x))}, 2)
end

local Inception3 = nn.Module:extend("Inception3")
function Inception3:__init(num_classes)
  self.Conv2d_1a_3x3 = BasicConv2d(3, 32, 3, {stride = 2})
  self.Conv2d_2a_3x3 = BasicConv2d(32, 32, 3)
  self.Conv2d_2b_3x3 = BasicConv2d(32, 64, 3, {padding = 1})
  self.maxpool1 = nn.MaxPool2d(3, {stride = 2})
  self.Conv2d_3b_1x1 = BasicConv2d(64, 80, 1)
  self.Conv2d_4a_3x3 = BasicConv2d(80, 192, 3)
  self.maxpool2 = nn.MaxPool2d(3, {stride = 2})
  self.Mixed_5b = InceptionA(192, 32)
  self.Mixed_5c = InceptionA(256, 64)
  self.Mixed_5d = InceptionA(288, 64)
  self.Mixed_6a = InceptionB(288)
  self.Mixed_6b = InceptionC(768, 128)
  self.Mixed_6c = InceptionC(768, 160)
  self.Mixed_6d = InceptionC(768, 160)
  self.Mixed_6e = InceptionC(768, 192)
  self.Mixed_7a = InceptionD(768)
  self.Mixed_7b = InceptionE(1280)
  self.Mixed_7c = InceptionE(2048)
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.dropout = nn.Dropout(0.5)
  self.fc = nn.Linear(2048, num_classes or 1000)
end
function Inception3:forward(x)
  x = self.maxpool1(self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x))))
  x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
  x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
  x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(self.Mixed_6a(x)))))
  x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
  x = self.dropout(self.avgpool(x)):flatten(2)
  return self.fc(x)
end

M.Inception3 = Inception3
function M.inception_v3(num_classes) return Inception3(num_classes) end

function M.main()
  local n = tonumber(arg[1]) or 2
  common.time_forward("inception_v3", M.inception_v3(), tc.randn(n, 3, 299, 299))
end

if common.is_main("inception.lua") then M.main() end
return M
