-- Host-to-device copies from pageable and pinned memory (x:pin_memory()), blocking and
-- non_blocking: `tcrun bench/pinned_copies.lua [MiB]` on a GPU machine. Per size: GB/s of a
-- synchronized copy from pageable memory, from pinned memory, the host time a non_blocking copy
-- from pinned memory takes to return while tens of ms of GPU work run before it (it must not wait),
-- and the time of pin_memory() itself (a cached block: a memcpy; the first: cuMemHostAlloc too).
package.path = "bench/?.lua;" .. package.path
local tc = require "tc"
local common = require "bench_common"
if not tc.cuda.is_available() then error("pinned_copies.lua: no CUDA device", 0) end
local now, say, median = tc.utils.perf_counter, common.say, common.median
local mib = tonumber(arg and arg[1]) or 64

-- tens of ms of queued GPU work (chained products)
local a = tc.randn({4096, 4096}, {device = "cuda"})
local function busy()
  local x = a
  for _ = 1, 12 do x = x:mm(a) * (1 / 64) end
  return x
end

local n = mib * 1024 * 1024 // 4
local pageable = tc.randn(n)
local t0 = now()
local pinned = pageable:pin_memory()
say("pin_memory_first_ms", (now() - t0) * 1e3)
pinned = nil
collectgarbage()
local pins = {}
for i = 1, 5 do
  t0 = now()
  local p = pageable:pin_memory()
  pins[i] = (now() - t0) * 1e3
  p = nil
  collectgarbage()
end
say("pin_memory_cached_ms", median(pins))
pinned = pageable:pin_memory()
assert(pinned:is_pinned())

local function rate(src, opts)
  local t = {}
  for i = 1, 7 do
    tc.cuda.synchronize()
    local s = now()
    local y = src:to("cuda", opts)
    tc.cuda.synchronize()
    t[i] = now() - s
  end
  return mib / 1024 / median(t)
end
say("pageable_GBps", rate(pageable))
say("pinned_GBps", rate(pinned))
say("pinned_non_blocking_GBps", rate(pinned, {non_blocking = true}))

-- the host time to queue a copy behind busy work
local function queued_ms(src, opts)
  local t = {}
  for i = 1, 5 do
    tc.cuda.synchronize()
    busy()
    local s = now()
    local y = src:to("cuda", opts)
    t[i] = (now() - s) * 1e3
    tc.cuda.synchronize()
  end
  return median(t)
end
say("pageable_return_behind_busy_ms", queued_ms(pageable))
say("pinned_blocking_return_behind_busy_ms", queued_ms(pinned))
say("pinned_non_blocking_return_behind_busy_ms", queued_ms(pinned, {non_blocking = true}))
