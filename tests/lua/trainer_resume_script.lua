-- A training run for the resume tests (test_trainer.lua): `tcrun trainer_resume_script.lua DIR MODE
-- [accum] [loader] [compiled]` trains an MLP with dropout (so the RNG stream matters), AdamW, a
-- per-step scheduler, a shuffled DataLoader and validation every 5 batches, saving a
-- checkpoint at every batch end (DIR/last.safetensors) and appending "batch loss" lines (%a, exact)
-- to DIR/losses. MODE: "full"; "kill:K" sends itself SIGKILL at batch K before that batch's
-- checkpoint; "resume" continues from DIR/last.safetensors.
-- loader: "global" (shuffle from tc's RNG), "seed" (the loader's own generator), "workers" (seed and
-- 2 worker threads). saver (6th argument): "batch" (the above), "val" (a ModelCheckpoint on val_loss
-- with save_last: checkpoints written inside validation) or "epoch" (one at each epoch's end).
local tc = require "tc"
local nn = require "tc.nn"
local T = require "tc.trainer"
local F = nn.functional
local data = tc.utils.data

local dir, mode = arg[1], arg[2]
local accum = tonumber(arg[3] or "1")
local loader_kind = arg[4] or "global"
local compiled = arg[5] == "compiled"
local saver = arg[6] or "batch"
local accelerator = arg[7]  -- "cuda": the module and batches on the GPU (the GPU check, scripts/dev/gpu_issue29.sh)
local kill_at = tonumber((mode or ""):match("^kill:(%d+)$"))

tc.manual_seed(7)
local X, Y = tc.randn(96, 6), tc.randn(96, 1)
local VX, VY = tc.randn(16, 6), tc.randn(16, 1)

local Net = T.LightningModule:extend("Net")
function Net:__init()
  self.l1 = nn.Linear(6, 16)
  self.drop = nn.Dropout(0.3)
  self.l2 = nn.Linear(16, 1)
end
function Net:forward(x) return self.l2(self.drop(F.relu(self.l1(x)))) end
function Net:training_step(b)
  local loss = F.mse_loss(self(b[1]), b[2])
  self:log("train_loss", loss)
  return loss
end
function Net:validation_step(b) self:log("val_loss", F.mse_loss(self(b[1]), b[2])) end
function Net:configure_optimizers()
  local opt = tc.optim.AdamW(self:parameters(), {lr = 0.01, weight_decay = 0.01})
  local per_step = tc.optim.lr_scheduler.StepLR(opt, 7, 0.9)
  return {optimizer = opt, lr_scheduler = {scheduler = per_step, interval = "step"}}
end

local Record = T.Callback:extend("Record")
function Record:__init() self.f = assert(io.open(dir .. "/losses", "a")) end
function Record:on_train_batch_end(trainer, _, out, _, i)
  local k = trainer.current_epoch * 12 + i
  self.f:write(("%d %a\n"):format(k, out:item()))
  self.f:flush()
  if k == kill_at then
    local pid = io.open("/proc/self/stat"):read("n")
    os.execute("kill -KILL " .. math.tointeger(pid))
  end
end
local Save = T.Callback:extend("Save")
function Save:on_train_batch_end(trainer) trainer:save_checkpoint(dir .. "/last.safetensors") end

local opts = {batch_size = 8, shuffle = true}
if loader_kind ~= "global" then opts.seed = 11 end
if loader_kind == "workers" then opts.num_workers = 2 end
local train = data.DataLoader(data.TensorDataset(X, Y), opts)
local val = data.DataLoader(data.TensorDataset(VX, VY), {batch_size = 8})

local callbacks = {Record(), T.EarlyStopping("val_loss", {patience = 100})}
if saver == "batch" then callbacks[#callbacks + 1] = Save()
elseif saver == "val" then callbacks[#callbacks + 1] = T.ModelCheckpoint({dirpath = dir, monitor = "val_loss", save_top_k = 2, save_last = true})
else callbacks[#callbacks + 1] = T.ModelCheckpoint({dirpath = dir, save_last = true}) end
if os.getenv("DBG") then table.insert(callbacks, 1, dofile("/tmp/dbg.lua")()) end
local trainer = tc.Trainer({max_epochs = 8, accumulate_grad_batches = accum, val_check_interval = 5,
  enable_progress_bar = false, logger = false, num_sanity_val_steps = 1, callbacks = callbacks, accelerator = accelerator})
local model = Net()
if compiled then model = tc.compile(model) end
trainer:fit(model, train, val, mode == "resume" and {ckpt_path = dir .. "/last.safetensors"} or nil)
print("done", trainer.global_step)
