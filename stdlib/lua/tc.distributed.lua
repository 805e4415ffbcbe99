-- tc.distributed: process groups and collectives, as torch.distributed (LUA_API.md §9).
--
--   local dist = require "tc.distributed"      -- or tc.distributed
--   dist.init_process_group{backend = "nccl"}  -- RANK, WORLD_SIZE, MASTER_ADDR/PORT from tcrun
--   dist.all_reduce(grad, dist.ReduceOp.AVG)   -- in place
--   local work = dist.all_reduce(t, {op = "sum", async_op = true}); work:wait()
--   dist.destroy_process_group()
--
-- Backends: "nccl" for CUDA tensors (libnccl.so.2, one GPU per rank: LOCAL_RANK's), "gloo" for
-- CPU tensors (tc's own transport through the TCP store; for tests and small CPU runs, not for
-- bandwidth). Collectives run on the tensor's device's current stream; `async_op = true` returns a
-- Work whose wait() makes the current stream wait for it.
local tc = require "tc"
local C, raise = tc._C, tc._C.raise
local dist = {}

dist.ReduceOp = {SUM = "sum", AVG = "avg", MAX = "max", MIN = "min", PRODUCT = "product"}
local op_names = {sum = true, avg = true, max = true, min = true, product = true}

local function env_int(name)
  local v = os.getenv(name)
  if v == nil then return nil end
  local n = math.tointeger(tonumber(v))
  if n == nil then raise("ValueError", ("tc.distributed: environment variable %s=%q is not an integer"):format(name, v)) end
  return n
end

-- init_process_group{backend =, init_method = "env://" | "tcp://host:port", rank =, world_size =,
-- timeout = seconds (default 300), check_collectives = true}
-- Every collective is checked across ranks (kind, dtype, shape, op, source) before data moves: a
-- mismatch raises the same ValueError on every rank. On gloo the check rides in the exchange; on
-- nccl it is one store round trip per collective, which check_collectives = false skips (then
-- mismatched calls are undefined, as in NCCL itself).
function dist.init_process_group(opts)
  opts = opts or {}
  if type(opts) == "string" then opts = {backend = opts} end
  if type(opts) ~= "table" then raise("ValueError", "init_process_group: expected an options table") end
  for k in pairs(opts) do
    if k ~= "backend" and k ~= "init_method" and k ~= "rank" and k ~= "world_size" and k ~= "timeout"
       and k ~= "check_collectives" then
      raise("ValueError", ("init_process_group: unknown option '%s'"):format(tostring(k)))
    end
  end
  local backend = opts.backend or (tc.cuda.is_available() and "nccl" or "gloo")
  local rank = opts.rank or env_int("RANK")
  local world = opts.world_size or env_int("WORLD_SIZE")
  local host, port = os.getenv("MASTER_ADDR"), env_int("MASTER_PORT")
  local method = opts.init_method or "env://"
  if method:sub(1, 6) == "tcp://" then
    host, port = method:sub(7):match("^%[?([^%]]*)%]?:(%d+)$")
    if not host then raise("ValueError", ("init_process_group: init_method %q is not tcp://host:port"):format(method)) end
    port = math.tointeger(tonumber(port))
  elseif method ~= "env://" then
    raise("ValueError", ("init_process_group: init_method %q is not supported (env://, tcp://host:port)"):format(method))
  end
  if rank == nil or world == nil then
    raise("ValueError", "init_process_group: rank and world_size are unknown: run under `tcrun --nproc-per-node N` "
      .. "(which sets RANK and WORLD_SIZE) or pass {rank =, world_size =}")
  end
  if host == nil or port == nil then
    raise("ValueError", "init_process_group: MASTER_ADDR and MASTER_PORT are not set: run under `tcrun --nproc-per-node N` "
      .. "or pass init_method = \"tcp://host:port\"")
  end
  local check = opts.check_collectives
  if check ~= nil and type(check) ~= "boolean" then
    raise("ValueError", "init_process_group: check_collectives must be a boolean, got " .. type(check))
  end
  C.dist_init(backend, host, port, rank, world, opts.timeout or 300, check ~= false)
end

function dist.is_available() return true end
function dist.is_nccl_available() return (C.dist_nccl_available()) end
function dist.is_initialized() return C.dist_info() ~= nil end
function dist.get_rank()
  local r = C.dist_info()
  if r == nil then raise("ValueError", "get_rank: the default process group is not initialized") end
  return r
end
function dist.get_world_size()
  local _, w = C.dist_info()
  if w == nil then raise("ValueError", "get_world_size: the default process group is not initialized") end
  return w
end
function dist.get_backend()
  local _, _, b = C.dist_info()
  if b == nil then raise("ValueError", "get_backend: the default process group is not initialized") end
  return b
end
function dist.destroy_process_group() C.dist_destroy() end
function dist.barrier() C.dist_barrier() end
-- Every rank's string s, as a list in rank order (a collective: every rank calls it). Host-side
-- metadata only (DistributedDataParallel's check that every rank wraps the same model).
function dist._all_gather_strings(s)
  if type(s) ~= "string" then raise("ValueError", "_all_gather_strings: expected a string") end
  return C.dist_all_gather_bytes(s)
end

-- The op and async flag of `x`: an op name / dist.ReduceOp value, or {op =, async_op =}.
local function op_opts(x, what)
  local op, async = "sum", false
  if type(x) == "string" then
    op = x
  elseif type(x) == "table" then
    op, async = x.op or "sum", x.async_op or false
  elseif x ~= nil then
    raise("ValueError", what .. ": expected an op name or an options table")
  end
  op = type(op) == "string" and op:lower() or op
  if not op_names[op] then raise("ValueError", ("%s: unknown reduce op %s (sum, avg, max, min, product)"):format(what, tostring(op))) end
  return op, async
end

local function async_of(x)
  if type(x) == "table" then return x.async_op or false end
  return false
end

function dist.all_reduce(t, op) local o, a = op_opts(op, "all_reduce"); return C.dist_all_reduce(t, o, a) end
function dist.broadcast(t, src, opts) return C.dist_broadcast(t, src, async_of(opts)) end

-- all_gather(list, t): list[r] (rank r's tensor, r = 1-based index - 1) filled in place.
function dist.all_gather(list, t, opts)
  local w = dist.get_world_size()
  if type(list) ~= "table" or #list ~= w then raise("ValueError", ("all_gather: expected a list of %d tensors"):format(w)) end
  local flat = tc.empty({w * t:numel()}, {dtype = t.dtype, device = t.device})
  C.dist_all_gather(flat, t:contiguous(), false)
  for r = 1, w do list[r]:copy_(flat:narrow(1, (r - 1) * t:numel() + 1, t:numel()):view(t.shape)) end
  if async_of(opts) then return {wait = function() return true end, is_completed = function() return true end} end
end
function dist.all_gather_into_tensor(out, t, opts) return C.dist_all_gather(out, t, async_of(opts)) end

-- reduce_scatter(out, list [, op]): out = the reduction over ranks of each rank's list[rank+1].
function dist.reduce_scatter(out, list, op)
  local w = dist.get_world_size()
  if type(list) ~= "table" or #list ~= w then raise("ValueError", ("reduce_scatter: expected a list of %d tensors"):format(w)) end
  local flat = {}
  for r = 1, w do flat[r] = list[r]:reshape(-1) end
  local o, a = op_opts(op, "reduce_scatter")
  return C.dist_reduce_scatter(out, tc.cat(flat), o, a)
end
function dist.reduce_scatter_tensor(out, input, op)
  local o, a = op_opts(op, "reduce_scatter_tensor")
  return C.dist_reduce_scatter(out, input, o, a)
end

-- The group's key-value store (set/get strings, add integers): for small host-side exchanges.
dist.store = {
  set = function(k, v) C.dist_store_set(k, v) end,
  get = function(k) return C.dist_store_get(k) end,
  add = function(k, n) return C.dist_store_add(k, n or 1) end,
}

-- DistributedSampler(n, {num_replicas =, rank =, shuffle = true, seed = 0, drop_last = false}):
-- the share of dataset indices 1..n this rank takes, as torch.utils.data.DistributedSampler:
-- every rank gets ceil(n / replicas) indices (the list padded by repeating its start), or
-- floor(n / replicas) with drop_last; with shuffle, a permutation that depends only on seed +
-- epoch (the same on every rank). sampler:set_epoch(e) before each epoch; sampler:indices()
-- returns the list; `for i in sampler:iter() do` walks it; #sampler is its length.
local Sampler = {}
Sampler.__index = Sampler
Sampler.__name = "tc.distributed.DistributedSampler"

local function positive_int(v, what)
  if math.type(v) ~= "integer" or v < 0 then raise("ValueError", ("DistributedSampler: %s must be an integer >= 0, got %s"):format(what, tostring(v))) end
  return v
end

function dist.DistributedSampler(n, opts)
  opts = opts or {}
  positive_int(n, "the dataset size")
  local replicas = opts.num_replicas or (dist.is_initialized() and dist.get_world_size()) or nil
  local rank = opts.rank or (dist.is_initialized() and dist.get_rank()) or nil
  if replicas == nil or rank == nil then
    raise("ValueError", "DistributedSampler: num_replicas and rank are unknown: initialize the process group or pass them")
  end
  positive_int(replicas, "num_replicas")
  positive_int(rank, "rank")
  if replicas < 1 or rank >= replicas then raise("ValueError", ("DistributedSampler: rank %d is not in [0, %d)"):format(rank, replicas)) end
  local shuffle = opts.shuffle
  if shuffle == nil then shuffle = true end
  local drop_last = opts.drop_last or false
  local count = drop_last and n // replicas or -(-n // replicas)
  return setmetatable({n = n, replicas = replicas, rank = rank, shuffle = shuffle, seed = opts.seed or 0,
                       drop_last = drop_last, count = count, epoch = 0}, Sampler)
end

function Sampler:set_epoch(e) self.epoch = positive_int(e, "the epoch") end
function Sampler:__len() return self.count end

-- splitmix64 over Lua integers (wrapping arithmetic): the same stream on every rank.
local function splitmix(state)
  return function()
    state = state + 0x9E3779B97F4A7C15
    local z = state
    z = (z ~ (z >> 30)) * -4658895280553007687  -- 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * -7723592293110705685  -- 0x94D049BB133111EB
    return z ~ (z >> 31)
  end
end

function Sampler:indices()
  local list = {}
  for i = 1, self.n do list[i] = i end
  if self.shuffle then  -- Fisher-Yates with an unbiased bound (rejection sampling)
    local next_u = splitmix(self.seed * 1000003 + self.epoch)
    for i = self.n, 2, -1 do
      local limit = (-1 >> 1) - ((-1 >> 1) % i + 1) % i
      local r
      repeat r = next_u() >> 1 until r <= limit
      local j = r % i + 1
      list[i], list[j] = list[j], list[i]
    end
  end
  local total = self.count * self.replicas
  if self.n > 0 then
    for i = self.n + 1, total do list[i] = list[(i - 1) % self.n + 1] end  -- pad by repeating
  end
  local mine = {}
  for k = 0, self.count - 1 do mine[k + 1] = list[self.rank + 1 + k * self.replicas] end
  return mine
end

function Sampler:iter()
  local list, i = self:indices(), 0
  return function()
    i = i + 1
    return list[i]
  end
end

return dist
