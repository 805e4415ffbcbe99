-- tc.nn.parallel.DistributedDataParallel (nn.parallel in tc.nn), as torch's DDP:
--
--   dist.init_process_group{backend = "nccl"}              -- under tcrun --nproc-per-node N
--   local model = nn.parallel.DistributedDataParallel(net:to("cuda:" .. local_rank))
--   loss_fn(model(x), y):backward()                          -- gradients averaged over ranks
--   opt:step()
--
-- At wrap time every rank checks that all ranks wrap the same model (parameters and buffers: names,
-- order, shapes, dtypes; one exchange of their descriptions, as torch's
-- _verify_param_shape_across_processes), raising the same ValueError on every rank at once when
-- they differ, then every parameter and buffer is broadcast from rank 0. Parameters are put into
-- buckets of about `bucket_cap_mb` (25) MB, in reverse order (the order backward produces their
-- gradients). During backward, each parameter's post-accumulate-grad hook copies its gradient into
-- its bucket's flat buffer; a full bucket is all-reduced (average) at once, asynchronously and, on
-- CUDA, on a communication stream of its own, so communication overlaps the rest of the backward.
-- Buckets are launched in bucket order on every rank (NCCL needs the same order everywhere); at the
-- end of backward (an autograd callback) every bucket is waited for and its averages are copied
-- back into the parameters' .grad. A parameter that got no gradient in a backward takes part with
-- zeros (so every rank runs the same collectives) and receives the average.
-- `ddp:no_sync()` (a to-be-closed guard, or no_sync(fn)) skips the reduction: gradients accumulate
-- locally and are reduced by the first backward after it, as torch's no_sync.
-- broadcast_buffers (default true): buffers (batch-norm statistics) are broadcast from rank 0 at
-- every forward.
local tc = require "tc"
local nn = require "tc.nn"
local dist = require "tc.distributed"
local raise = tc._C.raise
local parallel = {}

local DDP = nn.Module:extend("DistributedDataParallel")

local known = {bucket_cap_mb = true, broadcast_buffers = true, find_unused_parameters = true}

local function device_key(t) return tostring(t.device) .. "|" .. tostring(t.dtype) end

