-- resnet_ddp.lua: a ResNet (scripts/models/resnet.lua) trained with DistributedDataParallel through
-- tc.Trainer{strategy = "ddp"} on generated images (generated_images.lua: a class template plus noise,
-- randomly cropped, flipped and brightened in Lua per item, in --workers DataLoader threads per rank),
-- with validation accuracy, ModelCheckpoint (best val_acc and last) and, on rank 0, each epoch's loss,
-- accuracy and training images/s (every rank's images, between the epoch's first and last batch).
--   ./build/tcrun scripts/examples/resnet_ddp.lua --devices 2             (the Trainer starts 2 ranks)
--   ./build/tcrun --nproc-per-node 2 scripts/examples/resnet_ddp.lua      (tcrun starts them)
--   ./build/tcrun scripts/examples/resnet_ddp.lua --device cuda --devices 8 --arch resnet50 --width 64 \
--        --size 224 --batch 64 --samples 65536 --workers 4 --compile 1 --epochs 5
-- Options: --devices N (ranks on this node; default 2, or what tcrun --nproc-per-node started),
-- --device cpu|cuda (gloo or nccl), --workers N (DataLoader threads per rank), --compile 0|1 (tc.compile
-- the module: the Trainer compiles its steps), --arch resnet18|resnet50, --width N (first stage's
-- planes; 64 is torchvision's), --size N (image side), --classes N, --batch N (per rank), --samples N
-- (training images), --val_samples N, --epochs N, --steps N (max_steps, -1: none), --lr X, --dir DIR
-- (checkpoints and metrics.csv; default a temporary directory), --seed N.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local L = require "tc.trainer"
local data = tc.utils.data
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../models/?.lua;" .. package.path
local resnet = require "resnet"
local common = require "common"
local GeneratedImages = require "generated_images"

local opt = common.options("resnet_ddp.lua", {devices = tonumber(os.getenv("LOCAL_WORLD_SIZE") or "") or 2,
  device = "cpu", workers = 2, compile = 0, arch = "resnet18", width = 16, size = 32, classes = 10, batch = 32,
  samples = 2048, val_samples = 512, epochs = 3, steps = -1, lr = 0.05, dir = "", seed = 0})
if opt.device ~= "cpu" and opt.device ~= "cuda" then error("resnet_ddp.lua: --device is cpu or cuda", 0) end
if opt.device == "cuda" and not tc.cuda.is_available() then error("resnet_ddp.lua: no CUDA device", 0) end
if not resnet[opt.arch] or not opt.arch:match("^resnet") then error("resnet_ddp.lua: --arch is resnet18 or resnet50", 0) end
if opt.size < 16 then error("resnet_ddp.lua: --size must be 16 or more", 0) end
tc.manual_seed(opt.seed)

-- ---- data: generated images, a different seed (and no augmentation) for validation ---------------------
local pad = math.max(2, opt.size // 8)
local train_set = GeneratedImages(opt.samples, {classes = opt.classes, size = opt.size, pad = pad, seed = opt.seed})
local val_set = GeneratedImages(opt.val_samples, {classes = opt.classes, size = opt.size, pad = pad, seed = opt.seed,
  offset = opt.samples, augment = false})  -- other images of the same classes, centre crops
-- drop_last: every batch the same shape (a compiled step does not recompile for a ragged batch); under
-- ddp the Trainer re-makes both loaders over a DistributedSampler (each rank its share)
local cuda = opt.device == "cuda"
local train_loader = data.DataLoader(train_set, {batch_size = opt.batch, shuffle = true, seed = opt.seed, drop_last = true,
  num_workers = opt.workers, persistent_workers = opt.workers > 0, pin_memory = cuda})
local val_loader = data.DataLoader(val_set, {batch_size = opt.batch, drop_last = true, num_workers = opt.workers,
  persistent_workers = opt.workers > 0, pin_memory = cuda})

-- ---- the module -----------------------------------------------------------------------------------------
local ImageClassifier = L.LightningModule:extend("ImageClassifier")
function ImageClassifier:__init()
  self.net = resnet[opt.arch](opt.classes, {width = opt.width})
end
function ImageClassifier:forward(x) return self.net(x) end
function ImageClassifier:training_step(batch)
  local loss = F.cross_entropy(self(batch.image), batch.label)
  self:log("train_loss", loss, {prog_bar = true})
  return loss
end
function ImageClassifier:validation_step(batch)
  local logits = self(batch.image)
  self:log("val_loss", F.cross_entropy(logits, batch.label), {sync_dist = true})
  self:log("val_acc", logits:argmax(2):eq(batch.label):float():mean(), {sync_dist = true, prog_bar = true})
end
function ImageClassifier:configure_optimizers()
  local o = tc.optim.SGD(self:parameters(), {lr = opt.lr, momentum = 0.9, weight_decay = 5e-4})
  return {optimizer = o, lr_scheduler = tc.optim.lr_scheduler.CosineAnnealingLR(o, math.max(1, opt.epochs))}
end

-- ---- what each epoch did: the mean training loss over ranks, validation, images/s (printed on rank 0) -----
local Report = L.Callback:extend("Report")
function Report:on_fit_start(trainer)
  print(("rank %d of %d: %s on %s, %d training batches of %d per epoch, %d DataLoader workers"):format(trainer.global_rank,
    trainer.world_size, opt.arch, trainer.device or "cpu", #trainer.train_dataloader, opt.batch, opt.workers))
  io.stdout:flush()
end
function Report:sync(trainer)
  if cuda then tc.cuda.synchronize(trainer.device) end
end
function Report:on_train_epoch_start()
  self.loss_sum, self.batches, self.t_first = nil, 0, nil
end
function Report:on_train_batch_end(trainer, module, out)
  local loss = tc.is_tensor(out) and out or out.loss
  self.loss_sum = self.loss_sum and self.loss_sum + loss:detach() or loss:detach():clone()
  self.batches = self.batches + 1
  -- images/s from the end of the epoch's first batch (a first compile and the workers' start excluded)
  -- to the end of its last
  if self.batches == 1 then self:sync(trainer); self.t_first = tc.utils.perf_counter() end
end
function Report:on_validation_start(trainer)
  -- the validation at the epoch's end starts after its last training batch
  if self.batches and self.batches > 1 and not self.t_end then self:sync(trainer); self.t_end = tc.utils.perf_counter() end
end
function Report:on_train_epoch_end(trainer)
  if not self.t_end and self.batches > 1 then self:sync(trainer); self.t_end = tc.utils.perf_counter() end
  local loss = (self.loss_sum / self.batches):double()
  if trainer.world_size > 1 then require("tc.distributed").all_reduce(loss, "avg") end
  local images = (self.batches - 1) * opt.batch * trainer.world_size
  local rate = self.t_end and images / (self.t_end - self.t_first) or 0 / 0
  self.t_end = nil
  if trainer.is_global_zero then
    local m = trainer.callback_metrics
    print(("epoch %d: train_loss %.4f, val_loss %.4f, val_acc %.4f, %.1f images/s (%d ranks)"):format(trainer.current_epoch,
      loss:item(), m.val_loss or 0 / 0, m.val_acc or 0 / 0, rate, trainer.world_size))
    io.stdout:flush()
  end
end

-- ---- training -------------------------------------------------------------------------------------------
local function tmpname() local p = os.tmpname(); os.remove(p); return p end
local dir = opt.dir ~= "" and opt.dir or tmpname()
local checkpoint = L.ModelCheckpoint{dirpath = dir .. "/checkpoints", monitor = "val_acc", mode = "max", save_top_k = 1,
  save_last = true}
local trainer = tc.Trainer{strategy = "ddp", devices = opt.devices, accelerator = opt.device,
  max_epochs = opt.epochs, max_steps = opt.steps, num_sanity_val_steps = 0, callbacks = {checkpoint, Report()},
  default_root_dir = dir, log_every_n_steps = 10, seed = opt.seed}
local model = ImageClassifier()
trainer:fit(opt.compile ~= 0 and tc.compile(model) or model, train_loader, val_loader)

-- DDP's promise: every rank took the same optimizer steps on the averaged gradients, so the ranks'
-- parameters are equal (the largest difference to rank 0's, over every parameter and rank)
if trainer.world_size > 1 then
  local dist = require "tc.distributed"
  local diff = tc.zeros(1, {dtype = tc.float64, device = trainer.device})
  for _, p in ipairs(model:parameters()) do
    local p0 = p:detach():clone()
    dist.broadcast(p0, 0)
    diff = tc.maximum(diff, (p:detach() - p0):abs():max():double():reshape(1))
  end
  dist.all_reduce(diff, "max")
  if trainer.is_global_zero then print(("ranks' parameters: largest difference to rank 0's %g"):format(diff:item())) end
end
if trainer.is_global_zero then
  print(("done: %d steps, val_acc %.4f; checkpoints: %s (best), %s"):format(trainer.global_step,
    trainer.callback_metrics.val_acc or 0 / 0, checkpoint.best_model_path, checkpoint.last_model_path))
end
