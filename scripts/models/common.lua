-- Shared helpers of the model zoo: running a model's main when the file is the script, timing.
local tc = require "tc"
local common = {}

-- True when `file` ("resnet.lua") is the script tcrun was started with.
function common.is_main(file)
  return arg ~= nil and type(arg[0]) == "string" and arg[0]:sub(-#file) == file
end

-- Runs forward once to warm up, then `iters` times; prints output shape and ms per call.
function common.time_forward(name, model, input, iters)
  iters = iters or 3
  model:eval()
  local _ <close> = tc.no_grad()
  local out = model(input)
  if input.device ~= "cpu" then tc.cuda.synchronize() end
  local t0 = tc.utils.perf_counter()
  for _ = 1, iters do out = model(input) end
  if input.device ~= "cpu" then tc.cuda.synchronize() end
  local ms = (tc.utils.perf_counter() - t0) / iters * 1e3
  print(string.format("%s: input %s -> output %s, %.2f ms per forward", name, tostring(input:size()),
    tostring(out:size()), ms))
  return out, ms
end

return common
