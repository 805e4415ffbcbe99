-- tc.compile(module) returns a callable that stands for the module: its methods run on the module
-- itself (parameters, named_parameters, state_dict, train/eval), its fields are the module's
-- (found by the fuzzer: `tc.compile(Block(4)):parameters()` raised inside tc.nn).
local tc = require "tc"
local nn = require "tc.nn"
local h = require "helpers"

local Block = nn.Module:extend("Block")
function Block:__init(d) self.lin = nn.Linear(d, d) self.scale = 0.5 end
function Block:forward(x) return self.lin(x) * self.scale end

for _, make in ipairs({function() return nn.Linear(4, 4) end, function() return Block(4) end}) do
  tc.manual_seed(3)
  local m = make()
  local c = tc.compile(m)
  local params = c:parameters()
  h.eq(#params, #m:parameters(), "parameter count")
  for i, p in ipairs(params) do h.eq(rawequal(p, m:parameters()[i]), true, "parameter " .. i .. " is the module's") end
  for _, p in ipairs(params) do tc.no_grad(function() p:copy_(p * 0 + 0.25) end) end
  local x = tc.ones(2, 4)
  h.close(c(x), m(x), "compiled result after copy_ into the parameters")
  local names = {}
  for name in pairs(c:state_dict()) do names[#names + 1] = name end
  h.eq(#names, #params, "state_dict entries")
  c:eval()
  h.eq(m.training, false, "eval() through the compiled module")
end

-- fields written through the compiled module are the module's, and the next call sees them
tc.manual_seed(3)
local b = Block(4)
local cb = tc.compile(b)
local x = tc.ones(2, 4)
cb.scale = 2
h.eq(b.scale, 2, "field written through the wrapper")
h.close(cb(x), b(x), "call after a field write")
