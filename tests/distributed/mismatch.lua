-- Run by run.sh under `tcrun --nproc-per-node 2` (args: [cpu|cuda [case]]): collectives whose
-- calls disagree across ranks (dtype, size, shape, reduce op, broadcast source, kind of
-- collective) raise the same ValueError on every rank, naming what each rank called, before any
-- data moves (on nccl: before the NCCL call, which would hang or mix bytes), and leave every
-- tensor as it was; afterwards the group still works. Without a case, every case runs in turn.
local tc = require "tc"
local dist = require "tc.distributed"
local device, only = arg[1] or "cpu", arg[2]
if device == "cuda" then device = "cuda:" .. os.getenv("LOCAL_RANK") end
local backend = device == "cpu" and "gloo" or "nccl"
local bad_ok, bad = pcall(dist.init_process_group, {backend = backend, check_collectives = "yes"})
assert(not bad_ok and bad.kind == "ValueError" and bad.message:find("check_collectives", 1, true), tostring(bad))
-- gloo checks every collective whatever check_collectives says (the check rides in its exchange)
dist.init_process_group{backend = backend, timeout = 20, check_collectives = backend == "nccl"}
local rank = dist.get_rank()
assert(dist.get_world_size() == 2, "mismatch.lua runs on 2 ranks")
local function pick(a, b) return rank == 0 and a or b end
local function on(t) return t:to(device) end

-- case -> {function making this rank's call, a text rank 0's message names, one rank 1's names}
local cases = {
  all_reduce_dtype = {function()
    local t = on(tc.ones(3, {dtype = pick(tc.float32, tc.float64)}))
    return t, function() dist.all_reduce(t) end
  end, "float32[3]", "float64[3]"},
  all_reduce_size = {function()
    local t = on(tc.ones(pick(3, 4)))
    return t, function() dist.all_reduce(t) end
  end, "float32[3]", "float32[4]"},
  all_reduce_shape = {function()
    local t = pick(on(tc.ones(2, 3)), on(tc.ones(3, 2)))
    return t, function() dist.all_reduce(t) end
  end, "float32[2, 3]", "float32[3, 2]"},
  all_reduce_op = {function()
    local t = on(tc.tensor({1.0 + rank, 2.0}))
    return t, function() dist.all_reduce(t, pick("sum", "max")) end
  end, "sum", "max"},
  broadcast_size = {function()
    local t = on(tc.full({pick(2, 3)}, rank, {dtype = tc.float32}))
    return t, function() dist.broadcast(t, 0) end
  end, "float32[2]", "float32[3]"},
  broadcast_src = {function()
    local t = on(tc.full({2}, rank, {dtype = tc.float32}))
    return t, function() dist.broadcast(t, pick(0, 1)) end
  end, "src 0", "src 1"},
  all_gather_dtype = {function()
    local t = on(tc.ones(2, {dtype = pick(tc.float32, tc.int32)}))
    local list = {on(tc.zeros(2, {dtype = t.dtype})), on(tc.zeros(2, {dtype = t.dtype}))}
    return list[1], function() dist.all_gather(list, t) end
  end, "float32[2]", "int32[2]"},
  reduce_scatter_size = {function()
    local n = pick(2, 3)
    local out = on(tc.zeros(n))
    return out, function() dist.reduce_scatter(out, {on(tc.ones(n)), on(tc.ones(n))}) end
  end, "float32[2]", "float32[3]"},
  different_collectives = {function()
    local t = on(tc.ones(3))
    return t, function() if rank == 0 then dist.all_reduce(t) else dist.broadcast(t, 0) end end
  end, "all_reduce", "broadcast"},
  barrier_against_all_reduce = {function()
    local t = on(tc.ones(3))
    return t, function() if rank == 0 then dist.barrier() else dist.all_reduce(t) end end
  end, "barrier", "all_reduce"},
}
local order = {"all_reduce_dtype", "all_reduce_size", "all_reduce_shape", "all_reduce_op", "broadcast_size",
               "broadcast_src", "all_gather_dtype", "reduce_scatter_size", "different_collectives",
               "barrier_against_all_reduce"}

local function run(name)
  local c = cases[name]
  local t, call = c[1]()
  local before = t:clone()
  local ok, e = pcall(call)
  if ok then error(("rank %d: %s: the mismatched collective returned as if it had worked"):format(rank, name)) end
  local msg = type(e) == "table" and e.message or tostring(e)
  if type(e) ~= "table" or e.kind ~= "ValueError" or not msg:find(c[2], 1, true) or not msg:find(c[3], 1, true)
     or not msg:find("rank 0", 1, true) or not msg:find("rank 1", 1, true) then
    error(("rank %d: %s: expected a ValueError naming both ranks' calls, got %s"):format(rank, name, tostring(e)))
  end
  if not tc.allclose(t:cpu():double(), before:cpu():double(), {rtol = 0, atol = 0}) then error(("rank %d: %s: the tensor changed"):format(rank, name)) end
  -- the group is still in step: a matching collective after the failed one works
  local s = on(tc.tensor({rank + 1.0}))
  dist.all_reduce(s)
  assert(s:item() == 3, ("rank %d: %s: the group is out of step afterwards"):format(rank, name))
  print(("rank %d: mismatch %s ok"):format(rank, name))
end

if only then run(only) else for _, name in ipairs(order) do run(name) end end
dist.destroy_process_group()
print(("rank %d: mismatch all ok"):format(rank))
