-- The seeds' MyModule: relu(Linear(100, 10)(x)).
local tc = require "tc"
local nn = require "tc.nn"
-- this folder on package.path, so `tcrun scripts/models/my_module.lua` finds common.lua
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if not package.path:find(here .. "/?.lua", 1, true) then package.path = here .. "/?.lua;" .. package.path end
local common = require "common"

local M = {}
local MyModule = nn.Module:extend("MyModule")
M.MyModule = MyModule
function MyModule:__init() self.lin = nn.Linear(100, 10) end
function MyModule:forward(x) return nn.functional.relu(self.lin(x)) end

function M.main()
  common.time_forward("MyModule", MyModule(), tc.randn(10, 100), 10)
end

if common.is_main("my_module.lua") then M.main() end
return M
