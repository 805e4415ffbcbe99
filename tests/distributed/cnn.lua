-- The small CNN and data of ddp_cnn.lua and ddp_compiled.lua (loaded with dofile): joins the
-- process group on gloo (cpu) or nccl (cuda: LOCAL_RANK's GPU). float64 on the CPU, float32 on
-- CUDA (cuDNN's float64 convolutions are slow), so the tolerances differ.
local tc = require "tc"
local nn = tc.nn
local dist = require "tc.distributed"
local c = {}
c.device = arg[1] or "cpu"
if c.device == "cuda" then c.device = "cuda:" .. os.getenv("LOCAL_RANK") end
dist.init_process_group{backend = c.device == "cpu" and "gloo" or "nccl"}
c.rank, c.world = dist.get_rank(), dist.get_world_size()
c.dtype = c.device == "cpu" and tc.float64 or tc.float32
c.tol = c.device == "cpu" and 1e-10 or 2e-5

function c.make_model()
  tc.manual_seed(11)
  local m = nn.Sequential(
    nn.Conv2d(3, 8, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, {padding = 1}), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(16, 10))
  return m:to(c.dtype):to(c.device)
end

-- the whole batch of a step (world * per_rank images); rank r trains on rows r*per_rank+1 ...
function c.full_batch(step, per_rank)
  tc.manual_seed(100 + step)
  local x = tc.randn(c.world * per_rank, 3, 12, 12, {dtype = c.dtype})
  local y = tc.randint(1, 11, {c.world * per_rank})
  return x:to(c.device), y:to(c.device)
end

return c
