-- mode = "reduce-overhead" checks index values on the device without waiting for it (CUDA graphs
-- on the GPU: `tcrun --device=cuda tests/capture/run.lua reduce_overhead_checks`; on the CPU it
-- checks the errors and values only): valid replays of graphs whose kernels check index values
-- (generated: cross_entropy's targets, gather's indices; an eager kernel's own check next to
-- them: scatter_add's indices) never make the host wait (graph_stats().check_waits stays, each
-- replay counts in checks_later); an out-of-range target or index still raises eager's
-- IndexError naming the op's line, at the latest at the next synchronize(); afterwards the error
-- is gone: valid calls and eager ops run and equal eager, and nothing raises twice.
local tc = require "tc"
local F = require "tc.nn.functional"
local h = require "helpers"

local on_gpu = tc.get_default_device():sub(1, 4) == "cuda"
local function i64(t) return tc.tensor(t, {dtype = tc.int64}) end
local function stats() return tc.cuda.graph_stats() end
local function sync() if on_gpu then tc.cuda.synchronize() end end

local function loss(x, t, i)
  local l = F.cross_entropy(x * 2, t)
  return l + x:gather(2, i):sum()
end
local function spread(x, t, i)
  local s = tc.zeros(4, 3):scatter_add(2, i, x:narrow(2, 1, 1))  -- scatter_add runs on its eager kernel
  return s * F.cross_entropy(x, t)
end
local x = tc.randn(4, 3)
local t, i = i64({1, 3, 2, 1}), i64({{1}, {2}, {3}, {1}})

for _, fn in ipairs({loss, spread}) do
  local cf = tc.compile(fn, {mode = "reduce-overhead"})
  for _ = 1, 3 do cf(x, t, i) end  -- warm-up, recording, a replay
  sync()

  local s0 = on_gpu and stats()
  for k = 1, 5 do h.close_to_eager(cf(x, t, i), fn(x, t, i), "valid call " .. k) end
  if on_gpu then
    h.eq(stats().check_waits - s0.check_waits, 0, "valid replays never wait for their checks")
    h.eq(stats().checks_later - s0.checks_later, 5, "each replay's checks are read later")
    h.eq(stats().replays - s0.replays, 5, "replays")
  end

  -- Raises eager's error (message and the op's line) by the next synchronize() at the latest.
  local function raises_as_eager(bad_t, bad_i, what)
    local ok_e, eager = pcall(fn, x, bad_t, bad_i)
    h.eq(ok_e, false, what .. " fails eagerly")
    local ok, err = pcall(function()
      cf(x, bad_t, bad_i)
      sync()
    end)
    h.eq(ok, false, what .. " fails compiled")
    h.eq(err.kind, "IndexError", what .. " kind")
    assert(err.message:find(eager.message, 1, true), what .. ": message " .. err.message .. " lacks " .. eager.message)
    if err.line ~= eager.line then  -- surfaced later than the op: the message names the op's line
      assert(err.message:find(":" .. eager.line .. ",", 1, true), what .. ": message " .. err.message ..
             " does not name line " .. eager.line)
    end
    -- nothing flagged stays behind: valid work runs, compiled and eager, and equals eager
    sync()
    h.close_to_eager(cf(x, t, i), fn(x, t, i), what .. ": next valid call")
    h.eq(type(x:gather(2, i):sum():item()), "number", what .. ": an eager gather after it")
    sync()
  end
  raises_as_eager(i64({1, 9, 2, 1}), i, "target out of range")
  raises_as_eager(t, i64({{1}, {2}, {4}, {1}}), "index out of range")
end
