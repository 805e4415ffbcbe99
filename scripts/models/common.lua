-- Shared helpers of the model zoo: running a model's main when the file is the script, timing.
local tc = require "tc"
local common = {}

-- True when `file` ("resnet.lua") is the script tcrun was started with.
function common.is_main(file)
  return arg ~= nil and type(arg[0]) == "string" and arg[0]:match("[^/]*$") == file
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

-- Command-line options `--name value` or `--name=value` over `defaults` (a table of name -> default;
-- a number default takes a number, an integer default an integer). An unknown or malformed option is an
-- error naming the script and the known options.
function common.options(script, defaults, args)
  args = args or arg or {}
  local names = {}
  for k in pairs(defaults) do names[#names + 1] = "--" .. k end
  table.sort(names)
  local function bad(what) error(("%s: %s (options: %s)"):format(script, what, table.concat(names, ", ")), 0) end
  local opt, i = {}, 1
  for k, v in pairs(defaults) do opt[k] = v end
  while i <= #args do
    local a = args[i]
    local k, v = a:match("^%-%-([%w_]+)=(.*)$")
    if not k then k, v, i = a:match("^%-%-([%w_]+)$"), args[i + 1], i + 1 end
    if not k or defaults[k] == nil then bad(("unknown argument '%s'"):format(a)) end
    if v == nil then bad(("--%s needs a value"):format(k)) end
    if type(defaults[k]) == "number" then
      local n = tonumber(v)
      if math.type(defaults[k]) == "integer" then n = n and math.tointeger(n) end
      if not n then bad(("--%s takes %s, got '%s'"):format(k, math.type(defaults[k]) == "integer" and "an integer" or "a number", v)) end
      v = n
    end
    opt[k] = v
    i = i + 1
  end
  return opt
end

return common
