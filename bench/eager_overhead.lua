-- Per-op overhead of tiny eager ops from Lua (µs per op). Run: tcrun bench/eager_overhead.lua [N [DEVICE]]
-- (DEVICE "cpu" by default, or "cuda": host time per op, the GPU synchronized after each batch)
-- Prints "name value" lines that bench/run_eager_cpu.sh puts next to PyTorch's.
local tc = require "tc"
local N = tonumber(arg and arg[1]) or 200000
local device = arg and arg[2] or "cpu"
local x = tc.ones(1, {device = device})
local function sync() if device ~= "cpu" then tc.cuda.synchronize() end end

local function measure(name, fn)
  fn()  -- warm up
  local best = math.huge
  for _ = 1, 3 do
    local t0 = tc.utils.perf_counter()
    for _ = 1, N do fn() end
    sync()
    best = math.min(best, tc.utils.perf_counter() - t0)
  end
  print(string.format("%s %.3f", name, best / N * 1e6))
end

measure("add_tensor_tensor", function() return x + x end)
measure("mul_tensor_number", function() return x * 2 end)
measure("relu_method", function() return x:relu() end)
