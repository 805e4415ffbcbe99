-- Lua's collector is told about tensor bytes: a loop that makes many large tensors and drops
-- them keeps tc's live bytes bounded; collected tensors release their memory.
local tc = require "tc"
local check = require "check"
local T = {}

function T.loop_of_1mb_tensors_stays_bounded()
  collectgarbage()
  local base = tc.memory.live_bytes()
  local peak = 0
  for i = 1, 10000 do
    local x = tc.empty(256 * 1024)  -- 1 MiB of float32
    if i % 100 == 0 then peak = math.max(peak, tc.memory.live_bytes() - base) end
  end
  check.eq(peak < 256 * 2 ^ 20, true, ("peak live bytes %.1f MiB after 10000 x 1 MiB"):format(peak / 2 ^ 20))
end

function T.loop_of_results_of_ops_stays_bounded()
  collectgarbage()
  local base = tc.memory.live_bytes()
  local x = tc.ones(128 * 1024)
  local peak = 0
  for i = 1, 3000 do
    local y = x * 2 + 1
    if i % 100 == 0 then peak = math.max(peak, tc.memory.live_bytes() - base) end
  end
  check.eq(peak < 256 * 2 ^ 20, true, ("peak live bytes %.1f MiB"):format(peak / 2 ^ 20))
end

function T.collect_releases_memory()
  collectgarbage()
  local base = tc.memory.live_bytes()
  local xs = {}
  for i = 1, 8 do xs[i] = tc.empty(1024 * 1024) end
  check.eq(tc.memory.live_bytes() - base >= 8 * 4 * 2 ^ 20, true, "tensors are live")
  xs = nil
  collectgarbage()
  collectgarbage()
  check.eq(tc.memory.live_bytes() - base < 2 ^ 20, true, "collected")
end

-- Memory that only the collector knows is garbage is reclaimed when an allocation fails: with a
-- 64 MiB cap on CPU tensors and 40 MiB held, 40 dropped 8 MiB tensors fit (the pacing alone would
-- wait for 192 MiB of garbage), and a tensor that cannot fit is an OutOfMemoryError.
function T.failed_allocation_collects_garbage_and_retries()
  collectgarbage()
  collectgarbage()
  local base = tc.memory.live_bytes()
  tc.memory.set_cpu_limit(base + 64 * 2 ^ 20)
  local ok, err = pcall(function()
    local held = tc.empty(10 * 2 ^ 20)  -- 40 MiB of float32
    for _ = 1, 40 do
      local x = tc.empty(2 * 2 ^ 20)  -- 8 MiB, garbage after the iteration
      x:fill_(1)
    end
    local too_big = select(2, pcall(tc.empty, 8 * 2 ^ 20))  -- 32 MiB more than fits
    check.eq(tc.is_tensor(too_big), false, "an allocation past the cap fails")
    check.eq(too_big.kind, "OutOfMemoryError", "its kind")
    return held
  end)
  tc.memory.set_cpu_limit(0)
  if not ok then error(err, 0) end
end

-- The same on a GPU (skipped without one): 60% of the free memory held, then ten dropped tensors
-- of 15% each; pacing by bytes alone would wait for as much garbage as is live.
function T.gpu_out_of_memory_collects_garbage_and_retries()
  if not tc.cuda.is_available() then check.skip("no CUDA device") end
  collectgarbage()
  tc.cuda.empty_cache()
  local probe = {}  -- the free memory, in GiB blocks (the last try is out of memory)
  while true do
    local ok, t = pcall(tc.empty, 2 ^ 28, {device = "cuda"})
    if not ok then break end
    probe[#probe + 1] = t
  end
  local free = #probe * 2 ^ 30
  probe = nil
  collectgarbage()
  tc.cuda.empty_cache()
  if free < 4 * 2 ^ 30 then return end
  local n = function(frac) return math.floor(free * frac / 4) end
  local held = tc.empty(n(0.6), {device = "cuda"})
  for _ = 1, 10 do
    local x = tc.empty(n(0.15), {device = "cuda"})
    x:fill_(1)
  end
  tc.cuda.synchronize()
  held = nil
  collectgarbage()
  tc.cuda.empty_cache()
end

function T.views_keep_storage_alive()
  local v
  do
    local x = tc.arange(10)
    v = x[{{3, 4}}]
  end
  collectgarbage()
  collectgarbage()
  check.values(v, {2, 3})
end

return T