-- The buckets: parameters in reverse order, split by device/dtype and by size.
local function make_buckets(params, cap_bytes)
  local buckets, open = {}, {}
  for i = #params, 1, -1 do
    local p = params[i]
    local key = device_key(p)
    local b = open[key]
    local bytes = p:numel() * p:element_size()
    if b == nil or (b.bytes > 0 and b.bytes + bytes > cap_bytes) then
      b = {params = {}, offsets = {}, numel = 0, bytes = 0, device = p.device, dtype = p.dtype}
      buckets[#buckets + 1] = b
      open[key] = b
    end
    b.params[#b.params + 1] = p
    b.offsets[#b.offsets + 1] = b.numel
    b.numel = b.numel + p:numel()
    b.bytes = b.bytes + bytes
  end
  for i, b in ipairs(buckets) do
    b.index = i
    b.flat = tc.zeros(b.numel, {dtype = b.dtype, device = b.device})
  end
  return buckets
end

-- "'2.weight' float32[2, 8]"
local function describe(name, t, is_param)
  local dims = {}
  for i = 1, t:dim() do dims[i] = tostring(t.shape[i]) end
  local s = ("'%s' %s[%s]"):format(name, tostring(t.dtype):gsub("^tc%.", ""), table.concat(dims, ", "))
  if is_param and not t.requires_grad then s = s .. " (requires_grad = false)" end
  return s
end

-- "rank 1" / "ranks 0, 2"
local function ranks_text(ranks)
  return (#ranks == 1 and "rank " or "ranks ") .. table.concat(ranks, ", ")
end

-- Groups ranks (0-based) by value(rank): "x on rank 0; y on ranks 1, 2".
local function by_rank(world, value)
  local order, ranks = {}, {}
  for r = 0, world - 1 do
    local v = value(r)
    if ranks[v] == nil then
      ranks[v] = {}
      order[#order + 1] = v
    end
    table.insert(ranks[v], r)
  end
  local parts = {}
  for _, v in ipairs(order) do parts[#parts + 1] = v .. " on " .. ranks_text(ranks[v]) end
  return table.concat(parts, "; ")
end

-- Every rank must wrap the same model: otherwise the broadcasts below and the buckets' all-reduces
-- would pair different tensors across ranks. Raises on every rank alike, naming what differs.
local function check_same_model(module)
  local lists = {parameter = {}, buffer = {}}
  for name, p in module:named_parameters() do table.insert(lists.parameter, describe(name, p, true)) end
  for name, b in module:named_buffers() do table.insert(lists.buffer, describe(name, b, false)) end
  local blob = {string.pack("<I4", #lists.parameter)}
  for _, kind in ipairs{"parameter", "buffer"} do
    for _, d in ipairs(lists[kind]) do blob[#blob + 1] = string.pack("<s4", d) end
  end
  local mine = table.concat(blob)
  local all = dist._all_gather_strings(mine)
  local same = true
  for _, other in ipairs(all) do same = same and other == mine end
  if same then return end
  local models = {}  -- rank + 1 -> {parameter = {...}, buffer = {...}}
  for r, b in ipairs(all) do
    local n, at = string.unpack("<I4", b)
    local m = {parameter = {}, buffer = {}}
    while at <= #b do
      local d
      d, at = string.unpack("<s4", b, at)
      table.insert(#m.parameter < n and m.parameter or m.buffer, d)
    end
    models[r] = m
  end
  local problems = {}
  for _, kind in ipairs{"parameter", "buffer"} do
    local most, counts_differ = 0, false
    for _, m in ipairs(models) do
      most = math.max(most, #m[kind])
      counts_differ = counts_differ or #m[kind] ~= #models[1][kind]
    end
    if counts_differ then
      problems[#problems + 1] = "the number of " .. kind .. "s differs: " ..
        by_rank(#models, function(r) return ("%d %ss"):format(#models[r + 1][kind], kind) end)
    end
    for i = 1, most do
      local differ = false
      for _, m in ipairs(models) do differ = differ or m[kind][i] ~= models[1][kind][i] end
      if differ then
        problems[#problems + 1] = ("%s %d differs: %s"):format(kind, i,
          by_rank(#models, function(r) return models[r + 1][kind][i] and kind .. " " .. models[r + 1][kind][i] or "no " .. kind end))
        break
      end
    end
  end
  raise("ValueError", "DistributedDataParallel: the ranks wrap different models: " .. table.concat(problems, "; and ")
    .. ". Every rank must wrap the same model: the same parameters and buffers, in the same order, with the "
    .. "same shapes and dtypes")
end

function DDP:__init(module, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not known[k] then raise("ValueError", ("DistributedDataParallel: unknown option '%s'"):format(tostring(k))) end
  end
  if not dist.is_initialized() then
    raise("ValueError", "DistributedDataParallel: the default process group is not initialized (call "
      .. "tc.distributed.init_process_group first)")
  end
  check_same_model(module)
  self.module = module
  local params = {}
  for _, p in ipairs(module:parameters()) do
    if p.requires_grad then params[#params + 1] = p end
  end
  local r = {params = params, log = {}, sync = true, broadcast_buffers = opts.broadcast_buffers ~= false,
             in_backward = false, comm = {}, world = dist.get_world_size()}
  rawset(self, "_reducer", r)
  -- the same starting point everywhere
  tc.no_grad(function()
    for _, p in ipairs(module:parameters()) do dist.broadcast(p, 0) end
    for _, b in ipairs(module:buffers()) do dist.broadcast(b, 0) end
  end)
  local cap_bytes = (opts.bucket_cap_mb or 25) * 1024 * 1024
  r.buckets = make_buckets(params, cap_bytes)
  -- tc.compile splits training graphs that use these parameters at bucket boundaries, so the
  -- compiled backward still overlaps the all-reduces (capture/ddp_split.h)
  if tc.compiler._ddp_mark_parameters then tc.compiler._ddp_mark_parameters(params, cap_bytes) end
  -- parameter index -> {bucket, offset}; hooks get a fresh userdata of the parameter, so
  -- parameters are told apart by their index, not by identity
  local index_of, slot = {}, {}
  for i, p in ipairs(params) do index_of[p] = i end
  for _, b in ipairs(r.buckets) do
    for k, p in ipairs(b.params) do slot[index_of[p]] = {bucket = b, offset = b.offsets[k], k = k} end
  end
  r.slot = slot
  for index, p in ipairs(params) do
    p:register_post_accumulate_grad_hook(function() self:_grad_ready(index) end)
  end
end

-- Buffers broadcast from rank 0 before a forward. Under tc.compile this runs uncompiled (one
-- graph break, and only for a model with buffers), as torch's DDP pre-forward under Dynamo.
local sync_buffers = tc.compiler.disable(function(buffers)
  tc.no_grad(function()
    for _, b in ipairs(buffers) do dist.broadcast(b, 0) end
  end)
end)

function DDP:forward(...)
  local r = rawget(self, "_reducer")
  if r.broadcast_buffers and r.world > 1 then
    local buffers = self.module:buffers()
    if #buffers > 0 then sync_buffers(buffers) end
  end
  return self.module(...)
end

-- A communication stream per CUDA device (collectives overlap the backward's kernels).
local function comm_stream(r, device)
  if not device:find("^cuda") then return nil end
  local s = r.comm[device]
  if s == nil then
    s = tc.cuda.Stream(device)
    r.comm[device] = s
  end
  return s
end

local function launch(r, b)
  r.log[#r.log + 1] = "allreduce " .. b.index
  local s = comm_stream(r, b.device)
  if s then
    s:wait_stream(tc.cuda.current_stream(b.device))  -- the bucket's copies are done
    local _ <close> = tc.cuda.use_stream(s)
    b.work = dist.all_reduce(b.flat, {op = "avg", async_op = true})
  else
    b.work = dist.all_reduce(b.flat, {op = "avg", async_op = true})
  end
end

-- Launches the ready buckets in bucket order.
local function launch_ready(r)
  while r.next_launch <= #r.buckets and r.buckets[r.next_launch].pending == 0 do
    launch(r, r.buckets[r.next_launch])
    r.next_launch = r.next_launch + 1
  end
end

function DDP:_begin_backward(r)
  r.in_backward = true
  r.next_launch = 1
  for _, b in ipairs(r.buckets) do
    b.pending, b.work, b.seen = #b.params, nil, {}  -- seen[k]: params[k]'s grad arrived
  end
  tc.autograd.queue_callback(function() self:_finish_backward() end)
end

function DDP:_grad_ready(index)
  local r = rawget(self, "_reducer")
  if not r.sync then return end
  if not r.in_backward then self:_begin_backward(r) end
  local p, s = r.params[index], r.slot[index]
  local b = s.bucket
  -- autograd sums a parameter's gradients from all its uses (tied weights) and runs this hook once
  assert(not b.seen[s.k], "DistributedDataParallel: a gradient hook ran twice in one backward")
  b.seen[s.k] = true
  r.log[#r.log + 1] = "grad " .. index
  tc.no_grad(function() b.flat:narrow(1, s.offset + 1, p:numel()):copy_(p.grad:reshape(-1)) end)
  b.pending = b.pending - 1
  launch_ready(r)
end

function DDP:_finish_backward()
  local r = rawget(self, "_reducer")
  r.in_backward = false
  tc.no_grad(function()
    -- parameters without a gradient in this backward take part with zeros
    for _, b in ipairs(r.buckets) do
      if b.pending > 0 then
        for k, p in ipairs(b.params) do
          if not b.seen[k] then b.flat:narrow(1, b.offsets[k] + 1, p:numel()):zero_() end
        end
        b.pending = 0
      end
    end
    launch_ready(r)
    for _, b in ipairs(r.buckets) do
      b.work:wait()
      for k, p in ipairs(b.params) do
        local avg = b.flat:narrow(1, b.offsets[k] + 1, p:numel()):view(p.shape)
        if p.grad == nil then p.grad = avg:clone() else p.grad:copy_(avg) end
      end
    end
  end)
  r.log[#r.log + 1] = "done"
end

-- ddp:no_sync(): `local _ <close> = ddp:no_sync()` or ddp:no_sync(fn, ...): backward passes inside
-- accumulate gradients locally; the next backward outside reduces the accumulated gradients.
function DDP:no_sync(fn, ...)
  local r = rawget(self, "_reducer")
  local prev = r.sync
  r.sync = false
  local guard = setmetatable({}, {__close = function() r.sync = prev end})
  if fn == nil then return guard end
  local _ <close> = guard
  return fn(...)
end

-- The reducer's record of the last backwards ("grad I" when parameter I's gradient was ready,
-- "allreduce B" when bucket B was launched, "done"), for tests of the overlap; cleared by reading.
function DDP:_comm_log()
  local r = rawget(self, "_reducer")
  local log = r.log
  r.log = {}
  return log
end

-- The buckets' parameter indices (1-based, in model:parameters() order), for tests and explain.
function DDP:_bucket_params()
  local r = rawget(self, "_reducer")
  local out = {}
  for i in ipairs(r.buckets) do out[i] = {} end
  for index, s in ipairs(r.slot) do out[s.bucket.index][s.k] = index end
  return out
end

parallel.DistributedDataParallel = DDP
return parallel
