-- tc.cuda streams and events from Lua: without a GPU every one of them is a DeviceError naming the
-- reason (this part runs in CI); with one, work on two streams matches the CPU, events time and
-- order work, tc.cuda.stream / use_stream restore the previous stream even after an error, and
-- x:record_stream is accepted. Run alone on a GPU machine: tcrun tests/lua/run.lua test_cuda_streams
local tc = require "tc"
local check = require "check"
local T = {}
local cuda = tc.cuda

function T.without_gpu_every_stream_and_event_call_is_a_device_error()
  if cuda.is_available() then check.skip("a CUDA device is present") end
  local calls = {
    Stream = function() return cuda.Stream() end,
    current_stream = function() return cuda.current_stream() end,
    default_stream = function() return cuda.default_stream() end,
    set_stream = function() return cuda.set_stream(nil) end,
    use_stream = function() return cuda.use_stream(nil) end,
    stream = function() return cuda.stream(nil, function() end) end,
    Event = function() return cuda.Event {enable_timing = true} end,
    record_stream = function() return tc.ones(2):record_stream(nil) end,
    synchronize = function() return cuda.synchronize() end,
    profiler_start = function() return cuda.profiler_start() end,
    profiler_stop = function() return cuda.profiler_stop() end,
  }
  for name, f in pairs(calls) do
    local e = check.raises("DeviceError", f)
    assert(e.message:find("CUDA is not available", 1, true), name .. ": " .. e.message)
  end
  check.eq(cuda.memory_allocated(), 0)
end

local function gpu() return cuda.is_available() end

-- The profiler range (ncu --profile-from-start off records what runs inside it) starts and stops
-- around work without changing it; outside a profiler it does nothing else.
function T.profiler_range_leaves_work_unchanged()
  if not gpu() then check.skip("no CUDA device") end
  local a = tc.arange(6, {dtype = tc.float32}):cuda()
  cuda.profiler_start()
  local b = a * 2
  cuda.profiler_stop()
  check.values(b:cpu(), {0, 2, 4, 6, 8, 10}, 0)
end

function T.work_on_two_streams_matches_the_cpu()
  if not gpu() then check.skip("no CUDA device") end
  tc.manual_seed(0)
  local a, b = tc.randn(256, 128), tc.randn(128, 64)
  local s1, s2 = cuda.Stream(), cuda.Stream()
  assert(s1 ~= s2, "two new streams differ")
  local y1, y2
  cuda.stream(s1, function()
    check.eq(cuda.current_stream(), s1)
    y1 = (a:cuda():matmul(b:cuda())):relu()
  end)
  cuda.stream(s2, function()
    y2 = (a:cuda() * 2):sum(2)
  end)
  check.eq(cuda.current_stream(), cuda.default_stream(), "restored")
  cuda.current_stream():wait_stream(s1)
  cuda.current_stream():wait_stream(s2)
  check.values(y1:cpu(), a:matmul(b):relu():tolist(), 1e-4, "mm on s1")
  check.values(y2:cpu(), (a * 2):sum(2):tolist(), 1e-4, "sum on s2")
  cuda.synchronize()
  assert(s1:query() and s2:query(), "idle streams report done")
end

function T.events_time_and_order_work()
  if not gpu() then check.skip("no CUDA device") end
  local x = tc.randn(1024, 1024, {device = "cuda"})
  local start, stop = cuda.Event {enable_timing = true}, cuda.Event {enable_timing = true}
  start:record()
  for _ = 1, 20 do x = x:matmul(x):tanh() end
  stop:record()
  stop:synchronize()
  assert(stop:query(), "a synchronized event is complete")
  local ms = start:elapsed_time(stop)
  assert(type(ms) == "number" and ms > 0, "elapsed_time > 0, got " .. tostring(ms))
  check.raises("ValueError", function() return cuda.Event():elapsed_time(cuda.Event()) end)
  -- producer/consumer through an event
  local side = cuda.Stream()
  side:wait_stream(cuda.current_stream())  -- x was made on the default stream
  local y
  cuda.stream(side, function() y = x:matmul(x):add(1) end)
  local ev = side:record_event()
  ev:wait()  -- the current (default) stream waits for side
  local z = y * 2
  y:record_stream(cuda.current_stream())
  check.values(z:cpu(), ((y:cpu()) * 2):tolist(), 1e-5)
end

function T.stream_context_restores_after_an_error()
  if not gpu() then check.skip("no CUDA device") end
  local s = cuda.Stream()
  local ok, e = pcall(cuda.stream, s, function() error({kind = "mine"}) end)
  check.eq(ok, false)
  check.eq(e.kind, "mine")
  check.eq(cuda.current_stream(), cuda.default_stream())
  do
    local _ <close> = cuda.use_stream(s)
    check.eq(cuda.current_stream(), s)
    check.eq(cuda.current_stream().device, "cuda:0")
  end
  check.eq(cuda.current_stream(), cuda.default_stream())
  cuda.set_stream(s)
  check.eq(cuda.current_stream(), s)
  cuda.set_stream(cuda.default_stream())
  check.raises("ValueError", function() return cuda.set_stream("s") end)
  check.raises("ValueError", function() return cuda.stream(s, 42) end)
  check.eq(cuda.current_stream(), cuda.default_stream())
end

return T
