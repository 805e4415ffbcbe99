-- Pinned host memory: x:pin_memory(), x:is_pinned(), x:to("cuda", {non_blocking = true}) and
-- DataLoader{pin_memory = true}. Without a GPU, pinning is a DeviceError naming the reason and a
-- pin_memory loader gives its plain batches (this part runs in CI); with one, pinned copies keep
-- their values, copies from pinned tensors dropped while the copies are still queued give the right
-- values, and a pin_memory loader's batches are pinned. Run alone on a GPU machine:
-- tcrun tests/lua/run.lua test_pinned_memory
local tc = require "tc"
local check = require "check"
local data = tc.utils.data
local T = {}

local function gpu() return tc.cuda.is_available() end

function T.without_gpu_pin_memory_is_a_device_error_and_nothing_is_pinned()
  if gpu() then check.skip("a CUDA device is present") end
  local x = tc.arange(6):view(2, 3)
  check.eq(x:is_pinned(), false)
  local e = check.raises("DeviceError", function() return x:pin_memory() end)
  assert(e.message:find("pin_memory(): pinned host memory needs CUDA, which is not available", 1, true), e.message)
  check.eq(x:is_pinned(), false)
  -- the option is accepted where no copy to the GPU is involved
  check.eq(rawequal(x:to("cpu", {non_blocking = true}), x), true)
  check.values(x:to(tc.float32, {non_blocking = true}), {{0, 1, 2}, {3, 4, 5}}, 0)
  local e2 = check.raises("DeviceError", function() return x:cuda({non_blocking = true}) end)
  assert(e2.message:find("CUDA is not available", 1, true), e2.message)
end

