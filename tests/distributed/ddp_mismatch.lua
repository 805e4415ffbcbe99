-- Run by run.sh under `tcrun --nproc-per-node 2` (args: case | "uncaught"): DistributedDataParallel
-- over models that differ across ranks (a parameter's shape, its dtype, the number of parameters,
-- a buffer) raises the same ValueError on every rank at wrap time, naming the parameter and what
-- each rank has; the group stays usable. "uncaught": the error is not caught, with the default
-- timeout: every rank must stop at once (run.sh checks the exit and the message).
local tc = require "tc"
local nn = tc.nn
local dist = require "tc.distributed"
local case = arg[1] or "all"
dist.init_process_group{backend = "gloo", timeout = case ~= "uncaught" and 20 or nil}  -- uncaught: 300 s
local rank = dist.get_rank()
local function pick(a, b) return rank == 0 and a or b end

-- case -> {model maker, texts the message must hold}
local cases = {
  shape = {function() return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, pick(2, 3))) end,
           {"'3.weight'", "float32[2, 8]", "float32[3, 8]", "rank 0", "rank 1"}},
  dtype = {function()
    local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return rank == 1 and m:double() or m
  end, {"'1.weight'", "float32[8, 4]", "float64[8, 4]", "rank 0", "rank 1"}},
  count = {function()
    local layers = {nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)}
    if rank == 1 then layers[#layers + 1] = nn.Linear(2, 2) end
    return nn.Sequential(table.unpack(layers))
  end, {"4 parameters", "6 parameters", "'4.weight'", "rank 0", "rank 1"}},
  buffer = {function()
    local m = nn.Sequential(nn.Linear(4, 2))
    m:register_buffer("scale", tc.ones(pick(2, 3)))
    return m
  end, {"buffer 'scale'", "float32[2]", "float32[3]", "rank 0", "rank 1"}},
}

if case == "uncaught" then
  nn.parallel.DistributedDataParallel(cases.shape[1]())
  print("unreachable")
  return
end

local names = case == "all" and {"shape", "dtype", "count", "buffer"} or {case}
for _, name in ipairs(names) do
  local c = cases[name]
  local ok, e = pcall(nn.parallel.DistributedDataParallel, c[1]())
  if ok then error(("rank %d: %s: DDP wrapped models that differ across ranks"):format(rank, name)) end
  local msg = type(e) == "table" and e.message or tostring(e)
  local good = type(e) == "table" and e.kind == "ValueError"
  for _, want in ipairs(c[2]) do good = good and msg:find(want, 1, true) ~= nil end
  if not good then error(("rank %d: %s: expected a ValueError naming %s, got %s"):format(rank, name, table.concat(c[2], ", "), tostring(e))) end
  local s = tc.tensor({rank + 1.0})
  dist.all_reduce(s)  -- the group is still in step
  assert(s:item() == 3, ("rank %d: %s: the group is out of step afterwards"):format(rank, name))
  print(("rank %d: ddp mismatch %s ok"):format(rank, name))
end
dist.destroy_process_group()
print(("rank %d: ddp mismatch all ok"):format(rank))
