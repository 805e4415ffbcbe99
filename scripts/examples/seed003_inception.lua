-- seed003_inception.lua: Lightning's "Speed up models by compiling them" benchmark in Lua. Inception-v3
-- (scripts/models/inception.lua) trains on generated 3×size×size images through tc.Trainer, first eager,
-- then compiled (`tc.compile(model)`: the Trainer compiles training_step), with the guide's Benchmark
-- callback timing each training step after the first; prints both median step times and the speed-up.
--   ./build/tcrun scripts/examples/seed003_inception.lua --device cuda --batch 16 --size 512 --steps 10
--   ./build/tcrun scripts/examples/seed003_inception.lua            (CPU-sized: batch 2 of 3×75×75, 3 steps)
-- Options: --device cpu|cuda, --batch N, --size N (>= 75), --steps N (max_steps; the first is not
-- timed), --samples N (dataset size, default 256 or steps×batch if smaller), --only eager|compiled,
-- --classes N (default 1000).
local tc = require "tc"
local L = require "tc.trainer"
local data = tc.utils.data
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = here .. "/../models/?.lua;" .. package.path
local inception = require "inception"
local common = require "common"

-- ---- arguments ------------------------------------------------------------------------------------
local opt = common.options("seed003_inception.lua", {device = "cpu", batch = 2, size = 75, steps = 3, samples = 0,
  only = "", classes = 1000, seed = 0})
if opt.size < 75 then error("seed003_inception.lua: Inception-v3 needs --size 75 or more", 0) end
if opt.only ~= "" and opt.only ~= "eager" and opt.only ~= "compiled" then
  error("seed003_inception.lua: --only is eager or compiled", 0)
end
if opt.device == "cuda" and not tc.cuda.is_available() then error("seed003_inception.lua: no CUDA device", 0) end
tc.set_default_device(opt.device)
local cuda = opt.device == "cuda"

-- ---- the module: the guide's MyLightningModule ---------------------------------------------------
local MyLightningModule = L.LightningModule:extend("MyLightningModule")
function MyLightningModule:__init()
  self.model = inception.inception_v3(opt.classes)
end
function MyLightningModule:training_step(batch)
  return self.model(batch):sum()  -- tc's Inception3 gives the logits (no auxiliary head)
end
function MyLightningModule:train_dataloader()
  -- the guide's DataLoader([torch.randn(3, 512, 512) for _ in range(256)], batch_size=16), generated on
  -- the device (the Trainer does not move batches)
  local n = opt.samples > 0 and opt.samples or math.min(256, opt.steps * opt.batch)
  local Images = data.Dataset:extend("Images")
  function Images:__init() self.x = tc.randn(n, 3, opt.size, opt.size) end
  function Images:__len() return n end
  function Images:get(k) return self.x[k] end
  return data.DataLoader(Images(), {batch_size = opt.batch})
end
function MyLightningModule:configure_optimizers()
  return tc.optim.SGD(self:parameters(), {lr = 0.01})
end

-- ---- the guide's Benchmark callback ---------------------------------------------------------------
-- Measures the time between the start and end of each training batch (on CUDA with events and a
-- synchronize, as the guide; on the CPU with the monotonic clock), leaving out the first step.
local Benchmark = L.Callback:extend("Benchmark")
function Benchmark:__init()
  self.times = {}
  if cuda then
    self.start_event = tc.cuda.Event({enable_timing = true})
    self.end_event = tc.cuda.Event({enable_timing = true})
  end
end
function Benchmark:median_time()
  local t = {}
  for k, v in ipairs(self.times) do t[k] = v end
  table.sort(t)
  local n = #t
  if n == 0 then return 0 / 0 end
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end
function Benchmark:on_train_batch_start()
  if cuda then self.start_event:record() else self.t0 = tc.utils.perf_counter() end
end
function Benchmark:on_train_batch_end(trainer)
  -- leave out the first iteration to let the model warm up (and compile)
  if trainer.global_step > 1 then
    if cuda then
      self.end_event:record()
      tc.cuda.synchronize()
      self.times[#self.times + 1] = self.start_event:elapsed_time(self.end_event) / 1000
    else
      self.times[#self.times + 1] = tc.utils.perf_counter() - self.t0
    end
  end
end

-- ---- eager, then compiled -------------------------------------------------------------------------
local function run(model)
  local benchmark = Benchmark()
  local trainer = tc.Trainer{max_steps = opt.steps, callbacks = {benchmark}, logger = false,
                             enable_checkpointing = false}
  trainer:fit(model)
  return benchmark:median_time(), trainer
end

print(("Inception-v3, batch %d of 3x%dx%d on %s, %d steps (the first not timed)"):format(opt.batch, opt.size, opt.size,
  opt.device, opt.steps))
tc.manual_seed(opt.seed)
local model = MyLightningModule()
local compiled_model = tc.compile(model)  -- compile!

local eager_time, compile_time
if opt.only ~= "compiled" then
  eager_time = run(model)
  print(("Eager median time: %.4f seconds"):format(eager_time))
end
if opt.only ~= "eager" then
  compile_time = run(compiled_model)
  print(("Compile median time: %.4f seconds"):format(compile_time))
end
if eager_time and compile_time then
  print(("Speedup: %.1fx"):format(eager_time / compile_time))
end
