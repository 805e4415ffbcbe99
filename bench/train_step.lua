-- One training step (zero_grad, forward, cross-entropy, backward, optimizer step), tc's side of
-- issue 13's training benchmarks; bench/peer_torch_train.py is PyTorch's, bench/run_train.sh puts
-- them side by side.
--   densenet121: batch 16 x 3x128x128, 1000 classes, Adam (the torch.compile tutorial's benchmark)
--   gpt2:        GPT-2 small, batch 8 x 256 tokens, next-token cross-entropy, AdamW
--   cnn:         a small CNN (2 x Conv-BatchNorm-ReLU-MaxPool, Linear), batch 32 x 3x32x32, Adam
-- Usage: tcrun bench/train_step.lua MODEL [DEVICE (cuda)] [ITERS (10)] [VARIANTS (eager,default,reduce-overhead)]
-- Per variant: "tc MODEL VARIANT <median ms> <first call s> <iterations>" (synchronized per step;
-- on a GPU also the step's device time with the host ahead of the device, behind queued products;
-- the first call of a compiled variant is its cold compile plus one step), or
-- "tc MODEL VARIANT n/a: <error>" when the variant does not run (compiled training is new).
-- Each variant runs at most ~BUDGET seconds (TC_BENCH_BUDGET, 60) after its first call.
-- TC_BENCH_PROFILE_STEP=1: on a GPU, one more step of each variant after its timed ones runs
-- between tc.cuda.profiler_start() and profiler_stop(), the only one an external profiler started
-- with profiling off records (ncu --profile-from-start off --graph-profiling node: each kernel of
-- that step, CUDA graphs' nodes too; scripts/dev/ncu_step.py sums them).
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"
package.path = "bench/?.lua;scripts/models/?.lua;" .. package.path
local common = require "bench_common"

local model_name = arg[1] or "cnn"
local device = arg[2] or "cuda"
local iters = tonumber(arg[3]) or 10
local variants = {}
for v in (arg[4] or "eager,default,reduce-overhead"):gmatch("[^,]+") do variants[#variants + 1] = v end
local budget = tonumber(os.getenv("TC_BENCH_BUDGET") or "") or 60
tc.set_float32_matmul_precision("high")
tc.set_default_device(device)
tc.manual_seed(0)

local function small_cnn()
  return nn.Sequential(
    nn.Conv2d(3, 16, 3, {padding = 1}), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, {padding = 1}), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
end

local model, x, y, opt, loss_of
if model_name == "densenet121" then
  model = require("densenet").densenet121()
  x, y = tc.randn(16, 3, 128, 128), tc.randint(1, 1001, {16})
  opt = optim.Adam(model:parameters(), {lr = 1e-3})
  loss_of = function() return F.cross_entropy(model(x), y) end
elseif model_name == "gpt2" then
  model = require("gpt2").gpt2()
  local V = model.config.vocab_size
  x, y = tc.randint(1, V + 1, {8, 256}), tc.randint(1, V + 1, {8, 256})
  opt = optim.AdamW(model:parameters(), {lr = 1e-4})
  loss_of = function() return F.cross_entropy(model(x):view(-1, V), y:view(-1)) end
elseif model_name == "cnn" then
  model = small_cnn()
  x, y = tc.randn(32, 3, 32, 32), tc.randint(1, 11, {32})
  opt = optim.Adam(model:parameters(), {lr = 1e-3})
  loss_of = function() return F.cross_entropy(model(x), y) end
else
  error("train_step.lua: MODEL must be densenet121, gpt2 or cnn, got " .. tostring(model_name), 0)
end
model:train()

local function train_step()
  opt:zero_grad()
  local loss = loss_of()
  loss:backward()
  opt:step()
  return loss
end

local function sync() if device ~= "cpu" then tc.cuda.synchronize() end end
local median = common.median
local function message(e)
  local s = type(e) == "table" and (e.message or tostring(e)) or tostring(e)
  return (s:gsub("\n.*", ""):sub(1, 200))
end

print(("# tc %s on %s, %d CPU threads, optimizer %s (fused, the default for floating-point parameters)"):format(
  model_name, device, tc.get_num_threads(), getmetatable(opt).__name))
io.stdout:flush()
for _, v in ipairs(variants) do
  local fn = train_step
  if v ~= "eager" then fn = tc.compile(train_step, v == "default" and {} or {mode = v}) end
  local t0 = tc.utils.perf_counter()
  local ok, err = pcall(function() fn(); sync() end)
  local first = tc.utils.perf_counter() - t0
  if not ok then
    print(("tc %s %s n/a: %s"):format(model_name, v, message(err)))
  else
    local times, returned, start = {}, {}, tc.utils.perf_counter()
    local graphs0
    ok, err = pcall(function()
      fn(); sync()  -- a second warm-up (recompiles of the second call, allocator)
      graphs0 = device ~= "cpu" and tc.cuda.graph_stats()
      for i = 1, iters do
        local s = tc.utils.perf_counter()
        fn()
        returned[i] = (tc.utils.perf_counter() - s) * 1e3
        sync()
        times[i] = (tc.utils.perf_counter() - s) * 1e3
        if tc.utils.perf_counter() - start > budget then break end
      end
    end)
    if ok and device ~= "cpu" and os.getenv("TC_BENCH_PROFILE_STEP") == "1" then
      ok, err = pcall(function()
        sync(); tc.cuda.profiler_start(); fn(); sync(); tc.cuda.profiler_stop()
      end)
    end
    if ok then
      print(("tc %s %s %.3f %.2f %d"):format(model_name, v, median(times), first, #times))
      print(("# %s: the call returned after %.3f ms, the device was done after %.3f ms (medians)"):format(
        v, median(returned), median(times)))
      local g = graphs0 and tc.cuda.graph_stats()
      if g and g.replays > graphs0.replays then  -- CUDA graphs: what each step moved besides its work
        local function per(k) return (g[k] - graphs0[k]) / #times end
        print(("# %s per step: %.1f replays, %.1f MiB copied in, %.1f MiB moved out, %.1f checks read later, %.1f waited for"):format(
          v, per("replays"), per("bytes_copied") / 2 ^ 20, per("bytes_moved") / 2 ^ 20, per("checks_later"), per("check_waits")))
      end
      if device ~= "cpu" and v ~= "eager" then
        -- the step's device time alone: the device first runs products long enough for the host to
        -- queue the whole step behind them, so the host's time before its first launch and between
        -- launches is hidden (the difference to the figure above is the device waiting for the host)
        local alone = {}
        ok, err = pcall(function()
          local a, e0, e1 = tc.randn(4096, 4096), tc.cuda.Event({enable_timing = true}), tc.cuda.Event({enable_timing = true})
          sync(); e0:record(); for _ = 1, 4 do tc.mm(a, a) end; e1:record(); sync()
          local busy = math.ceil(3 * median(returned) / (e0:elapsed_time(e1) / 4)) + 1
          for i = 1, math.min(#times, 5) do
            sync()
            for _ = 1, busy do tc.mm(a, a) end
            e0:record(); fn(); e1:record(); sync()
            alone[i] = e0:elapsed_time(e1)
          end
        end)
        print(ok and ("# %s: with the host ahead of the device, the step took %.3f ms of device time (medians)"):format(v, median(alone))
              or ("# %s: the step's device time alone n/a: %s"):format(v, message(err)))
      end
    else
      print(("tc %s %s n/a: %s"):format(model_name, v, message(err)))
    end
  end
  io.stdout:flush()
end
