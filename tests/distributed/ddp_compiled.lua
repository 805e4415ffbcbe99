-- Run by run.sh under `tcrun --nproc-per-node N` (args: device): compiled DDP (issue 15). A small
-- CNN wrapped in DistributedDataParallel and trained for K steps with tc.compile, both ways torch
-- users write it (tc.compile(ddp_model), and a compiled train step that calls the DDP model), ends
-- with the parameters of eager DDP and of one process training on the whole batch. The compiled
-- backward still overlaps communication: the reducer's log shows an all-reduce launched before the
-- last gradient is ready, buckets in order, and the graph split at bucket boundaries. A tiny GPT-2
-- (tied weights) trains under eager and compiled DDP as one process on the whole batch.
local tc = require "tc"
local nn = tc.nn
local F = nn.functional
local dist = require "tc.distributed"
local cnn = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/cnn.lua")
local rank, world, tol = cnn.rank, cnn.world, cnn.tol
local make_model = cnn.make_model
local STEPS, PER_RANK = 4, 4
local function full_batch(step) return cnn.full_batch(step, PER_RANK) end

local lo = rank * PER_RANK + 1
local function shard(t) return t:narrow(1, lo, PER_RANK) end

-- kind: "eager" (uncompiled DDP), "model" (tc.compile(ddp)), "step" (a compiled train step).
-- Returns the DDP model and the comm log of its last step.
local function train(kind)
  local ddp = nn.parallel.DistributedDataParallel(make_model(), {bucket_cap_mb = 0.002})
  local opt = tc.optim.SGD(ddp:parameters(), {lr = 0.05, momentum = 0.9})
  local model = kind == "model" and tc.compile(ddp) or ddp
  local function step_fn(x, y)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
  local step = kind == "step" and tc.compile(step_fn) or step_fn
  local log
  for s = 1, STEPS do
    local x, y = full_batch(s)
    ddp:_comm_log()
    step(shard(x), shard(y))
    log = ddp:_comm_log()
  end
  return ddp, log
end

local ref = make_model()
local ref_opt = tc.optim.SGD(ref:parameters(), {lr = 0.05, momentum = 0.9})
for s = 1, STEPS do
  local x, y = full_batch(s)
  ref_opt:zero_grad()
  F.cross_entropy(ref(x), y):backward()
  ref_opt:step()
end

local function check_close(what, a, b)
  for i = 1, #a do
    local err = ((a[i] - b[i]):abs():max() / (b[i]:abs():max() + 1)):item()
    if err > tol then
      error(("rank %d: %s: parameter %d differs by %g (tolerance %g)"):format(rank, what, i, err, tol))
    end
  end
end

-- the log's shape: every parameter's gradient once, every bucket launched once and in order, and
-- (overlap) the first all-reduce before the last gradient
local function check_log(what, log, nbuckets, nparams)
  local grads, launched, first_launch, last_grad = 0, 0, nil, nil
  for i, e in ipairs(log) do
    if e:match("^grad ") then grads, last_grad = grads + 1, i end
    local b = e:match("^allreduce (%d+)")
    if b then
      launched = launched + 1
      if tonumber(b) ~= launched then error(("rank %d: %s: buckets launched out of order: %s"):format(rank, what, table.concat(log, ", "))) end
      first_launch = first_launch or i
    end
  end
  if grads ~= nparams or launched ~= nbuckets or log[#log] ~= "done" then
    error(("rank %d: %s: unexpected comm log: %s"):format(rank, what, table.concat(log, ", ")))
  end
  return first_launch < last_grad
end

local eager, eager_log = train("eager")
local nb, np = #eager:_bucket_params(), #eager.module:parameters()
assert(nb >= 3, "the test wants several buckets")
assert(check_log("eager DDP", eager_log, nb, np), "eager DDP does not overlap")
check_close("eager DDP vs full batch", eager.module:parameters(), ref:parameters())

for _, kind in ipairs{"model", "step"} do
  local ddp, log = train(kind)
  local what = "compiled DDP (" .. kind .. ")"
  check_close(what .. " vs eager DDP", ddp.module:parameters(), eager.module:parameters())
  check_close(what .. " vs full batch", ddp.module:parameters(), ref:parameters())
  local overlaps = check_log(what, log, nb, np)
  if os.getenv("TC_DDP_TEST_OVERLAP") ~= "0" and not overlaps then
    error(("rank %d: %s: no all-reduce launched before the last gradient: %s"):format(rank, what, table.concat(log, ", ")))
  end
end

-- tied weights (a tiny GPT-2: the token embedding is also the output layer): eager and compiled
-- DDP equal one process on the whole batch (the tied weight's gradient is the sum of both uses,
-- accumulated once per backward, so its bucket is all-reduced once)
package.path = "scripts/models/?.lua;" .. package.path
local gpt2 = require "gpt2"
local function make_gpt2()
  tc.manual_seed(5)
  return gpt2.gpt2({vocab_size = 50, n_positions = 8, n_embd = 16, n_layer = 2, n_head = 2}):to(cnn.dtype):to(cnn.device)
end
local function tokens(step)
  tc.manual_seed(50 + step)
  return tc.randint(1, 51, {2 * world, 8}):to(cnn.device), tc.randint(1, 51, {2 * world, 8}):to(cnn.device)
end
local function lm_loss(logits, y) return F.cross_entropy(logits:reshape(-1, 50), y:reshape(-1)) end
local function train_gpt2(kind)
  local net = make_gpt2()
  local m = kind == "full" and net or nn.parallel.DistributedDataParallel(net, {bucket_cap_mb = 0.002})
  if kind == "compiled" then m = tc.compile(m) end
  local opt = tc.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9})
  for s = 1, 3 do
    local x, y = tokens(s)
    if kind ~= "full" then x, y = x:narrow(1, rank * 2 + 1, 2), y:narrow(1, rank * 2 + 1, 2) end
    opt:zero_grad()
    lm_loss(m(x), y):backward()
    opt:step()
  end
  return net:parameters()
end
local full = train_gpt2("full")
local gtol = cnn.device == "cpu" and 1e-10 or 1e-4
for _, kind in ipairs{"eager", "compiled"} do
  for i, p in ipairs(train_gpt2(kind)) do
    local err = ((p - full[i]):abs():max() / (full[i]:abs():max() + 1)):item()
    if err > gtol then
      error(("rank %d: GPT-2 (tied weights), %s DDP: parameter %d differs from full-batch training by %g"):format(rank, kind, i, err))
    end
  end
end

dist.destroy_process_group()
print(("rank %d of %d: ddp compiled ok"):format(rank, world))
