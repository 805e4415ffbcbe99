-- Run by run.sh under `tcrun --nproc-per-node N`: every collective of tc.distributed on the
-- group's device (cpu: backend gloo; cuda: backend nccl), checked on every rank.
local dist = require "tc.distributed"
local tc = require "tc"
local device = arg[1] or "cpu"
-- one GPU per rank, as torchrun scripts do with LOCAL_RANK
if device == "cuda" then device = "cuda:" .. os.getenv("LOCAL_RANK") end
dist.init_process_group{backend = device == "cpu" and "gloo" or "nccl"}
local rank, world = dist.get_rank(), dist.get_world_size()
assert(rank == tonumber(os.getenv("RANK")) and world == tonumber(os.getenv("WORLD_SIZE")))
assert(dist.is_initialized() and dist.get_backend() == (device == "cpu" and "gloo" or "nccl"))
local function on(t) return t:to(device) end
local function check(got, want, what)
  local g = got:cpu()
  if g.dtype ~= want.dtype or not tc.allclose(g:double(), want:double(), {rtol = 0, atol = 0}) then
    error(("rank %d: %s: got %s, want %s"):format(rank, what, tostring(got:cpu()), tostring(want)), 2)
  end
end
local total = world * (world - 1) / 2  -- sum of ranks

-- all_reduce: sum, avg, max, min, product; float and integer dtypes; in place
local x = on(tc.tensor({rank, rank + 1, 10 * rank}, {dtype = tc.float32}))
dist.all_reduce(x)
check(x, tc.tensor({total, total + world, 10 * total}, {dtype = tc.float32}), "all_reduce sum")
local a = on(tc.tensor({rank * 2.0}))
dist.all_reduce(a, dist.ReduceOp.AVG)
check(a, tc.tensor({(world - 1) * 1.0}), "all_reduce avg")
local m = on(tc.tensor({rank, -rank}, {dtype = tc.int64}))
dist.all_reduce(m, "max")
check(m, tc.tensor({world - 1, 0}, {dtype = tc.int64}), "all_reduce max")
local n = on(tc.tensor({rank, -rank}, {dtype = tc.int32}))
dist.all_reduce(n, {op = "min"})
check(n, tc.tensor({0, 1 - world}, {dtype = tc.int32}), "all_reduce min")
local p = on(tc.tensor({rank + 1.0}, {dtype = tc.float64}))
dist.all_reduce(p, dist.ReduceOp.PRODUCT)
local fact = 1
for r = 1, world do fact = fact * r end
check(p, tc.tensor({fact}, {dtype = tc.float64}), "all_reduce product")

-- async: a Work whose wait() orders later work after it
local w = dist.all_reduce(on(tc.ones(4)), {async_op = true})
assert(w:wait() == true)

-- broadcast from the last rank
local b = on(tc.full({2, 2}, rank))
dist.broadcast(b, world - 1)
check(b, tc.full({2, 2}, world - 1), "broadcast")

-- all_gather into a list and into one tensor
local list = {}
for r = 1, world do list[r] = on(tc.zeros(2)) end
dist.all_gather(list, on(tc.tensor({rank, rank * rank}, {dtype = tc.float32})))
for r = 1, world do check(list[r], tc.tensor({r - 1, (r - 1) * (r - 1)}, {dtype = tc.float32}), "all_gather[" .. r .. "]") end
local flat = on(tc.zeros(world * 2))
dist.all_gather_into_tensor(flat, on(tc.tensor({rank, 1.0})))
for r = 1, world do check(flat[{{2 * r - 1, 2 * r}}], tc.tensor({r - 1, 1.0}), "all_gather_into_tensor") end

-- reduce_scatter: rank r gets the sum over ranks of block r (each rank's block r is r + rank)
local blocks = {}
for r = 1, world do blocks[r] = on(tc.full({3}, (r - 1) + rank, {dtype = tc.float32})) end
local out = on(tc.zeros(3))
dist.reduce_scatter(out, blocks)
check(out, tc.full({3}, world * rank + total, {dtype = tc.float32}), "reduce_scatter")

-- errors
local ok, err = pcall(dist.all_reduce, on(tc.ones(2)), "median")
assert(not ok and tostring(err):find("unknown reduce op", 1, true), tostring(err))
ok, err = pcall(dist.all_reduce, on(tc.ones(4, 4)):t():contiguous():t())
assert(not ok and tostring(err):find("contiguous", 1, true), tostring(err))
ok, err = pcall(dist.all_reduce, on(tc.tensor({1, 2})), "avg")
assert(not ok and tostring(err):find("floating", 1, true), tostring(err))

-- the store, for host-side exchanges
dist.store.set("hello/" .. rank, "from " .. rank)
assert(dist.store.get("hello/" .. ((rank + 1) % world)) == "from " .. ((rank + 1) % world))

dist.barrier()
dist.destroy_process_group()
assert(not dist.is_initialized())
print(("rank %d of %d: collectives ok"):format(rank, world))
