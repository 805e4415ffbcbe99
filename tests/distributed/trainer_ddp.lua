-- tc.Trainer with strategy = "ddp" (run by test_trainer.lua under `tcrun --nproc-per-node 2`, or
-- without a launcher, which the Trainer then starts itself): a float64 regression trained on two
-- ranks, each taking its DistributedSampler share of every batch, equals one process training on
-- the whole batch (the gradient average); an accumulation window reduces once; epoch metrics
-- logged with sync_dist are the mean over ranks; only rank 0 writes checkpoints and the CSV.
-- args: DIR [accum]
local tc = require "tc"
local nn = require "tc.nn"
local L = require "tc.trainer"
local F = nn.functional
local data = tc.utils.data
local dir, accum = arg[1], tonumber(arg[2] or "1")

tc.manual_seed(3)
local X, Y = tc.randn(32, 5, {dtype = tc.float64}), tc.randn(32, 1, {dtype = tc.float64})
local function make()
  tc.manual_seed(11)
  local M = L.LightningModule:extend("M")
  function M:__init() self.l1 = nn.Linear(5, 8); self.l2 = nn.Linear(8, 1) end
  function M:forward(x) return self.l2(tc.tanh(self.l1(x))) end
  function M:training_step(b)
    local loss = F.mse_loss(self(b[1]), b[2])
    self:log("loss", loss, {on_epoch = true, on_step = false, sync_dist = true})
    return loss
  end
  function M:configure_optimizers() return tc.optim.SGD(self:parameters(), {lr = 0.1, momentum = 0.9}) end
  return M():double()
end

local world = tonumber(os.getenv("WORLD_SIZE") or "1")
local model = make()
local loader = data.DataLoader(data.TensorDataset(X, Y), {batch_size = 4})  -- 4 a rank: 8 a step together
local tr = tc.Trainer({max_epochs = 2, strategy = "ddp", devices = 2, accelerator = "cpu", accumulate_grad_batches = accum,
  enable_progress_bar = false, default_root_dir = dir, callbacks = {L.ModelCheckpoint({dirpath = dir, save_last = true})}})
tr:fit(model, loader)
local rank = tr.global_rank

-- the reference: one process, batches of 8 in the same order (rank 0 takes items 1, 3, 5, 7 of
-- each 8 and rank 1 items 2, 4, 6, 8; DistributedSampler without shuffle interleaves)
local ref = make()
local opt = tc.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
local steps = 0
for _ = 1, 2 do
  for b = 0, 3 do
    if b % accum == 0 then opt:zero_grad() end
    local x, y = X:narrow(1, 8 * b + 1, 8), Y:narrow(1, 8 * b + 1, 8)
    local loss = F.mse_loss(ref(x), y)
    if accum > 1 then loss = loss / accum end
    loss:backward()
    if (b + 1) % accum == 0 or b == 3 then opt:step(); steps = steps + 1 end
  end
end
assert(tr.world_size == 2, "two ranks, got " .. tr.world_size)
assert(tr.global_step == steps, ("steps %d, reference %d"):format(tr.global_step, steps))
local a, b = model:parameters(), ref:parameters()
for i = 1, #a do
  local err = (a[i] - b[i]):abs():max():item()
  assert(err < 1e-12, ("rank %d: parameter %d differs from the one-process reference by %g"):format(rank, i, err))
end
-- the synced epoch loss: the same number on both ranks
local d = tc.tensor({tr.callback_metrics.loss}, {dtype = tc.float64})
local d0 = d:clone()
require("tc.distributed").broadcast(d, 0)
assert(tc.equal(d, d0), ("rank %d: the synced loss %s differs from rank 0's %s"):format(rank, tostring(d0:item()), tostring(d:item())))
print(("trainer ddp ok rank %d world %d steps %d loss %.6f"):format(rank, world, tr.global_step, tr.callback_metrics.loss))
