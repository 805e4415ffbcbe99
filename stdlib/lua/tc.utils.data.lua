-- tc.utils.data: torch.utils.data for Lua. Datasets (map-style with 1-based get(i), iterable,
-- TensorDataset, Subset, ConcatDataset, random_split), samplers, a seedable Generator, default
-- collation and the DataLoader (`for batch in loader do`), whose num_workers > 0 loads batches in
-- worker threads with Lua states of their own (lua_data_workers.cpp). Guide: docs/data.md.
local tc = require "tc"
local raise = tc._C.raise
local type, pairs, ipairs, setmetatable, getmetatable, tostring = type, pairs, ipairs, setmetatable, getmetatable, tostring
local data = {}

-- ---- classes ------------------------------------------------------------------------------------
-- `MyData = data.Dataset:extend("MyData")`, then `function MyData:__init(...)`, `MyData:get(i)`,
-- `MyData:__len()`; `MyData(...)` makes an instance (tc.nn.Module's idiom). Metamethods are not
-- found through __index, so each class carries copies of its parent's.
local metamethods = {"__len", "__add", "__tostring", "__call", "__close"}
local function new_instance(cls, ...)
  local obj = setmetatable({}, cls)
  obj:__init(...)
  return obj
end
local function class(name, parent)
  local cls = {__name = name}
  if parent then
    for _, mm in ipairs(metamethods) do cls[mm] = rawget(parent, mm) end
  end
  cls.__index = cls
  cls.super = parent
  return setmetatable(cls, {__index = parent, __call = tc._C.wrap(new_instance)})
end
local function extend(self, name) return class(name or self.__name, self) end
local function instance_of(v, cls)
  local mt = getmetatable(v)
  while type(mt) == "table" do
    if mt == cls then return true end
    mt = rawget(mt, "super")
  end
  return false
end

local function is_int(v) return math.type(v) == "integer" end
local function check_count(v, what, min)
  if not is_int(v) or v < (min or 0) then
    raise("ValueError", ("%s must be an integer >= %d, got %s"):format(what, min or 0, tostring(v)))
  end
  return v
end

-- The length of a dataset or sampler: #v (its __len), with a clear error when it has none.
local function len(v, what)
  local t = type(v)
  if t == "table" or t == "userdata" then
    local mt = getmetatable(v)
    if t == "table" and (mt == nil or mt.__len ~= nil) or (mt and mt.__len) then
      local n = #v
      if is_int(n) and n >= 0 then return n end
      raise("ValueError", ("%s: __len returned %s, expected an integer >= 0"):format(what, tostring(n)))
    end
  end
  raise("ValueError", ("%s has no length (define __len on its class)"):format(what))
end
data.len = len

-- ---- Generator: a seeded splitmix64 stream, independent of tc's global RNG -----------------------
local Generator = class("tc.utils.data.Generator")
data.Generator = Generator
function Generator:__init(seed) self:manual_seed(seed or 0) end
function Generator:manual_seed(seed)
  if not is_int(seed) then raise("ValueError", "Generator:manual_seed(seed): seed must be an integer, got " .. tostring(seed)) end
  self.seed, self.state = seed, seed * 1000003 + 0x5DEECE66D
  return self
end
function Generator:initial_seed() return self.seed end
function Generator:get_state() return self.state end
function Generator:set_state(s)
  if not is_int(s) then raise("ValueError", "Generator:set_state(s): expected an integer from get_state(), got " .. tostring(s)) end
  self.state = s
end
function Generator:next_u64()  -- wrapping arithmetic on Lua integers
  self.state = self.state + 0x9E3779B97F4A7C15
  local z = self.state
  z = (z ~ (z >> 30)) * -4658895280553007687  -- 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * -7723592293110705685  -- 0x94D049BB133111EB
  return z ~ (z >> 31)
end
-- A uniform integer in 1..n (rejection sampling: no modulo bias).
function Generator:random(n)
  local limit = (-1 >> 1) - ((-1 >> 1) % n + 1) % n
  local r
  repeat r = self:next_u64() >> 1 until r <= limit
  return r % n + 1
end
-- A random permutation of 1..n (Fisher-Yates), as a Lua array.
function Generator:randperm(n)
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = self:random(i)
    p[i], p[j] = p[j], p[i]
  end
  return p
end

-- A generator from the options: `generator` (a Generator), `seed` (an integer), or, with neither,
-- one seeded from tc's global RNG (tc.manual_seed makes it reproducible, as in PyTorch).
local function global_seed()
  local r = tc.randint(0, 0x7fffffff, {2}):tolist()
  return r[1] * 0x80000000 + r[2]
end
local function generator_of(opts, what)
  local g, seed = opts.generator, opts.seed
  if g ~= nil and seed ~= nil then raise("ValueError", what .. ": give generator or seed, not both") end
  if g ~= nil then
    if is_int(g) then return Generator(g) end
    if not instance_of(g, Generator) then
      raise("ValueError", what .. ": generator must be a tc.utils.data.Generator (or an integer seed), got " .. type(g))
    end
    return g
  end
  if seed ~= nil then
    if not is_int(seed) then raise("ValueError", what .. ": seed must be an integer, got " .. tostring(seed)) end
    return Generator(seed)
  end
  return nil
end

-- ---- datasets -----------------------------------------------------------------------------------
local Dataset = class("Dataset")
data.Dataset = Dataset
Dataset.extend = extend
function Dataset:__init() end
function Dataset:get(i) raise("NotImplementedError", ("%s:get(i) is not implemented"):format(self.__name)) end
Dataset.__add = function(a, b) return data.ConcatDataset({a, b}) end
Dataset.__tostring = function(self)
  local ok, n = pcall(function() return #self end)
  return ("%s(%s)"):format(self.__name, ok and ("%d items"):format(n) or "")
end

-- An IterableDataset defines `iter()`: a Lua iterator function returning items, then nil. The
-- DataLoader batches them in that order (no sampler or shuffle). __len is optional.
local IterableDataset = class("IterableDataset", Dataset)
data.IterableDataset = IterableDataset
IterableDataset.extend = extend
function IterableDataset:iter() raise("NotImplementedError", ("%s:iter() is not implemented"):format(self.__name)) end

local function is_iterable(ds) return instance_of(ds, IterableDataset) end

-- TensorDataset(t1, t2, ...): item i is {t1[i], t2[i], ...} (every tensor's first dimension).
local TensorDataset = Dataset:extend("TensorDataset")
data.TensorDataset = TensorDataset
function TensorDataset:__init(...)
  local ts = {...}
  if #ts == 0 then raise("ValueError", "TensorDataset(...): expected at least one tensor") end
  for k, t in ipairs(ts) do
    if not tc.is_tensor(t) then raise("ValueError", ("TensorDataset: argument %d is a %s, expected a tensor"):format(k, type(t))) end
    if t:dim() == 0 then raise("ShapeError", ("TensorDataset: argument %d is a 0-dim tensor (items are taken along dim 1)"):format(k)) end
    if t:size(1) ~= ts[1]:size(1) then
      raise("ShapeError", ("TensorDataset: size mismatch between tensors: argument 1 has %d items, argument %d has %d"):format(
        ts[1]:size(1), k, t:size(1)))
    end
  end
  self.tensors = ts
end
function TensorDataset:__len() return self.tensors[1]:size(1) end
function TensorDataset:get(i)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return out
end

local function check_index(ds, i, n)
  if not is_int(i) or i < 1 or i > n then
    raise("IndexError", ("%s:get(%s): index out of range for %d items (indices are 1-based)"):format(ds.__name, tostring(i), n))
  end
end

-- Subset(ds, indices): item i is ds:get(indices[i]).
local Subset = Dataset:extend("Subset")
data.Subset = Subset
function Subset:__init(ds, indices)
  if type(indices) ~= "table" then raise("ValueError", "Subset(ds, indices): indices must be an array of integers, got " .. type(indices)) end
  self.dataset, self.indices = ds, indices
end
function Subset:__len() return #self.indices end
function Subset:get(i)
  check_index(self, i, #self.indices)
  return self.dataset:get(self.indices[i])
end

-- ConcatDataset({ds1, ds2, ...}): the items of ds1, then those of ds2 ...
local ConcatDataset = Dataset:extend("ConcatDataset")
data.ConcatDataset = ConcatDataset
function ConcatDataset:__init(list)
  if type(list) ~= "table" or #list == 0 then raise("ValueError", "ConcatDataset(datasets): expected a non-empty array of datasets") end
  self.datasets, self.cumulative_sizes = list, {}
  local total = 0
  for k, ds in ipairs(list) do
    if is_iterable(ds) then raise("ValueError", ("ConcatDataset: dataset %d is an IterableDataset (only map-style datasets concatenate)"):format(k)) end
    total = total + len(ds, ("ConcatDataset: dataset %d"):format(k))
    self.cumulative_sizes[k] = total
  end
end
function ConcatDataset:__len() return self.cumulative_sizes[#self.cumulative_sizes] end
function ConcatDataset:get(i)
  local cs = self.cumulative_sizes
  check_index(self, i, cs[#cs])
  local lo, hi = 1, #cs  -- the first dataset whose cumulative size reaches i
  while lo < hi do
    local mid = (lo + hi) // 2
    if cs[mid] >= i then hi = mid else lo = mid + 1 end
  end
  return self.datasets[lo]:get(i - (cs[lo - 1] or 0))
end

-- random_split(ds, lengths, generator_or_seed) -> array of Subsets. lengths are counts summing to
-- #ds, or fractions summing to 1 (floors, the remainder spread one by one from the first, as
-- PyTorch does). The permutation comes from the generator (a Generator or an integer seed), else
-- from tc's global RNG.
function data.random_split(ds, lengths, generator)
  local n = len(ds, "random_split: the dataset")
  if type(lengths) ~= "table" or #lengths == 0 then raise("ValueError", "random_split(ds, lengths): lengths must be a non-empty array") end
  local counts, sum, fractions = {}, 0, true
  for _, l in ipairs(lengths) do
    if type(l) ~= "number" or l < 0 then raise("ValueError", "random_split: lengths must be numbers >= 0, got " .. tostring(l)) end
    sum = sum + l
    fractions = fractions and l <= 1
  end
  if fractions and math.abs(sum - 1) < 1e-9 and not (sum == n and #lengths == n) then
    local total = 0
    for k, f in ipairs(lengths) do counts[k] = math.floor(n * f); total = total + counts[k] end
    for k = 0, n - total - 1 do
      local j = k % #counts + 1
      counts[j] = counts[j] + 1
    end
  else
    for k, l in ipairs(lengths) do
      if not is_int(l) then raise("ValueError", ("random_split: length %d is %s: give integer counts or fractions summing to 1"):format(k, tostring(l))) end
      counts[k] = l
    end
    if sum ~= n then raise("ValueError", ("random_split: the lengths sum to %s, but the dataset has %d items"):format(tostring(sum), n)) end
  end
  local g = generator_of({generator = generator}, "random_split") or Generator(global_seed())
  local perm, out, at = g:randperm(n), {}, 0
  for k, c in ipairs(counts) do
    local idx = {}
    for j = 1, c do idx[j] = perm[at + j] end
    at = at + c
    out[k] = Subset(ds, idx)
  end
  return out
end

-- ---- samplers: iter() gives indices (or arrays of indices), #sampler their number ---------------
local Sampler = class("Sampler")
data.Sampler = Sampler
Sampler.extend = extend
function Sampler:__init() end

local function array_iter(list)
  local i = 0
  return function()
    i = i + 1
    return list[i]
  end
end

-- SequentialSampler(ds): 1, 2, ..., #ds
local SequentialSampler = Sampler:extend("SequentialSampler")
data.SequentialSampler = SequentialSampler
function SequentialSampler:__init(ds) self.n = len(ds, "SequentialSampler: the dataset") end
function SequentialSampler:__len() return self.n end
function SequentialSampler:iter()
  local i, n = 0, self.n
  return function()
    if i >= n then return nil end
    i = i + 1
    return i
  end
end

-- RandomSampler(ds, {replacement = false, num_samples = #ds, generator | seed}): each iter() is a
-- new permutation (or draw with replacement) from the generator, which advances, so epochs
-- differ and the whole sequence repeats for the same seed. num_samples past #ds without
-- replacement chains permutations, as PyTorch does. With no generator or seed each
-- iter() seeds from tc's global RNG.
local RandomSampler = Sampler:extend("RandomSampler")
data.RandomSampler = RandomSampler
function RandomSampler:__init(ds, opts)
  opts = opts or {}
  self.n = len(ds, "RandomSampler: the dataset")
  self.replacement = opts.replacement or false
  self.num_samples = opts.num_samples and check_count(opts.num_samples, "RandomSampler: num_samples", 1) or self.n
  self.generator = generator_of(opts, "RandomSampler")
end
function RandomSampler:__len() return self.num_samples end
function RandomSampler:iter()
  -- the state this epoch's order comes from, for state_dict(); load_state_dict() gives it back
  local restore = rawget(self, "_restore")
  self._restore = nil
  local g, seed = self.generator, nil
  if restore and g and restore.generator_state then g:set_state(restore.generator_state) end
  if not g then
    seed = restore and restore.seed or global_seed()
    g = Generator(seed)
  end
  self._epoch_start = {generator_state = self.generator and self.generator:get_state() or nil, seed = seed}
  local n, out = self.n, {}
  if n == 0 then return array_iter(out) end
  if self.replacement then
    for k = 1, self.num_samples do out[k] = g:random(n) end
  else
    while #out < self.num_samples do
      for _, i in ipairs(g:randperm(n)) do
        if #out == self.num_samples then break end
        out[#out + 1] = i
      end
    end
  end
  return array_iter(out)
end

-- sampler:state_dict() -> {epoch_start = {generator_state | seed}, current = {generator_state}}: where the
-- order of the epoch under way came from, and where the generator is now. load_state_dict(sd,
-- {mid_epoch = true}) makes the next iter() give that epoch's order again (a resumed run);
-- without mid_epoch, the next iter() is the epoch after it.
function RandomSampler:state_dict()
  return {epoch_start = self._epoch_start, current = {generator_state = self.generator and self.generator:get_state() or nil}}
end
function RandomSampler:load_state_dict(sd, opts)
  if type(sd) ~= "table" then raise("ValueError", "RandomSampler:load_state_dict: expected the table state_dict() returned") end
  if opts and opts.mid_epoch then self._restore = sd.epoch_start
  elseif self.generator and sd.current and sd.current.generator_state then self.generator:set_state(sd.current.generator_state) end
end

-- The indices a sampler gives: an object with iter(), or a plain array of indices.
local function sampler_iter(s)
  if type(s) == "table" and type(s.iter) == "function" then return s:iter() end
  if type(s) == "table" and getmetatable(s) == nil then return array_iter(s) end
  raise("ValueError", "a sampler must have an iter() method (or be an array of indices), got " .. type(s))
end

-- BatchSampler(sampler, batch_size, drop_last): arrays of batch_size indices (the last shorter
-- unless drop_last).
local BatchSampler = Sampler:extend("BatchSampler")
data.BatchSampler = BatchSampler
function BatchSampler:__init(sampler, batch_size, drop_last)
  self.sampler = sampler
  self.batch_size = check_count(batch_size, "BatchSampler: batch_size", 1)
  self.drop_last = drop_last or false
end
function BatchSampler:__len()
  local n = len(self.sampler, "BatchSampler: the sampler")
  if self.drop_last then return n // self.batch_size end
  return (n + self.batch_size - 1) // self.batch_size
end
function BatchSampler:iter()
  local it, bs, drop = sampler_iter(self.sampler), self.batch_size, self.drop_last
  return function()
    local batch = {}
    for k = 1, bs do
      local i = it()
      if i == nil then break end
      batch[k] = i
    end
    if #batch == 0 or (drop and #batch < bs) then return nil end
    return batch
  end
end

-- ---- collation ----------------------------------------------------------------------------------
-- default_collate(items): tensors stack along a new first dim; numbers become a tensor (int64 if
-- all are integers, else float64, as PyTorch); booleans a bool tensor; strings stay an array;
-- tables are collated key by key (arrays position by position), recursively.
local function kind_of(v)
  local t = type(v)
  if tc.is_tensor(v) then return "tensor" end
  if t == "table" and getmetatable(v) == nil then return "table" end
  return t
end

local function collate(items, path)
  local first = items[1]
  local kind = kind_of(first)
  for k = 2, #items do
    if kind_of(items[k]) ~= kind then
      raise("ValueError", ("default_collate: item %d%s is a %s, item 1's is a %s (items of a batch must have the same structure)"):format(
        k, path, kind_of(items[k]), kind))
    end
  end
  if kind == "tensor" then
    local shape = first.shape
    for k = 2, #items do
      if items[k].shape ~= shape then
        raise("ShapeError", ("default_collate: tensors of different shapes in one batch%s: %s (item 1) and %s (item %d); give a collate_fn that pads them"):format(
          path, tostring(shape), tostring(items[k].shape), k))
      end
    end
    return tc.stack(items)
  elseif kind == "number" then
    local ints = true
    for _, v in ipairs(items) do ints = ints and is_int(v) end
    return tc.tensor(items, {dtype = ints and tc.int64 or tc.float64})
  elseif kind == "boolean" then
    return tc.tensor(items, {dtype = tc.bool})
  elseif kind == "string" then
    local out = {}
    for k, v in ipairs(items) do out[k] = v end
    return out
  elseif kind == "table" then
    local out = {}
    for key in pairs(first) do
      local column = {}
      for k, item in ipairs(items) do
        local v = item[key]
        if v == nil then
          raise("ValueError", ("default_collate: item %d%s has no key %s that item 1 has"):format(k, path, tostring(key)))
        end
        column[k] = v
      end
      out[key] = collate(column, path .. "[" .. (type(key) == "string" and ("%q"):format(key) or tostring(key)) .. "]")
    end
    for k = 2, #items do
      for key in pairs(items[k]) do
        if first[key] == nil then
          raise("ValueError", ("default_collate: item %d%s has a key %s that item 1 has not"):format(k, path, tostring(key)))
        end
      end
    end
    return out
  end
  raise("ValueError", ("default_collate: cannot collate a %s%s (items may be tensors, numbers, booleans, strings or tables of them; give a collate_fn)"):format(
    kind, path))
end
function data.default_collate(items)
  if type(items) ~= "table" or #items == 0 then raise("ValueError", "default_collate(items): expected a non-empty array of items") end
  return collate(items, "")
end

-- ---- worker threads ------------------------------------------------------------------------------
-- Workers (num_workers > 0) are threads with their own Lua states (lua_data_workers.cpp). A value
-- crosses as a plain copy: tensors (shared, not copied), numbers, strings, booleans, tables. An
-- instance of a class travels as its fields and the class's place in package.loaded (a module
-- that returns the class, or a module table holding it), which the worker requires.
local size_mt = getmetatable(tc.Size({1}))
local refs = setmetatable({}, {__mode = "k"})

-- {module} or {module, key} such that require(module)[key] (or require(module)) is v, else nil.
local function module_ref(v)
  if refs[v] then return refs[v] end
  local found
  for name, m in next, package.loaded do
    if m == v then found = {name} break end
  end
  if not found then
    for name, m in next, package.loaded do
      if type(m) == "table" then
        for k, x in next, m do
          if x == v and type(k) == "string" then found = {name, k} break end
        end
      end
      if found then break end
    end
  end
  refs[v] = found
  return found
end

local function encode(v, path, active)
  local t = type(v)
  if t == "function" or t == "thread" or (t == "userdata" and not tc.is_tensor(v)) then
    raise("ValueError", ("DataLoader(num_workers > 0): %s is a %s, which cannot be passed to a worker thread (workers rebuild the dataset from "
      .. "its fields: tensors, numbers, strings, booleans, tables, instances of classes a module returns; define functions as methods)"):format(path, t))
  end
  if t ~= "table" then return v end
  if active[v] then raise("ValueError", ("DataLoader(num_workers > 0): %s refers back to itself (a cycle cannot be passed to a worker)"):format(path)) end
  active[v] = true
  local out = {}
  for k, x in next, v do
    out[encode(k, path .. " key", active)] = encode(x, type(k) == "string" and path .. "." .. k or ("%s[%s]"):format(path, tostring(k)), active)
  end
  active[v] = nil
  local mt = getmetatable(v)
  if mt == nil then return out end
  if mt == size_mt then return {__tc_size = out} end
  local ref = module_ref(mt)
  if ref == nil then
    raise("ValueError", ("DataLoader(num_workers > 0): the class of %s (%s) is not returned by any module: worker threads rebuild the "
      .. "dataset in their own Lua state by requiring its class's module; move the class into a module file (loaded with require), "
      .. "or use num_workers = 0"):format(path, tostring(rawget(mt, "__name") or "a table with a metatable")))
  end
  return {__tc_class = ref, __tc_fields = out}
end

local function from_ref(ref)
  local m = require(ref[1])
  if ref[2] then return m[ref[2]] end
  return m
end

local function decode(v)
  if type(v) ~= "table" then return v end
  if v.__tc_size then return tc.Size(v.__tc_size) end
  local cls = v.__tc_class
  local out = {}
  for k, x in next, (cls and v.__tc_fields or v) do out[decode(k)] = decode(x) end
  if cls then setmetatable(out, from_ref(cls)) end
  return out
end

local worker_info = nil
-- In a worker: {id = 1..num_workers, num_workers, seed, dataset} (the worker's copy of the
-- dataset); nil in the main thread. Workers share tc's global RNG (it is per process): for
-- reproducible randomness in items, use data.Generator(info.seed + i) in get().
function data.get_worker_info() return worker_info end

-- Runs in each worker's state: rebuilds the dataset and returns fetch(indices) -> encoded batch.
function data._worker_boot(spec, id, n)
  local ds = decode(spec.dataset)
  local collate_fn = spec.collate and from_ref(spec.collate)
  worker_info = {id = id, num_workers = n, seed = spec.seed + id, dataset = ds}
  if spec.iterable then  -- fetch({epoch = e}): this worker's next batch of its own iterator
    local epoch, items
    return function(msg)
      if msg.epoch ~= epoch then epoch, items = msg.epoch, ds:iter() end
      if items == nil then return {__tc_end = true} end
      local batch, bs = {}, spec.batch_size
      for k = 1, bs or 1 do
        local v = items()
        if v == nil then items = nil break end
        batch[k] = v
      end
      if #batch == 0 or (spec.drop_last and bs and #batch < bs) then items = nil return {__tc_end = true} end
      local v
      if bs then v = (collate_fn or data.default_collate)(batch) else v = batch[1]; if collate_fn then v = collate_fn(v) end end
      return encode(v, "the batch", {})
    end
  end
  return function(indices)
    local items = {}
    for k, i in ipairs(indices) do items[k] = ds:get(i) end
    local v
    if spec.batched then
      v = (collate_fn or data.default_collate)(items)
    else
      v = items[1]
      if collate_fn then v = collate_fn(v) end
    end
    return encode(v, "the batch", {})
  end
end

-- ---- DataLoader ---------------------------------------------------------------------------------
local option_types = {
  batch_size = "integer or false", shuffle = "boolean", seed = "integer", generator = true, drop_last = "boolean",
  sampler = true, batch_sampler = true, collate_fn = "function", num_workers = "integer", prefetch_factor = "integer",
  pin_memory = "boolean", persistent_workers = "boolean", timeout = "number",
}

local pin_warned = false

-- pin_memory = true: the batch's CPU tensors copied into pinned memory (x:pin_memory()), through
-- nested tables (new tables with the same metatable, the batch's own tables left as they are); a
-- table with a pin_memory method (a custom batch type, as in PyTorch) pins itself.
local function pin_batch(b, depth)
  if tc.is_tensor(b) then return b.device == "cpu" and b:pin_memory() or b end
  if type(b) ~= "table" then return b end
  if depth > 100 then raise("ValueError", "DataLoader(pin_memory = true): the batch nests tables more than 100 deep (a cycle?)") end
  local mt = getmetatable(b)
  if type(mt) == "table" and type(b.pin_memory) == "function" then return b:pin_memory() end
  local out = {}
  for k, v in pairs(b) do out[k] = pin_batch(v, depth + 1) end
  return type(mt) == "table" and setmetatable(out, mt) or out
end

-- DataLoader(ds, {batch_size = 1, shuffle = false, seed | generator, drop_last = false, sampler,
-- batch_sampler, collate_fn = default_collate, num_workers = 0, prefetch_factor, pin_memory}).
-- `for batch in loader do ... end` runs one epoch (every such loop starts a new one, also after a
-- break); loader:iter() gives the same iterator explicitly; #loader is the number of batches.
-- batch_size = false gives items one by one (collate_fn, if given, applied to each).
local DataLoader = class("DataLoader")
data.DataLoader = DataLoader
function DataLoader:__init(ds, opts)
  if type(ds) ~= "table" and type(ds) ~= "userdata" then raise("ValueError", "DataLoader(dataset, opts): expected a dataset, got " .. type(ds)) end
  if opts ~= nil and type(opts) ~= "table" then raise("ValueError", "DataLoader(dataset, opts): opts must be a table, got " .. type(opts)) end
  opts = opts or {}
  for k, v in pairs(opts) do
    local want = option_types[k]
    if want == nil then
      local best = tc._C.closest_name(tostring(k), option_types)
      local names = {}
      for name in pairs(option_types) do names[#names + 1] = name end
      table.sort(names)
      raise("ValueError", ("DataLoader got an unexpected option '%s'%s (options: %s)"):format(tostring(k),
        best and (" (did you mean '%s'?)"):format(best) or "", table.concat(names, ", ")))
    end
    local ok = want == true or (want == "integer" and is_int(v)) or (want == "integer or false" and (v == false or is_int(v)))
      or type(v) == want
    if not ok then raise("ValueError", ("DataLoader: option '%s' must be a %s, got %s"):format(k, want, tostring(v))) end
  end
  self.dataset = ds
  self.iterable = is_iterable(ds)
  local batch_size = opts.batch_size
  if batch_size == nil then batch_size = 1 end
  if batch_size ~= false then check_count(batch_size, "DataLoader: batch_size", 1) end
  self.num_workers = check_count(opts.num_workers or 0, "DataLoader: num_workers")
  if opts.prefetch_factor ~= nil then
    if self.num_workers == 0 then
      raise("ValueError", "DataLoader: prefetch_factor is for num_workers > 0 (as in PyTorch); leave it out with num_workers = 0")
    end
    self.prefetch_factor = check_count(opts.prefetch_factor, "DataLoader: prefetch_factor", 1)
  end
  self.persistent_workers = opts.persistent_workers or false
  if self.persistent_workers and self.num_workers == 0 then
    raise("ValueError", "DataLoader: persistent_workers = true is for num_workers > 0 (as in PyTorch)")
  end
  self.timeout = opts.timeout or 0
  if self.timeout < 0 then raise("ValueError", "DataLoader: timeout must be >= 0 seconds, got " .. tostring(self.timeout)) end
  self.pin_memory = opts.pin_memory or false
  if self.pin_memory and not pin_warned and not tc.cuda.is_available() then
    pin_warned = true
    io.stderr:write("tc: DataLoader(pin_memory = true) is ignored: no CUDA device is available; batches stay in pageable memory\n")
  end
  self.collate_fn = opts.collate_fn
  self.drop_last = opts.drop_last or false
  local shuffle = opts.shuffle or false
  if self.iterable then
    if opts.sampler ~= nil or opts.batch_sampler ~= nil or shuffle then
      raise("ValueError", "DataLoader: an IterableDataset gives its items in its own order: sampler, batch_sampler and shuffle do not apply")
    end
    self.batch_size = batch_size
    return
  end
  if opts.batch_sampler ~= nil then
    if (opts.batch_size ~= nil and opts.batch_size ~= 1) or shuffle or opts.sampler ~= nil or opts.drop_last then
      raise("ValueError", "DataLoader: batch_sampler is exclusive with batch_size, shuffle, sampler and drop_last")
    end
    self.batch_sampler, self.batch_size = opts.batch_sampler, nil
    return
  end
  if opts.sampler ~= nil and shuffle then
    raise("ValueError", "DataLoader: sampler and shuffle are exclusive (the sampler decides the order)")
  end
  if (opts.seed ~= nil or opts.generator ~= nil) and opts.sampler ~= nil then
    raise("ValueError", "DataLoader: seed and generator are for shuffle = true; give them to the sampler instead")
  end
  self.sampler = opts.sampler or (shuffle and RandomSampler(ds, {generator = generator_of(opts, "DataLoader")})
                                 or SequentialSampler(ds))
  self.batch_size = batch_size
  if batch_size ~= false then self.batch_sampler = BatchSampler(self.sampler, batch_size, self.drop_last) end
end

function DataLoader:__len()
  if self.iterable then
    local n = len(self.dataset, "DataLoader: the IterableDataset")
    if self.batch_size == false then return n end
    return self.drop_last and n // self.batch_size or (n + self.batch_size - 1) // self.batch_size
  end
  return len(self.batch_sampler or self.sampler, "DataLoader: the sampler")
end

-- loader:set_epoch(e): passed to the sampler (tc.distributed.DistributedSampler reshuffles by it).
function DataLoader:set_epoch(e)
  local s = self.sampler or (self.batch_sampler and self.batch_sampler.sampler)
  if type(s) == "table" and type(s.set_epoch) == "function" then s:set_epoch(e) end
  self.epoch = e
end

local function fetch(ds, i)
  local item = ds:get(i)
  if item == nil then raise("ValueError", ("%s:get(%s) returned nil"):format(tostring(ds.__name or "dataset"), tostring(i))) end
  return item
end

-- The epoch's index batches (or indices), past the ones a resumed epoch already gave (no item is
-- fetched for those).
function DataLoader:_indices()
  local it = sampler_iter(self.batch_sampler or self.sampler)
  for _ = 1, rawget(self, "_skip") or 0 do
    if it() == nil then break end
  end
  rawset(self, "_skip", nil)
  return it
end

-- loader:state_dict() -> {batches = the batches the epoch under way has given, sampler = its
-- state_dict(), worker_seed}: with loader:load_state_dict(sd, {mid_epoch = true}), the next
-- iter() gives the rest of that epoch, the same batches in the same order, and draws nothing from
-- tc's global RNG (a resumed training run then draws the same random numbers as an uninterrupted
-- one). Without mid_epoch, the next iter() is the epoch after it. An IterableDataset's epoch is
-- resumed by iterating and dropping the batches already given (its items are fetched again).
function DataLoader:state_dict()
  local s = self.sampler or (self.batch_sampler and self.batch_sampler.sampler)
  return {batches = rawget(self, "_given") or 0,
          sampler = type(s) == "table" and type(s.state_dict) == "function" and s:state_dict() or nil,
          worker_seed = rawget(self, "_worker_seed")}
end
function DataLoader:load_state_dict(sd, opts)
  if type(sd) ~= "table" or (sd.batches ~= nil and math.type(sd.batches) ~= "integer") then
    raise("ValueError", "DataLoader:load_state_dict: expected the table state_dict() returned")
  end
  local mid = opts and opts.mid_epoch or false
  local s = self.sampler or (self.batch_sampler and self.batch_sampler.sampler)
  if sd.sampler ~= nil and type(s) == "table" and type(s.load_state_dict) == "function" then
    s:load_state_dict(sd.sampler, {mid_epoch = mid})
  end
  if mid or self.persistent_workers then rawset(self, "_restore_worker_seed", sd.worker_seed) end
  if mid then rawset(self, "_skip", sd.batches or 0) end
end

-- One epoch: an iterator function returning batches, then nil (state_dict() counts the batches given).
function DataLoader:iter()
  local skip = rawget(self, "_skip") or 0
  local it = self:_iter()
  if self.iterable then  -- no indices to skip: drop the batches already given
    for _ = 1, skip do if it() == nil then break end end
    rawset(self, "_skip", nil)
  end
  local given = skip
  rawset(self, "_given", given)
  local pin = self.pin_memory and tc.cuda.is_available()
  return function()
    local b = it()
    if b ~= nil then
      given = given + 1
      rawset(self, "_given", given)
      if pin then b = pin_batch(b, 0) end
    end
    return b
  end
end

function DataLoader:_iter()
  local ds, collate_fn = self.dataset, self.collate_fn or data.default_collate
  if self.iterable and self.num_workers > 0 then return self:_worker_iter_iterable() end
  if self.iterable then
    local items, bs, drop = ds:iter(), self.batch_size, self.drop_last
    if bs == false then
      return function()
        local v = items()
        if v ~= nil and self.collate_fn then v = self.collate_fn(v) end
        return v
      end
    end
    return function()
      local batch = {}
      for k = 1, bs do
        local v = items()
        if v == nil then break end
        batch[k] = v
      end
      if #batch == 0 or (drop and #batch < bs) then return nil end
      return collate_fn(batch)
    end
  end
  if self.num_workers > 0 then return self:_worker_iter() end
  if self.batch_sampler == nil then  -- batch_size = false: one item at a time
    local it = self:_indices()
    return function()
      local i = it()
      if i == nil then return nil end
      local v = fetch(ds, i)
      if self.collate_fn then v = self.collate_fn(v) end
      return v
    end
  end
  local it = self:_indices()
  return function()
    local idx = it()
    if idx == nil then return nil end
    local items = {}
    for k, i in ipairs(idx) do items[k] = fetch(ds, i) end
    return collate_fn(items)
  end
end

-- One epoch over worker threads: up to num_workers × prefetch_factor batches are requested ahead
-- and taken back in order. A worker's error stops the workers (threads joined) and is raised here
-- with the worker's message (its file:line). Without persistent_workers, each epoch starts its
-- workers and stops them at its end.
local function worker_pool(self)
  local pool = rawget(self, "_pool")
  if pool ~= nil then return pool end
  local seed = rawget(self, "_restore_worker_seed") or global_seed()
  rawset(self, "_restore_worker_seed", nil)
  rawset(self, "_worker_seed", seed)
  local spec = {dataset = encode(self.dataset, "the dataset", {}), batched = self.batch_sampler ~= nil,
                seed = seed, iterable = self.iterable, batch_size = self.batch_size, drop_last = self.drop_last}
  if self.collate_fn then
    spec.collate = module_ref(self.collate_fn)
    if spec.collate == nil then
      raise("ValueError", "DataLoader(num_workers > 0): collate_fn must be a function that a module returns or holds (workers require it), not a local function")
    end
  end
  pool = tc._C.data_workers(self.num_workers, spec)
  if self.persistent_workers then rawset(self, "_pool", pool) end
  return pool
end

local function stop_pool(self, pool)
  if rawget(self, "_pool") == pool then rawset(self, "_pool", nil) end
  pool:close()
end

local function worker_failed(self, pool, k, message)
  stop_pool(self, pool)
  raise("ValueError", ("DataLoader worker failed on batch %d: %s"):format(k, message))
end

function DataLoader:_worker_iter()
  local pool = worker_pool(self)
  local tag = rawget(self, "_tag") or 0
  pool:clear(tag + 1)
  local it = self:_indices()
  local batched = self.batch_sampler ~= nil
  local submitted, taken, done = tag, tag, false
  local depth = self.num_workers * (self.prefetch_factor or 2)
  return function()
    while not done and submitted - taken < depth do
      local idx = it()
      if idx == nil then done = true break end
      submitted = submitted + 1
      rawset(self, "_tag", submitted)
      pool:submit(submitted, batched and idx or {idx})
    end
    if taken == submitted then
      if not self.persistent_workers then stop_pool(self, pool) end
      return nil
    end
    taken = taken + 1
    local ok, v = pool:take(taken, self.timeout)
    if not ok then worker_failed(self, pool, taken - tag, v) end
    return decode(v)
  end
end

-- An IterableDataset over workers: each worker iterates its own copy of the dataset (shard it
-- with get_worker_info(), as in PyTorch: every worker otherwise yields every item) and batches
-- come from the workers in turn, a worker leaving the rotation when its iterator ends.
function DataLoader:_worker_iter_iterable()
  local pool = worker_pool(self)
  local tag = rawget(self, "_tag") or 0
  pool:clear(tag + 1)
  local epoch = (rawget(self, "_epochs") or 0) + 1
  rawset(self, "_epochs", epoch)
  local pending, first, last, done, delivered = {}, 1, 0, {}, 0
  local function submit(w)
    tag = tag + 1
    rawset(self, "_tag", tag)
    pool:submit(tag, {epoch = epoch}, w)
    last = last + 1
    pending[last] = {tag, w}
  end
  for _ = 1, self.prefetch_factor or 2 do
    for w = 1, self.num_workers do submit(w) end
  end
  return function()
    while first <= last do
      local t, w = pending[first][1], pending[first][2]
      pending[first] = nil
      first = first + 1
      local ok, v = pool:take(t, self.timeout)
      if not ok then worker_failed(self, pool, delivered + 1, v) end
      if type(v) == "table" and v.__tc_end then
        done[w] = true
      else
        if not done[w] then submit(w) end
        delivered = delivered + 1
        return decode(v)
      end
    end
    if not self.persistent_workers then stop_pool(self, pool) end
    return nil
  end
end

-- loader:shutdown(): stops persistent workers now (they also stop when the loader is collected).
function DataLoader:shutdown()
  local pool = rawget(self, "_pool")
  if pool then rawset(self, "_pool", nil); pool:close() end
end

-- `for batch in loader do`: Lua calls loader(nil, previous batch); a nil previous batch (the
-- loop's first call) starts a new epoch. The epoch a batch belongs to is found from the batch
-- (weak keys), so loops over one loader may nest.
local epoch_of = setmetatable({}, {__mode = "k"})
DataLoader.__call = function(self, _, previous)
  local it
  if previous == nil then
    it = self:iter()
  else
    it = (type(previous) == "table" or type(previous) == "userdata") and epoch_of[previous] or rawget(self, "_next")
    if it == nil then raise("ValueError", "DataLoader: called with a batch it did not give (use `for batch in loader do`)") end
  end
  local b = it()
  if b ~= nil then
    if type(b) == "table" or type(b) == "userdata" then epoch_of[b] = it else rawset(self, "_next", it) end
  end
  return b
end

for _, cls in ipairs {Generator, Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, Sampler, SequentialSampler,
                      RandomSampler, BatchSampler, DataLoader} do
  tc._C.wrap_functions(cls)
end
tc._C.wrap_functions(data)

-- tc.distributed.DistributedSampler, reachable here as in torch.utils.data.
setmetatable(data, {__index = function(t, k)
  if k ~= "DistributedSampler" then return nil end
  local v = require("tc.distributed").DistributedSampler
  rawset(t, k, v)
  return v
end})

return data
