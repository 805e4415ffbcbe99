-- Data-parallel scaling (issue 15's Measure): run under `tcrun --nproc-per-node N` on N GPUs.
--   1. all-reduce of a 256 MB float32 tensor: median time, algorithm and bus bandwidth (NCCL's
--      convention: busbw = algbw * 2 (N - 1) / N);
--   2. GPT-2 small training step (batch 8 x 256 tokens per rank, AdamW, cross-entropy) through
--      DistributedDataParallel: median step time and tokens/s over all ranks.
-- Rank 0 prints "key value" lines; bench/run_ddp.sh runs N = 1 and N = 2 and prints the scaling.
-- Args: [steps (10)] [n_layer (12)]
local tc = require "tc"
local nn = tc.nn
local F = nn.functional
local dist = require "tc.distributed"
package.path = "bench/?.lua;scripts/models/?.lua;" .. package.path
local common = require "bench_common"
local gpt2 = require "gpt2"

local steps = tonumber(arg[1]) or 10
local n_layer = tonumber(arg[2]) or 12
local device = "cuda:" .. (os.getenv("LOCAL_RANK") or "0")
dist.init_process_group{backend = "nccl"}
local rank, world = dist.get_rank(), dist.get_world_size()
local function say(k, v) if rank == 0 then common.say(k, v) end end
local function timed(fn, reps)
  local ts = {}
  for _ = 1, reps do
    dist.barrier()
    tc.cuda.synchronize(device)
    local t0 = tc.utils.perf_counter()
    fn()
    tc.cuda.synchronize(device)
    ts[#ts + 1] = tc.utils.perf_counter() - t0
  end
  return common.median(ts)
end

say("world_size", world)
-- 1. all-reduce bus bandwidth
local big = tc.ones(64 * 1024 * 1024, {device = device})
dist.all_reduce(big)  -- warm-up: NCCL's channels
local t = timed(function() dist.all_reduce(big) end, 10)
local bytes = big:numel() * 4
say("allreduce_256MB_ms", t * 1000)
say("allreduce_algbw_GBps", bytes / t / 1e9)
say("allreduce_busbw_GBps", bytes / t / 1e9 * 2 * (world - 1) / world)
big = nil
collectgarbage()

-- 2. GPT-2 small training step
tc.manual_seed(0)
local model = gpt2.gpt2{n_layer = n_layer}:to(device)
local ddp = nn.parallel.DistributedDataParallel(model)
local opt = tc.optim.AdamW(ddp:parameters(), {lr = 1e-4, weight_decay = 0.01})
local B, T, V = 8, 256, model.config.vocab_size
tc.manual_seed(1 + rank)
local ids = tc.randint(1, V + 1, {B, T}):to(device)
local targets = tc.randint(1, V + 1, {B * T}):to(device)
local function step()
  opt:zero_grad()
  local logits = ddp(ids)
  local loss = F.cross_entropy(logits:view(B * T, V), targets)
  loss:backward()
  opt:step()
  return loss
end
for _ = 1, 3 do step() end  -- warm-up: allocator, cuBLAS, buckets
local st = timed(step, steps)
say("gpt2_step_ms", st * 1000)
say("gpt2_tokens_per_s", world * B * T / st)
dist.destroy_process_group()
