-- The cross-rank collective check's cost (issue 32): the time of a small all_reduce
-- (float32[1024]) with `check_collectives` on or off, under `tcrun --nproc-per-node N`
-- (one process group per run: run it once with on and once with off).
-- Args: backend (nccl | gloo, default nccl) check (on | off, default on) [calls (5000)].
-- Rank 0 prints one line. (gloo checks its collectives in either case: the label rides with the data.)
local tc = require "tc"
local dist = require "tc.distributed"
local backend = arg[1] or "nccl"
local check = (arg[2] or "on") == "on"
local calls = tonumber(arg[3]) or 5000
local device = backend == "nccl" and "cuda:" .. (os.getenv("LOCAL_RANK") or "0") or "cpu"
dist.init_process_group{backend = backend, check_collectives = check}
local x = tc.ones(1024, {device = device})
local function sync() if device ~= "cpu" then tc.cuda.synchronize(device) end end
for _ = 1, 50 do dist.all_reduce(x) end
sync()
local t0 = tc.utils.perf_counter()
for _ = 1, calls do dist.all_reduce(x) end
sync()
local us = (tc.utils.perf_counter() - t0) / calls * 1e6
if dist.get_rank() == 0 then
  print(("%s all_reduce float32[1024] check_collectives=%s: %.1f us per call (world %d)")
    :format(backend, tostring(check), us, dist.get_world_size()))
end
dist.destroy_process_group()
