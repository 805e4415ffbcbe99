-- Eager CPU forward time of the model zoo (scripts/models), no grad, eval mode.
-- Usage: tcrun bench/models_cpu.lua [THREADS [MODEL...]]   (run from the repository root)
-- Prints one line per model: "<name> <best ms> <median ms> <iterations>" (best of N: the least
-- disturbed figure on a shared machine); bench/run_models_cpu.sh puts
-- these next to PyTorch's (bench/peer_torch_models.py, same models, inputs and threads).
-- TC_BENCH_BACKEND=NAME: each model runs compiled with that backend (tc.compile), and a fifth
-- column gives the first call's ms (trace and backend compile included); bench/run_codegen_cpu.sh.
local tc = require "tc"
local nn = require "tc.nn"
package.path = "bench/?.lua;scripts/models/?.lua;" .. package.path
local common = require "bench_common"

local threads = tonumber(arg[1]) or tc.get_num_threads()
tc.set_num_threads(threads)
tc.manual_seed(0)

-- name -> {make(), input(), iterations}
local models = {
  {"seed_64_layers", function() return require("seed_layers").Model() end, function() return tc.randn(10, 10) end, 200},
  {"my_module", function() return require("my_module").MyModule() end, function() return tc.randn(10, 100) end, 500},
  {"resnet18", function() return require("resnet").resnet18() end, function() return tc.randn(2, 3, 128, 128) end, 5},
  {"resnet50", function() return require("resnet").resnet50() end, function() return tc.randn(2, 3, 128, 128) end, 3},
  {"densenet121", function() return require("densenet").densenet121() end, function() return tc.randn(2, 3, 128, 128) end, 3},
  {"inception_v3", function() return require("inception").inception_v3() end, function() return tc.randn(1, 3, 299, 299) end, 3},
  {"gpt2_small", function() return require("gpt2").gpt2() end, function() return tc.randint(1, 50258, {2, 64}) end, 3},
}

local backend = os.getenv("TC_BENCH_BACKEND")
local wanted = {}
for i = 2, #arg do wanted[arg[i]] = true end

local median = common.median

for _, m in ipairs(models) do
  local name, make, input, iters = m[1], m[2], m[3], m[4]
  if next(wanted) == nil or wanted[name] then
    local model = make()
    model:eval()
    local x = input()
    local run = backend and tc.compile(model, {backend = backend}) or model
    tc.no_grad(function()
      local t0 = tc.utils.perf_counter()
      run(x)  -- warm-up (compiled: the first call traces and compiles)
      local first = (tc.utils.perf_counter() - t0) * 1e3
      local times = {}
      for i = 1, iters do
        t0 = tc.utils.perf_counter()
        run(x)
        times[i] = (tc.utils.perf_counter() - t0) * 1e3
      end
      local best = math.min(table.unpack(times))
      print(("%s %.4f %.4f %d"):format(name, best, median(times), iters) .. (backend and (" %.1f"):format(first) or ""))
      io.stdout:flush()
    end)
    model = nil
    collectgarbage()
  end
end
