-- A dataset class in a module, for test_data.lua's worker-thread tests: workers require this
-- module to rebuild the dataset. Item i is a "crop" of a generated image, computed in Lua with a
-- generator seeded by i (the same in any thread), and a label; get(fail_at) raises, get(hang_at) never returns.
local tc = require "tc"
local data = require "tc.utils.data"

local Crops = data.Dataset:extend("Crops")
function Crops:__init(n, opts)
  self.n = n
  self.images = tc.arange(4 * 8 * 8):view(4, 8, 8):to(tc.float32)
  self.fail_at = opts and opts.fail_at
  self.hang_at = opts and opts.hang_at
end
function Crops:__len() return self.n end
function Crops:get(i)
  if i == self.fail_at then error(("item %d is corrupt"):format(i)) end
  if i == self.hang_at then while true do end end
  local g = data.Generator(i)
  local img = self.images[(i - 1) % 4 + 1]
  local r, c = g:random(5), g:random(5)
  local crop = img:narrow(1, r, 4):narrow(2, c, 4)
  local info = data.get_worker_info()
  return {x = crop, label = i % 3, name = "item" .. i, worker = info and info.id or 0}
end

-- a collate_fn a module holds (workers require it): the sum of labels and the number of items
function Crops.count_collate(items)
  local s = 0
  for _, it in ipairs(items) do s = s + it.label end
  return {n = #items, sum = s}
end

-- An IterableDataset of items 1..n, sharded over workers as PyTorch's guide does: worker k of N
-- yields items k, k + N, ...
local Stream = data.IterableDataset:extend("Stream")
function Stream:__init(n) self.n = n end
function Stream:__len() return self.n end
function Stream:iter()
  local info = data.get_worker_info()
  local i, step = info and info.id or 1, info and info.num_workers or 1
  i = i - step
  return function()
    i = i + step
    if i <= self.n then return {v = i, worker = info and info.id or 0} end
  end
end
Crops.Stream = Stream

return Crops