-- A loader asked to pin without a GPU gives the same batches, and says once on stderr that it
-- does not pin (a separate process: the note is once per process).
function T.without_gpu_a_pin_memory_loader_gives_its_batches_and_notes_it_once()
  if gpu() then check.skip("a CUDA device is present") end
  local ds = data.TensorDataset(tc.arange(1, 11), tc.arange(1, 11) * 10)
  local plain, pinned = {}, {}
  for b in data.DataLoader(ds, {batch_size = 4}) do plain[#plain + 1] = {b[1]:tolist(), b[2]:tolist()} end
  for b in data.DataLoader(ds, {batch_size = 4, pin_memory = true}) do
    check.eq(b[1]:is_pinned(), false)
    pinned[#pinned + 1] = {b[1]:tolist(), b[2]:tolist()}
  end
  check.eq(#pinned, 3)
  for i = 1, 3 do
    check.same(pinned[i][1], plain[i][1])
    check.same(pinned[i][2], plain[i][2])
  end
  local script = os.tmpname() .. ".lua"
  local f = assert(io.open(script, "w"))
  f:write([[
local tc = require "tc"
local data = tc.utils.data
local ds = data.TensorDataset(tc.arange(1, 5))
for _ = 1, 2 do
  local n = 0
  for b in data.DataLoader(ds, {batch_size = 2, pin_memory = true}) do n = n + b[1]:sum():item() end
  assert(n == 10)
end
print("done")
]])
  f:close()
  local out, code = check.run(check.TCRUN .. " " .. script)
  os.remove(script)
  check.eq(code, 0, out)
  local _, notes = out:gsub("DataLoader%(pin_memory = true%) is ignored: no CUDA device is available", "")
  check.eq(notes, 1, out)
end

-- ---- on a GPU ------------------------------------------------------------------------------------

-- Tens of milliseconds of work queued on the current stream: copies queued after it are still
-- pending while the test drops and re-pins their sources.
local function long_gpu_work()
  local a = tc.randn({4096, 4096}, {device = "cuda"})
  local x = a
  for _ = 1, 12 do x = x:mm(a) * (1 / 64) end
  return x
end

function T.pinned_copies_keep_values_dtype_and_shape()
  if not gpu() then check.skip("no CUDA device") end
  tc.manual_seed(3)
  for _, dt in ipairs {tc.float32, tc.float16, tc.int64, tc.uint8, tc.bool} do
    local x = (tc.randn(5, 7) * 10):to(dt)
    local v = x:t()  -- not contiguous
    local p = v:pin_memory()
    check.eq(p:is_pinned(), true, dt.name)
    check.eq(p.dtype, dt)
    check.same(p.shape, {7, 5})
    check.eq(p.device, "cpu")
    check.eq(p:equal(v), true, dt.name)
    check.eq(x:is_pinned(), false)
    check.eq(rawequal(p:pin_memory(), p), true, "pinning a pinned tensor gives it back")
    check.eq(p[{{2, 3}}]:is_pinned(), true, "a view of pinned memory is pinned")
    check.eq(p:clone():is_pinned(), false, "a clone is pageable")
    check.eq(p:to("cuda"):cpu():equal(v), true, dt.name)
  end
  check.eq(tc.zeros(0):pin_memory():is_pinned(), true)
  local c = tc.ones(3, {device = "cuda"})
  check.eq(c:is_pinned(), false)
  local e = check.raises("DeviceError", function() return c:pin_memory() end)
  assert(e.message:find("only CPU tensors can be pinned", 1, true), e.message)
end

-- Stress: many copies of freshly pinned tensors queued behind long work, the pinned tensors
-- dropped and collected at once and new ones pinned (of the same sizes, other values) while the
-- copies are still pending, then a kernel over every copy.
function T.async_copies_of_dropped_pinned_tensors_give_the_right_values()
  if not gpu() then check.skip("no CUDA device") end
  local n, copies = 64, {}
  long_gpu_work()
  for i = 1, n do
    local p = tc.full({64, 1024}, i):pin_memory()
    copies[i] = p:to("cuda", {non_blocking = true})
  end
  collectgarbage()
  collectgarbage()
  local others = {}
  for i = 1, n do others[i] = tc.full({64, 1024}, -i):pin_memory() end
  for i = 1, n do
    local y = copies[i] * 2 + 1
    check.eq(y:min():item(), 2 * i + 1, "copy " .. i)
    check.eq(y:max():item(), 2 * i + 1, "copy " .. i)
  end
  for i = 1, n do check.eq(others[i]:max():item(), -i, "pinned " .. i .. " untouched") end
  -- the same with x:cuda{non_blocking = true} and a DataLoader-like table of several tensors
  long_gpu_work()
  local ys = {}
  for i = 1, 16 do
    local b = {x = tc.full({8, 3, 32, 32}, i):pin_memory(), y = tc.full({8}, i, {dtype = tc.int64}):pin_memory()}
    ys[i] = {x = b.x:cuda({non_blocking = true}), y = b.y:cuda({non_blocking = true})}
  end
  collectgarbage()
  for i = 1, 16 do
    check.eq((ys[i].x:sum() / ys[i].x:numel()):item(), i)
    check.eq(ys[i].y:sum():item(), 8 * i)
  end
end

-- A blocking copy from pinned memory (no non_blocking) has finished when it returns: writing the
-- source right after does not change the copy.
function T.a_blocking_copy_from_pinned_memory_is_done_when_it_returns()
  if not gpu() then check.skip("no CUDA device") end
  local p = tc.full({256, 1024}, 7):pin_memory()
  long_gpu_work()
  local y = p:to("cuda")
  p:fill_(-1)
  check.eq(y:min():item(), 7)
  check.eq(y:max():item(), 7)
end

local Crops = require "data_worker_dataset"

function T.a_pin_memory_loader_gives_pinned_batches_equal_to_plain_ones()
  if not gpu() then check.skip("no CUDA device") end
  for _, w in ipairs {0, 2} do
    local plain = {}
    for b in data.DataLoader(Crops(10), {batch_size = 4, num_workers = w}) do plain[#plain + 1] = b end
    local i = 0
    for b in data.DataLoader(Crops(10), {batch_size = 4, num_workers = w, pin_memory = true}) do
      i = i + 1
      check.eq(b.x:is_pinned(), true, "x")
      check.eq(b.label:is_pinned(), true, "label")
      check.eq(b.x:equal(plain[i].x), true)
      check.eq(b.label:equal(plain[i].label), true)
      check.same(b.name, plain[i].name)
      check.eq(b.x:to("cuda", {non_blocking = true}):cpu():equal(plain[i].x), true)
    end
    check.eq(i, 3)
  end
end

return T
