-- generated_images.lua: a map-style dataset of generated, labelled 3×size×size images with per-item
-- augmentation in Lua (random crop, horizontal flip, brightness), for resnet_ddp.lua and
-- bench/data_loading.lua. A module of its own so that DataLoader worker threads can require it.
--
-- Item i is deterministic from (seed, offset + i), in any thread and any process: a Generator seeded by them
-- draws the label, one of `bank` noise images, the crop's corner, the flip and the brightness. The
-- image is the label's class template (per channel a plane wave sin(fx·x + fy·y + phase), the
-- frequencies and phases drawn from `seed`) plus the noise image, cropped from (size + 2·pad)² to
-- size². Labels are 1..classes (tc's class indices are 1-based).
--   local GeneratedImages = require "generated_images"
--   local ds = GeneratedImages(1024, {classes = 10, size = 32, seed = 0})
--   ds:get(1) --> {image = float32[3, 32, 32], label = 7}
local tc = require "tc"
local data = require "tc.utils.data"

local GeneratedImages = data.Dataset:extend("GeneratedImages")

local DEFAULTS = {classes = 10, size = 32, pad = 4, seed = 0, offset = 0, bank = 32, noise = 0.5, augment = true}

-- n items; opts: classes (10), size (32), pad (4), seed (0), offset (0: item i is the stream's item
-- offset + i, so a validation set with the training set's seed and offset = its size holds other
-- images of the same classes), bank (32 noise images), noise (0.5, the
-- noise's standard deviation; the templates' amplitude is 1), augment (true: random crops, flips and
-- brightness; false: the centre crop, as for validation)
function GeneratedImages:__init(n, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if DEFAULTS[k] == nil then error(("GeneratedImages: unknown option '%s'"):format(tostring(k)), 2) end
  end
  for k, v in pairs(DEFAULTS) do self[k] = opts[k] == nil and v or opts[k] end
  if math.type(n) ~= "integer" or n < 1 then error("GeneratedImages: n is a count >= 1, got " .. tostring(n), 2) end
  self.n = n
  local full = self.size + 2 * self.pad
  -- the class templates: (classes, 3, full, full), from a Generator of their own (tc's RNG untouched)
  local g = data.Generator(self.seed)
  local rows = tc.arange(full, {dtype = tc.float32, device = "cpu"}):view(full, 1)
  local cols = rows:view(1, full)
  local step = 2 * math.pi / full
  local classes = {}
  for c = 1, self.classes do
    local planes = {}
    for ch = 1, 3 do
      local fx, fy, phase = (g:random(9) - 5) * step, (g:random(9) - 5) * step, g:random(8) * math.pi / 4
      planes[ch] = tc.sin(cols * fx + rows * fy + phase)
    end
    classes[c] = tc.stack(planes)
  end
  self.templates = tc.stack(classes)
  -- the noise bank from tc's RNG, seeded and then put back as it was
  local state = tc.get_rng_state()
  tc.manual_seed(self.seed + 1)
  self.noises = tc.randn(self.bank, 3, full, full, {device = "cpu"}) * self.noise
  tc.set_rng_state(state)
end

function GeneratedImages:__len() return self.n end

function GeneratedImages:get(i)
  local g = data.Generator(self.seed * 1000003 + self.offset + i)
  local label = g:random(self.classes)
  local noise = self.noises[g:random(self.bank)]
  local r, c = self.pad + 1, self.pad + 1
  if self.augment then r, c = g:random(2 * self.pad + 1), g:random(2 * self.pad + 1) end
  local function crop(t) return t:narrow(2, r, self.size):narrow(3, c, self.size) end
  local image = crop(self.templates[label]) + crop(noise)
  if self.augment then
    if g:random(2) == 2 then image = image:flip(3) end
    image = image * (0.8 + 0.4 * (g:random(1001) - 1) / 1000)
  end
  return {image = image, label = label}
end

return GeneratedImages
