-- Data loading against a compiled ResNet training step (issue 29's measure: a DataLoader doing per-item
-- work in Lua with num_workers = 4 keeps a compiled ResNet-50 step on the GPU within 5 % of a run on
-- preloaded tensors). The same tc.compile'd step (zero_grad, forward, cross-entropy, backward, SGD) is
-- fed by
--   preloaded: a few batches made beforehand and already on the device, taken in turn;
--   workers=N: a DataLoader over scripts/examples/generated_images.lua (per item in Lua: a random crop
--              of a generated image, a flip, a brightness factor) with num_workers = N, each batch moved
--              to the device: on cuda the loader pins its batches (pin_memory = true) and the copies
--              are x:to("cuda", {non_blocking = true}); with --pin 0 they come from pageable memory,
--              on a side stream that the step's stream waits for (--copy_stream 0: on the step's).
-- Each variant first runs --warmup steps (the first compiles; a loader's warm-up is an epoch of its
-- own), then --rounds rounds alternate the variants, each round --steps timed steps (a loader's round is
-- a new epoch: persistent workers, an empty queue), synchronized only before and after them; a
-- variant's figure is its best round. Prints that round's step times (host time between consecutive
-- steps' returns) and their median, its mean (the round's wall time / steps), the loader alone (its
-- batches without the step) and the ratio of each loader variant's mean to preloaded's.
--   ./build/tcrun bench/data_loading.lua --device cuda        (ResNet-50, batch 64 of 3×224×224, 1000 classes)
--   ./build/tcrun bench/data_loading.lua                      (CPU: ResNet-18 of width 16, batch 16 of 3×64×64)
-- Options: --device cpu|cuda, --arch resnet18|resnet50, --width N, --size N, --batch N, --classes N,
-- --steps N, --warmup N, --rounds N, --workers LIST (comma-separated, default 0,4), --compile 0|1, --mode M
-- (tc.compile's mode, e.g. reduce-overhead), --pin 0|1, --copy_stream 0|1, --seed N. 0 or "" means the device's default.
-- Output: "key value" lines (data_<variant>_ms, data_<variant>_ratio, ...) and "#" comment lines.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
package.path = "bench/?.lua;scripts/models/?.lua;scripts/examples/?.lua;" .. package.path
local common = require "common"
local bench = require "bench_common"
local resnet = require "resnet"
local GeneratedImages = require "generated_images"
local data = tc.utils.data

local opt = common.options("data_loading.lua", {device = "cpu", arch = "", width = 0, size = 0, batch = 0, classes = 0,
  steps = 0, warmup = 2, rounds = 3, workers = "0,4", compile = 1, mode = "", pin = 1, copy_stream = 1,
  seed = 0})
local cuda = opt.device == "cuda"
if opt.device ~= "cpu" and not cuda then error("data_loading.lua: --device is cpu or cuda", 0) end
if cuda and not tc.cuda.is_available() then error("data_loading.lua: no CUDA device", 0) end
local function default(v, on_cuda, on_cpu)
  if v ~= 0 and v ~= "" then return v end
  return cuda and on_cuda or on_cpu
end
local arch = default(opt.arch, "resnet50", "resnet18")
local width = default(opt.width, 64, 16)
local size = default(opt.size, 224, 64)
local batch = default(opt.batch, 64, 16)
local classes = default(opt.classes, 1000, 10)
local steps = default(opt.steps, 30, 10)
local warmup = math.max(1, opt.warmup)
local rounds = math.max(1, opt.rounds)
local workers = {}
for w in opt.workers:gmatch("[^,]+") do
  workers[#workers + 1] = math.tointeger(tonumber(w)) or error("data_loading.lua: --workers is a list of counts, got " .. opt.workers, 0)
end
if not resnet[arch] or not arch:match("^resnet") then error("data_loading.lua: --arch is resnet18 or resnet50", 0) end
local device = cuda and "cuda" or "cpu"
if cuda then tc.set_float32_matmul_precision("high") end
tc.manual_seed(opt.seed)

-- ---- the compiled training step ------------------------------------------------------------------------
local model = resnet[arch](classes, {width = width}):to(device)
model:train()
local optimizer = tc.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
local function train_step(x, y)
  optimizer:zero_grad()
  local loss = F.cross_entropy(model(x), y)
  loss:backward()
  optimizer:step()
  return loss
end
local step = train_step
if opt.compile ~= 0 then step = tc.compile(train_step, opt.mode ~= "" and {mode = opt.mode} or {}) end
local function sync() if cuda then tc.cuda.synchronize() end end
local now = tc.utils.perf_counter

-- ---- the data ------------------------------------------------------------------------------------------
-- the dataset's labels are 1..10 whatever the model's classes (its class templates cost memory)
local function dataset(n)
  return GeneratedImages(n, {classes = math.min(classes, 10), size = size, pad = math.max(2, size // 8), seed = opt.seed})
end
local pin = cuda and opt.pin ~= 0
local side = cuda and not pin and opt.copy_stream ~= 0 and tc.cuda.Stream() or nil
local function to_device(b)
  if not cuda then return b.image, b.label end
  -- pinned batches: the copies are left running on the step's stream
  if pin then return b.image:to(device, {non_blocking = true}), b.label:to(device, {non_blocking = true}) end
  if not side then return b.image:to(device), b.label:to(device) end
  -- from pageable memory: the copy on a side stream (it returns once the source is read), the step's
  -- stream waiting for it; record_stream: the memory, allocated on `side`, is used on the step's stream
  local main = tc.cuda.current_stream()
  local x, y = tc.cuda.stream(side, function() return b.image:to(device), b.label:to(device) end)
  main:wait_stream(side)
  x:record_stream(main)
  y:record_stream(main)
  return x, y
end

-- ---- timing --------------------------------------------------------------------------------------------
-- next_batch() -> x, y on the device. Returns the per-step times (ms) and the mean (ms).
local function run(next_batch, n)
  local times = {}
  if n < 1 then return times, 0 / 0 end
  sync()
  local t0 = now()
  local last = t0
  for i = 1, n do
    step(next_batch())
    local t = now()
    times[i] = (t - last) * 1e3
    last = t
  end
  sync()
  return times, (now() - t0) * 1e3 / n
end

print(("# %s (width %d) on %s, batch %d of 3x%dx%d, %d classes, %s step, %d rounds of %d timed steps after %d warm-up; "
  .. "%d CPU threads"):format(arch, width, device, batch, size, size, classes, opt.compile ~= 0 and "compiled" or "eager",
  rounds, steps, warmup, tc.get_num_threads()))
io.stdout:flush()

-- the variants: name, warm-up, and a round's batches (next_batch for run)
local variants = {}

-- (a) preloaded: a few batches on the device, taken in turn
local preloaded = {}
for b in data.DataLoader(dataset(math.min(steps, 4) * batch), {batch_size = batch}) do
  preloaded[#preloaded + 1] = {b.image:to(device), b.label:to(device)}
end
local k = 0
local function next_preloaded()
  k = k % #preloaded + 1
  return preloaded[k][1], preloaded[k][2]
end
local t_first = now()
step(next_preloaded())
sync()
bench.say("data_first_step_s", now() - t_first)  -- the compile, when compiled
variants[1] = {name = "preloaded", warm = function() run(next_preloaded, warmup - 1) end,
  round = function() return next_preloaded end}

-- (b) a DataLoader with num_workers = w: each round is an epoch (its first batch is loaded while the
-- step waits; persistent workers: the threads stay between epochs)
for _, w in ipairs(workers) do
  local name = "workers" .. w
  local loader = data.DataLoader(dataset(steps * batch), {batch_size = batch, shuffle = true, seed = opt.seed,
    drop_last = true, num_workers = w, persistent_workers = w > 0, pin_memory = pin})
  -- the loader alone: its batches on the host, no step
  local t0, n = now(), 0
  for _ in loader do n = n + 1 end
  bench.say("data_" .. name .. "_loader_only_ms", (now() - t0) * 1e3 / n)
  variants[#variants + 1] = {name = name,
    warm = function()  -- an epoch of its own, left after `warmup` steps
      local i = 0
      for b in loader do
        step(to_device(b))
        i = i + 1
        if i == warmup then break end
      end
    end,
    round = function()
      local it = loader:iter()
      return function() return to_device(it()) end
    end}
end

-- rounds alternate the variants (a slower machine for a while slows every variant); each variant's
-- figure is its best round
for _, v in ipairs(variants) do v.warm() end
for _ = 1, rounds do
  for _, v in ipairs(variants) do
    local times, mean = run(v.round(), steps)
    if not v.mean or mean < v.mean then v.mean, v.times = mean, times end
  end
end
for _, v in ipairs(variants) do
  local s = {}
  for i, t in ipairs(v.times) do s[i] = ("%.1f"):format(t) end
  print(("# %s per step (ms, the best round): %s"):format(v.name, table.concat(s, " ")))
  bench.say("data_" .. v.name .. "_ms", v.mean)
  bench.say("data_" .. v.name .. "_median_ms", bench.median(v.times))
  if v.name ~= "preloaded" then bench.say("data_" .. v.name .. "_ratio", v.mean / variants[1].mean) end
end
