-- Run by run.sh under `tcrun --nproc-per-node N` (args: device): a small CNN trained for K steps
-- with DistributedDataParallel, each rank on its shard of the batch, ends with the parameters of
-- one process training the same model on the whole batch (issue 15: "a DDP training run of a
-- small CNN for K steps equals single-GPU training on the full batch"). The model: cnn.lua.
local tc = require "tc"
local nn = tc.nn
local F = nn.functional
local dist = require "tc.distributed"
local cnn = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/cnn.lua")
local rank, world, tol = cnn.rank, cnn.world, cnn.tol
local make_model = cnn.make_model
local STEPS, PER_RANK = 5, 4
local function full_batch(step) return cnn.full_batch(step, PER_RANK) end

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
