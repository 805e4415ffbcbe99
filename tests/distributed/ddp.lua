-- Run by run.sh under `tcrun --nproc-per-node N` (args: device): DistributedDataParallel's
-- training equals one process training on every rank's batch (the gradient average), with
-- no_sync accumulation, parameters broadcast from rank 0 at wrap time, and all-reduces launched
-- during the backward (overlap), in bucket order.
local tc = require "tc"
local nn = tc.nn
local dist = require "tc.distributed"
local device = arg[1] or "cpu"
if device == "cuda" then device = "cuda:" .. os.getenv("LOCAL_RANK") end
dist.init_process_group{backend = device == "cpu" and "gloo" or "nccl"}
local rank, world = dist.get_rank(), dist.get_world_size()

local function make_model(seed)
  tc.manual_seed(seed)
  return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)):double():to(device)
end
local function batch(r, step)  -- rank r's batch at a step: the same on every rank
  tc.manual_seed(1000 * step + r)
  return tc.randn(5, 6, {dtype = tc.float64}):to(device), tc.randn(5, 3, {dtype = tc.float64}):to(device)
end
local function loss_of(m, x, y) return ((m(x) - y) ^ 2):mean() end

-- each rank starts from its own seed: DDP must broadcast rank 0's parameters
local net = make_model(7 + rank)
local ddp = nn.parallel.DistributedDataParallel(net, {bucket_cap_mb = 0.0005})  -- ~2 parameters a bucket
local opt = tc.optim.SGD(ddp:parameters(), {lr = 0.1, momentum = 0.9})
-- the reference: rank 0's initial model trained on the average gradient of all ranks' batches
local ref = make_model(7)
local ref_opt = tc.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})

local function check_params(what)
  local a, b = ddp.module:parameters(), ref:parameters()
  for i = 1, #a do
    local err = (a[i] - b[i]):abs():max():item()
    if err > 1e-12 then error(("rank %d: %s: parameter %d differs from the reference by %g"):format(rank, what, i, err), 2) end
  end
end
check_params("after wrapping")

for step = 1, 4 do
  -- step 3 accumulates two micro-batches, the first under no_sync
  opt:zero_grad()
  if step == 3 then
    ddp:no_sync(function()
      local x, y = batch(rank, 30)
      loss_of(ddp, x, y):backward()
    end)
  end
  local x, y = batch(rank, step)
  loss_of(ddp, x, y):backward()
  local log = ddp:_comm_log()
  opt:step()

  ref_opt:zero_grad()
  for r = 0, world - 1 do
    if step == 3 then
      local x3, y3 = batch(r, 30)
      local l3 = loss_of(ref, x3, y3) / world
      l3:backward()
    end
    local xr, yr = batch(r, step)
    local lr = loss_of(ref, xr, yr) / world
    lr:backward()
  end
  ref_opt:step()
  check_params("step " .. step)

  -- overlap: the first bucket was launched before the last gradient was ready; buckets in order
  local first_launch, last_grad, order = nil, nil, {}
  for i, e in ipairs(log) do
    if e:find("^allreduce") then
      first_launch = first_launch or i
      order[#order + 1] = tonumber(e:match("%d+"))
    elseif e:find("^grad") then
      last_grad = i
    end
  end
  assert(log[#log] == "done", "the reducer finished: " .. table.concat(log, ", "))
  assert(first_launch and first_launch < last_grad, "an all-reduce overlaps the backward: " .. table.concat(log, ", "))
  for i = 1, #order do assert(order[i] == i, "buckets launch in order: " .. table.concat(log, ", ")) end
end
assert(#ddp:_bucket_params() >= 3, "small buckets")
dist.destroy_process_group()
print(("rank %d of %d: ddp ok"):format(rank, world))
