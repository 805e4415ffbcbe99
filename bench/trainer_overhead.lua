-- The cost of tc.Trainer around a compiled training step (issue 29: goal <= 2 % over a hand-written
-- loop): the same model, optimizer, data and tc.compile'd step, once through tc.Trainer (module
-- compiled: the Trainer compiles training_step) and once in a plain loop (zero_grad, step, backward,
-- opt:step). Each is timed between the starts of consecutive batches (so the Trainer's own work
-- between batches counts), median over the steps after the warm-up; the two runs alternate `rounds`
-- times and the best median of each is kept.
--   tcrun bench/trainer_overhead.lua [resnet18|gpt2] [cpu|cuda] [steps] [rounds]
--   cpu defaults: resnet18 on 8×3×64×64; cuda: gpt2 = GPT-2 small, batch 8 × 512 tokens, AdamW.
local tc = require "tc"
local nn = require "tc.nn"
local L = require "tc.trainer"
local F = nn.functional
package.path = "bench/?.lua;scripts/models/?.lua;" .. package.path
local common = require "bench_common"

local which, device = arg[1] or "resnet18", arg[2] or "cpu"
local steps, rounds = tonumber(arg[3] or "30"), tonumber(arg[4] or "3")
local warm = 5
local cuda = device == "cuda"
local sync = cuda and tc.cuda.synchronize or function() end

local make_model, batches
if which == "resnet18" then
  local resnet = require "resnet"
  local bsz, size = cuda and 64 or 8, cuda and 224 or 64
  make_model = function() tc.manual_seed(0); return resnet.resnet18(10):to(device) end
  tc.manual_seed(1)
  batches = {}
  for k = 1, 4 do batches[k] = {tc.randn(bsz, 3, size, size):to(device), tc.randint(1, 11, {bsz}):to(device)} end
elseif which == "gpt2" then
  local gpt2 = require "gpt2"
  local cfg = cuda and {} or {n_layer = 2, n_embd = 128, n_head = 4, vocab_size = 1024, n_positions = 128}
  local bsz, T = cuda and 8 or 4, cuda and 512 or 64
  make_model = function() tc.manual_seed(0); return gpt2.gpt2(cfg):to(device) end
  tc.manual_seed(1)
  local V = cuda and 50257 or 1024
  batches = {}
  for k = 1, 4 do
    local ids = tc.randint(1, V + 1, {bsz, T + 1}):to(device)
    batches[k] = {ids:narrow(2, 1, T), ids:narrow(2, 2, T)}
  end
else error("trainer_overhead.lua: model is resnet18 or gpt2") end

local function loss_of(model, b)
  local out = model(b[1])
  if which == "gpt2" then return F.cross_entropy(out:reshape(-1, out:size(3)), b[2]:reshape(-1)) end
  return F.cross_entropy(out, b[2])
end
local function optimizer(params)
  return which == "gpt2" and tc.optim.AdamW(params, {lr = 1e-4}) or tc.optim.SGD(params, {lr = 0.01, momentum = 0.9})
end

-- intervals between consecutive batch starts after the warm-up
local function median_interval(stamps)
  local d = {}
  for k = warm + 1, #stamps - 1 do d[#d + 1] = stamps[k + 1] - stamps[k] end
  return common.median(d)
end

local function hand_loop()
  local model = make_model()
  local opt = optimizer(model:parameters())
  local step = tc.compile(function(b) return loss_of(model, b) end)
  local stamps = {}
  for k = 1, steps + 1 do
    sync()
    stamps[k] = tc.utils.perf_counter()
    if k > steps then break end
    opt:zero_grad()
    local loss = step(batches[(k - 1) % #batches + 1])
    loss:backward()
    opt:step()
  end
  return median_interval(stamps)
end

local function trainer_run()
  local M = L.LightningModule:extend("M")
  function M:__init() self.net = make_model() end
  function M:forward(x) return self.net(x) end
  function M:training_step(b) return loss_of(self.net, b) end
  function M:configure_optimizers() return optimizer(self:parameters()) end
  local stamps = {}
  local Stamp = L.Callback:extend("Stamp")
  function Stamp:on_train_batch_start() sync(); stamps[#stamps + 1] = tc.utils.perf_counter() end
  function Stamp:on_train_end() sync(); stamps[#stamps + 1] = tc.utils.perf_counter() end
  local tr = tc.Trainer({max_steps = steps, enable_progress_bar = false, logger = false, num_sanity_val_steps = 0,
    enable_checkpointing = false, callbacks = {Stamp()}})
  local data = {}
  for k = 1, steps do data[k] = batches[(k - 1) % #batches + 1] end
  tr:fit(tc.compile(M()), data)
  return median_interval(stamps)
end

local best_hand, best_tr = math.huge, math.huge
for _ = 1, rounds do
  best_hand = math.min(best_hand, hand_loop())
  best_tr = math.min(best_tr, trainer_run())
end
common.say(which .. "_" .. device .. "_hand_loop_step_ms", best_hand * 1000)
common.say(which .. "_" .. device .. "_trainer_step_ms", best_tr * 1000)
common.say(which .. "_" .. device .. "_trainer_overhead_pct", (best_tr / best_hand - 1) * 100)
