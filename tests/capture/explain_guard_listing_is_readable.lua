-- Explain's guard listing: no raw addresses (functions by definition site, classes by name,
-- builtins by name), guards grouped by the root of their source, identical guards of repeated
-- entries folded with a count (a full grid of indices folds in every index).
local tc = require "tc"
local h = require "helpers"

local Block = {__name = "Block"}
Block.__index = Block
function Block.run(self, x) return x * self.parts[1].w + self.parts[2].w end
local blocks = {}
for i = 1, 3 do
  blocks[i] = setmetatable({parts = {{w = tc.ones(2)}, {w = tc.ones(2) * i}}}, Block)
end
local function f(bs, x)
  for _, b in ipairs(bs) do x = b:run(x) end
  return x + math.sqrt(4)
end
local report = tc.compiler.explain(f)(blocks, tc.ones(2))
local lines = report.guards[1].guards
local text = table.concat(lines, "\n")
assert(not text:find("0x%x%x%x%x"), "no raw addresses:\n" .. text)
local on = " on " .. tc.get_default_device()  -- cpu, or cuda:0 under tcrun --device=cuda
assert(text:find("TENSOR_MATCH: arg[1][1..3].parts[1..2].w float32[2]" .. on .. " (x6)", 1, true), text)
assert(text:find("ID_MATCH: getmetatable(arg[1][1..3]) the same class Block (x3)", 1, true), text)
assert(text:find("the same function <" , 1, true), text)
assert(text:find("the same builtin math.sqrt", 1, true), text)
-- grouped: the guards on the arguments form one block, before those on globals and classes
local first, last, others = nil, 0, {}
for i, l in ipairs(lines) do
  local src = l:match("^[%u_]+: (%S+)")
  if src and (src:find("^arg") or src:find("^getmetatable%(arg")) then
    first, last = first or i, i
  elseif src then
    others[#others + 1] = i
  end
end
for _, i in ipairs(others) do assert(i < first or i > last, "guards grouped by source:\n" .. text) end
