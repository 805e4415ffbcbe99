-- Run by run.sh under `tcrun --nproc-per-node N` (args: device): a small CNN trained for K steps
-- with DistributedDataParallel, each rank on its shard of the batch, ends with the parameters of
-- one process training the same model on the whole batch (issue 15: "a DDP training run of a
-- small CNN for K steps equals single-GPU training on the full batch"). float64 on the CPU (gloo),
-- float32 on CUDA (NCCL; cuDNN's float64 convolutions are slow), so the tolerances differ.
local tc = require "tc"
local nn = tc.nn
local F = nn.functional
local dist = require "tc.distributed"
local device = arg[1] or "cpu"
if device == "cuda" then device = "cuda:" .. os.getenv("LOCAL_RANK") end
dist.init_process_group{backend = device == "cpu" and "gloo" or "nccl"}
local rank, world = dist.get_rank(), dist.get_world_size()
local dtype = device == "cpu" and tc.float64 or tc.float32
local tol = device == "cpu" and 1e-10 or 2e-5
local STEPS, PER_RANK = 5, 4

local function make_model()
  tc.manual_seed(11)
  local m = nn.Sequential(
    nn.Conv2d(3, 8, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, {padding = 1}), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(16, 10))
  return m:to(dtype):to(device)
end

-- the whole batch of a step (world * PER_RANK images); rank r trains on rows r*PER_RANK+1 ...
local function full_batch(step)
  tc.manual_seed(100 + step)
  local x = tc.randn(world * PER_RANK, 3, 12, 12, {dtype = dtype})
  local y = tc.randint(1, 11, {world * PER_RANK})
  return x:to(device), y:to(device)
end

local ddp = nn.parallel.DistributedDataParallel(make_model(), {bucket_cap_mb = 0.002})
local opt = tc.optim.SGD(ddp:parameters(), {lr = 0.05, momentum = 0.9})
local ref = make_model()
local ref_opt = tc.optim.SGD(ref:parameters(), {lr = 0.05, momentum = 0.9})

for step = 1, STEPS do
  local x, y = full_batch(step)
  opt:zero_grad()
  local lo = rank * PER_RANK + 1
  local loss = F.cross_entropy(ddp(x:narrow(1, lo, PER_RANK)), y:narrow(1, lo, PER_RANK))
  loss:backward()
  opt:step()

  ref_opt:zero_grad()
  F.cross_entropy(ref(x), y):backward()
  ref_opt:step()
end

local a, b = ddp.module:parameters(), ref:parameters()
for i = 1, #a do
  local err = ((a[i] - b[i]):abs():max() / (b[i]:abs():max() + 1)):item()
  if err > tol then
    error(("rank %d: parameter %d differs from full-batch training by %g (tolerance %g)"):format(rank, i, err, tol))
  end
end
dist.destroy_process_group()
print(("rank %d of %d: ddp cnn ok"):format(rank, world))
