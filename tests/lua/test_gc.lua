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
