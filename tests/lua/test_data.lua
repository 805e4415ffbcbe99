-- tc.utils.data (datasets, samplers, collation, DataLoader) and tc.from_file (memory-mapped files).
local tc = require "tc"
local check = require "check"
local data = tc.utils.data

local tests = {}

-- the first column of every batch of a loader over TensorDataset(arange(n)), as Lua arrays
local function batches(loader)
  local out = {}
  for b in loader do out[#out + 1] = b[1]:tolist() end
  return out
end
local function range_ds(n) return data.TensorDataset(tc.arange(1, n + 1)) end
local function flat(bs)
  local out = {}
  for _, b in ipairs(bs) do for _, v in ipairs(b) do out[#out + 1] = v end end
  return out
end
local function sorted(t)
  local c = {table.unpack(t)}
  table.sort(c)
  return c
end
local function iota(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end

function tests.loader_without_shuffle_gives_batches_in_order()
  local loader = data.DataLoader(range_ds(10), {batch_size = 4})
  check.same(batches(loader), {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}})
  check.eq(#loader, 3, "#loader")
  check.same(batches(data.DataLoader(range_ds(3))), {{1}, {2}, {3}}, "batch_size defaults to 1")
end

function tests.drop_last_drops_the_short_batch_and_len_counts_it()
  local loader = data.DataLoader(range_ds(10), {batch_size = 4, drop_last = true})
  check.same(batches(loader), {{1, 2, 3, 4}, {5, 6, 7, 8}})
  check.eq(#loader, 2)
  check.eq(#data.DataLoader(range_ds(8), {batch_size = 4, drop_last = true}), 2)
  check.eq(#data.DataLoader(range_ds(0), {batch_size = 4}), 0)
end

function tests.shuffle_with_a_seed_is_reproducible_and_independent_of_the_global_rng()
  local function run(seed)
    local loader = data.DataLoader(range_ds(20), {batch_size = 6, shuffle = true, seed = seed})
    return batches(loader), batches(loader)  -- two epochs
  end
  tc.manual_seed(1)
  local e1, e2 = run(7)
  tc.manual_seed(2)
  local f1, f2 = run(7)
  check.same(e1, f1, "epoch 1, same seed, other global seed")
  check.same(e2, f2, "epoch 2")
  check.same(sorted(flat(e1)), iota(20), "an epoch is a permutation")
  check.eq(#e1[4], 2, "last batch")
  assert(table.concat(flat(e1), ",") ~= table.concat(flat(e2), ","), "epochs differ")
  assert(table.concat(flat(e1), ",") ~= table.concat(flat(run(8)), ","), "seeds differ")
  assert(table.concat(flat(e1), ",") ~= table.concat(iota(20), ","), "shuffled")
  -- the loader's generator does not draw from the global RNG
  tc.manual_seed(5)
  local want = tc.rand(3):tolist()
  tc.manual_seed(5)
  run(7)
  check.same(tc.rand(3):tolist(), want, "global RNG untouched")
  -- a Generator object: the same stream as the seed
  local g1 = batches(data.DataLoader(range_ds(20), {batch_size = 6, shuffle = true, generator = data.Generator(7)}))
  check.same(g1, e1, "generator = Generator(7) is seed = 7")
end

function tests.random_sampler_replacement_num_samples_and_generator_state()
  local ds = range_ds(5)
  local function list(s) local out = {} for i in s:iter() do out[#out + 1] = i end return out end
  local r = list(data.RandomSampler(ds, {replacement = true, num_samples = 50, seed = 1}))
  check.eq(#r, 50)
  for _, i in ipairs(r) do assert(i >= 1 and i <= 5, "index in range") end
  local chained = list(data.RandomSampler(ds, {num_samples = 12, seed = 1}))
  check.eq(#chained, 12)
  check.same(sorted({table.unpack(chained, 1, 5)}), iota(5), "the first 5 are a permutation")
  check.same(sorted({table.unpack(chained, 6, 10)}), iota(5), "then another")
  -- a generator's state saved and restored gives the same stream (resuming an epoch's order)
  local g = data.Generator(9)
  g:randperm(10)
  local state = g:get_state()
  local a = g:randperm(10)
  g:set_state(state)
  check.same(g:randperm(10), a)
end

function tests.shuffle_without_a_seed_follows_tc_manual_seed()
  local loader = data.DataLoader(range_ds(30), {batch_size = 30, shuffle = true})
  tc.manual_seed(11)
  local a = batches(loader)
  tc.manual_seed(11)
  check.same(batches(loader), a)
  check.same(sorted(a[1]), iota(30))
end

function tests.default_collate_stacks_nested_tables_key_by_key()
  local Items = data.Dataset:extend("Items")
  function Items:__len() return 3 end
  function Items:get(i)
    return {x = tc.full({2}, i), y = i, w = i * 0.5, name = "s" .. i, ok = i % 2 == 1,
            meta = {pair = {i, tc.tensor({i, -i})}, tag = {deep = i * 10}}}
  end
  local batch
  for b in data.DataLoader(Items(), {batch_size = 3}) do batch = b end
  check.values(batch.x, {{1, 1}, {2, 2}, {3, 3}})
  check.values(batch.y, {1, 2, 3})
  check.eq(batch.y.dtype, tc.int64, "integers collate to int64")
  check.eq(batch.w.dtype, tc.float64, "floats collate to float64")
  check.values(batch.w, {0.5, 1, 1.5})
  check.same(batch.name, {"s1", "s2", "s3"})
  check.values(batch.ok, {true, false, true})
  check.values(batch.meta.pair[1], {1, 2, 3})
  check.values(batch.meta.pair[2], {{1, -1}, {2, -2}, {3, -3}})
  check.values(batch.meta.tag.deep, {10, 20, 30})
  -- items unlike in structure or shape: clear errors
  check.raises("ShapeError", data.default_collate, {tc.zeros(2), tc.zeros(3)})
  check.raises("ValueError", data.default_collate, {{a = 1}, {b = 1}})
  check.raises("ValueError", data.default_collate, {1, "x"})
end

function tests.collate_fn_batch_sampler_and_batch_size_false()
  local ds = range_ds(5)
  local sums = {}
  for s in data.DataLoader(ds, {batch_size = 2, collate_fn = function(items) return {#items} end}) do sums[#sums + 1] = s[1] end
  check.same(sums, {2, 2, 1})
  local loader = data.DataLoader(ds, {batch_sampler = {iter = function() local k = 0
    return function() k = k + 1; return ({{5, 1}, {3}})[k] end end}})
  check.same(batches(loader), {{5, 1}, {3}})
  local items = {}
  for item in data.DataLoader(ds, {batch_size = false}) do items[#items + 1] = item[1]:item() end
  check.same(items, {1, 2, 3, 4, 5})
  check.same(flat(batches(data.DataLoader(ds, {sampler = {4, 2}, batch_size = 2}))), {4, 2}, "an array as sampler")
end

function tests.loops_over_one_loader_nest_and_restart_after_break()
  local loader = data.DataLoader(range_ds(4), {batch_size = 2})
  local seen = {}
  for a in loader do
    for b in loader do seen[#seen + 1] = a[1][1]:item() * 10 + b[1][1]:item() end
  end
  check.same(seen, {11, 13, 31, 33})
  for _ in loader do break end
  check.same(batches(loader), {{1, 2}, {3, 4}}, "a new loop starts a new epoch")
  local explicit = {}
  for b in loader:iter() do explicit[#explicit + 1] = b[1]:tolist() end
  check.same(explicit, {{1, 2}, {3, 4}})
end

function tests.iterable_dataset_batches_in_its_order()
  local Stream = data.IterableDataset:extend("Stream")
  function Stream:__init(n) self.n = n end
  function Stream:iter()
    local i = 0
    return function()
      i = i + 1
      if i <= self.n then return {v = i} end
    end
  end
  local out = {}
  for b in data.DataLoader(Stream(7), {batch_size = 3}) do out[#out + 1] = b.v:tolist() end
  check.same(out, {{1, 2, 3}, {4, 5, 6}, {7}})
  out = {}
  for b in data.DataLoader(Stream(7), {batch_size = 3, drop_last = true}) do out[#out + 1] = b.v:tolist() end
  check.same(out, {{1, 2, 3}, {4, 5, 6}})
  check.raises("ValueError", data.DataLoader, Stream(3), {shuffle = true})
end

function tests.random_split_sizes_are_disjoint_and_reproducible()
  local ds = range_ds(11)
  local parts = data.random_split(ds, {0.5, 0.5}, 3)
  check.eq(#parts[1], 6, "remainder to the first")
  check.eq(#parts[2], 5)
  local all = {}
  for _, p in ipairs(parts) do
    for i = 1, #p do all[#all + 1] = p:get(i)[1]:item() end
  end
  check.same(sorted(all), iota(11), "disjoint and covering")
  local again = data.random_split(ds, {0.5, 0.5}, data.Generator(3))
  check.same(again[1].indices, parts[1].indices, "same seed, same split")
  local counts = data.random_split(ds, {8, 0, 3}, 1)
  check.same({#counts[1], #counts[2], #counts[3]}, {8, 0, 3})
  local frac = data.random_split(range_ds(10), {0.7, 0.2, 0.1}, 1)
  check.same({#frac[1], #frac[2], #frac[3]}, {7, 2, 1})
  check.raises("ValueError", data.random_split, ds, {5, 5})
  check.raises("IndexError", parts[2].get, parts[2], 6)
end

function tests.concat_dataset_indexes_across_boundaries()
  local a, b, c = range_ds(3), data.TensorDataset(tc.arange(101, 103)), range_ds(0)
  local d = data.ConcatDataset({a, c, b})
  check.eq(#d, 5)
  local got = {}
  for i = 1, #d do got[i] = d:get(i)[1]:item() end
  check.same(got, {1, 2, 3, 101, 102})
  check.eq(#(a + b), 5, "ds1 + ds2 concatenates")
  check.eq((a + b):get(4)[1]:item(), 101)
  check.raises("IndexError", d.get, d, 6)
  check.raises("IndexError", d.get, d, 0)
end

function tests.distributed_sampler_through_the_loader_partitions_and_reshuffles()
  local ds = range_ds(10)
  local function rank_batches(rank, epoch)
    local s = data.DistributedSampler(#ds, {num_replicas = 2, rank = rank, seed = 3})
    local loader = data.DataLoader(ds, {batch_size = 2, sampler = s})
    loader:set_epoch(epoch)
    check.eq(#loader, 3, "#loader (5 indices per rank)")
    return flat(batches(loader))
  end
  local r0, r1 = rank_batches(0, 0), rank_batches(1, 0)
  local all = {table.unpack(r0)}
  for _, v in ipairs(r1) do all[#all + 1] = v end
  check.same(sorted(all), iota(10), "ranks partition the dataset")
  assert(table.concat(rank_batches(0, 1), ",") ~= table.concat(r0, ","), "set_epoch reshuffles")
  check.same(rank_batches(0, 0), r0, "same epoch, same order")
  check.raises("ValueError", data.DataLoader, ds, {sampler = data.SequentialSampler(ds), shuffle = true})
end

function tests.loader_options_are_checked()
  local ds = range_ds(4)
  local e = check.raises("ValueError", data.DataLoader, ds, {batch_sise = 2})
  assert(e.message:find("did you mean 'batch_size'", 1, true), e.message)
  check.raises("ValueError", data.DataLoader, ds, {batch_size = 0})
  check.raises("ValueError", data.DataLoader, ds, {prefetch_factor = 2})
  check.raises("ValueError", data.DataLoader, ds, {batch_sampler = data.BatchSampler(data.SequentialSampler(ds), 2), batch_size = 3})
  check.raises("ValueError", data.DataLoader, ds, {num_workers = -1})
end

-- ---- worker threads ----------------------------------------------------------------------------
local Crops = require "data_worker_dataset"

local function crops_batches(loader)
  local out = {}
  for b in loader do out[#out + 1] = {x = b.x:tolist(), label = b.label:tolist(), name = b.name} end
  return out
end

function tests.worker_threads_give_the_same_batches_as_num_workers_0()
  local plain = crops_batches(data.DataLoader(Crops(23), {batch_size = 4, shuffle = true, seed = 5}))
  for _, w in ipairs {1, 3} do
    local loader = data.DataLoader(Crops(23), {batch_size = 4, shuffle = true, seed = 5, num_workers = w, prefetch_factor = 2})
    check.same(crops_batches(loader), plain, ("num_workers = %d"):format(w))
  end
  check.eq(#plain, 6)
  -- the items were loaded in worker threads (get_worker_info there), and ids range over the workers
  local seen = {}
  for b in data.DataLoader(Crops(40), {batch_size = 1, num_workers = 2}) do seen[b.worker[1]:item()] = true end
  assert(seen[1] or seen[2], "items came from workers")
  check.eq(seen[0], nil, "no item was loaded in the main thread")
  -- persistent workers over two epochs, a break in between, a module's collate_fn, batch_size = false
  local loader = data.DataLoader(Crops(10), {batch_size = 3, num_workers = 2, persistent_workers = true,
                                             collate_fn = Crops.count_collate})
  for _ in loader do break end
  local sums = {}
  for b in loader do sums[#sums + 1] = b.n * 100 + b.sum end
  check.same(sums, {300 + 3, 300 + 3, 300 + 3, 101})
  loader:shutdown()
  local items = {}
  for it in data.DataLoader(Crops(3), {batch_size = false, num_workers = 2}) do items[#items + 1] = it.name end
  check.same(items, {"item1", "item2", "item3"})
end

function tests.iterable_dataset_over_workers_gives_each_workers_shard_in_turn()
  local got, from = {}, {}
  for b in data.DataLoader(Crops.Stream(11), {batch_size = 2, num_workers = 2}) do
    got[#got + 1] = b.v:tolist()
    from[#from + 1] = b.worker[1]:item()
  end
  -- worker 1 has 1, 3, 5, 7, 9, 11; worker 2 has 2, 4, 6, 8, 10; batches alternate while both last
  check.same(got, {{1, 3}, {2, 4}, {5, 7}, {6, 8}, {9, 11}, {10}})
  check.same(from, {1, 2, 1, 2, 1, 2})
  local plain = {}
  for b in data.DataLoader(Crops.Stream(11), {batch_size = 2}) do for _, v in ipairs(b.v:tolist()) do plain[#plain + 1] = v end end
  check.same(sorted(flat(got)), plain, "the same items as num_workers = 0")
  local loader = data.DataLoader(Crops.Stream(5), {batch_size = 2, num_workers = 2, drop_last = true, persistent_workers = true})
  for _ = 1, 2 do  -- two epochs on the same workers: each restarts its iterator
    local e = {}
    for b in loader do e[#e + 1] = b.v:tolist() end
    check.same(e, {{1, 3}, {2, 4}})
  end
  loader:shutdown()
end

function tests.an_error_in_a_worker_names_its_line_and_stops_the_workers()
  local loader = data.DataLoader(Crops(30, {fail_at = 9}), {batch_size = 2, num_workers = 3})
  local got = 0
  local line = check.line() + 1
  local ok, e = pcall(function() for _ in loader do got = got + 1 end end)
  assert(not ok, "the error reached the main thread")
  check.eq(e.kind, "ValueError")
  assert(e.message:find("data_worker_dataset.lua:16: item 9 is corrupt", 1, true), e.message)
  assert(e.message:find("batch 5", 1, true), e.message)
  check.eq(got, 4, "the batches before the failing one were delivered, in order")
  check.eq(e.line, line, "raised at the user's loop")
  -- a worker that never returns: timeout raises, and closing interrupts its Lua loop
  local hung = data.DataLoader(Crops(8, {hang_at = 3}), {batch_size = 1, num_workers = 2, timeout = 0.2})
  local e4 = check.raises("ValueError", function() for _ in hung do end end)
  assert(e4.message:find("timed out after", 1, true), e4.message)
  -- a loader whose dataset cannot travel: a local class, a function field, a local collate_fn
  local Local = data.Dataset:extend("Local")
  function Local:__len() return 2 end
  function Local:get(i) return i end
  local function first(l) for b in l do return b end end
  local e2 = check.raises("ValueError", first, data.DataLoader(Local(), {num_workers = 1}))
  assert(e2.message:find("not returned by any module", 1, true), e2.message)
  local c = Crops(2)
  c.transform = function(x) return x end
  local e3 = check.raises("ValueError", first, data.DataLoader(c, {num_workers = 1}))
  assert(e3.message:find("the dataset.transform is a function", 1, true), e3.message)
  check.raises("ValueError", first, data.DataLoader(Crops(2), {num_workers = 1, collate_fn = function(x) return x end}))
end

function tests.an_error_in_get_names_the_users_line()
  local Bad = data.Dataset:extend("Bad")
  function Bad:__len() return 4 end
  local line = check.line() + 1
  function Bad:get(i) if i == 3 then error("item 3 is corrupt") end return i end
  local ok, e = pcall(function() for _ in data.DataLoader(Bad(), {batch_size = 1}) do end end)
  assert(not ok)
  assert(tostring(e):find("test_data.lua:" .. line .. ": item 3 is corrupt", 1, true), tostring(e))
end

-- ---- tc.from_file -------------------------------------------------------------------------------
local function tmpname(tag) return os.tmpname() .. tag end
local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

function tests.from_file_maps_tc_dtypes_and_uint16_tokens()
  local path = tmpname(".bin")
  write(path, string.pack("<i4i4i4i4", 1, -2, 300000, 7))
  local x = tc.from_file(path, {dtype = tc.int32})
  check.values(x, {1, -2, 300000, 7})
  check.values(tc.from_file(path, {dtype = "int32", shape = {2, 2}}), {{1, -2}, {300000, 7}})
  check.values(tc.from_file(path, {dtype = tc.int32, offset = 8}), {300000, 7})
  check.values(tc.from_file(path, {dtype = tc.int32, mmap = false}), {1, -2, 300000, 7})
  write(path, string.pack("<I2I2I2I2I2I2", 1, 2, 300, 50256, 65535, 7))  -- nanoGPT's train.bin
  local tok = tc.from_file(path, {dtype = "uint16"})
  check.eq(#tok, 6)
  check.eq(tok[4], 50256)
  check.eq(tok[5], 65535)
  check.values(tok:narrow(1, 3, 3), {300, 50256, 65535})
  check.eq(tok:narrow(1, 3, 3).dtype, tc.int32)
  check.values(tok:index_select(1, tc.tensor({6, 1})), {7, 1})
  check.values(tc.from_file(path, {dtype = "int16"}):to(tc.int64), {1, 2, 300, 50256 - 65536, -1, 7})
  check.values(tc.from_file(path, {dtype = "uint32"}):to(), {2 * 65536 + 1, 50256 * 65536 + 300, 7 * 65536 + 65535})
  os.remove(path)
end

function tests.from_file_writes_stay_private_and_the_mapping_outlives_its_name()
  local path = tmpname(".bin")
  write(path, string.pack("<ffff", 1, 2, 3, 4))
  local x = tc.from_file(path, {dtype = tc.float32})
  local view = x:narrow(1, 3, 2)
  x:fill_(9)
  check.values(view, {9, 9}, 0, "writes are seen through views")
  local f = assert(io.open(path, "rb"))
  check.eq(f:read("a"), string.pack("<ffff", 1, 2, 3, 4), "the file is unchanged")
  f:close()
  local y = tc.from_file(path, {dtype = tc.float32}):narrow(1, 2, 2)
  os.remove(path)
  collectgarbage()
  collectgarbage()
  check.values(y, {2, 3}, 0, "a view keeps the mapping alive after the base and the file name are gone")
end

-- A 64 MiB sparse file: mapping it and reading a window does not bring the file into memory
-- (resident set grows by far less than the file); reading it with mmap = false does.
function tests.from_file_on_a_large_file_reads_only_the_window_it_touches()
  local statm = io.open("/proc/self/statm")
  if not statm then check.skip("no /proc/self/statm") end
  statm:close()
  local function rss()
    local s = assert(io.open("/proc/self/statm"))
    local _, res = s:read("a"):match("(%d+) (%d+)")
    s:close()
    return tonumber(res) * 4096
  end
  local path = tmpname(".bin")
  local size = 64 * 1024 * 1024
  local f = assert(io.open(path, "wb"))
  f:seek("set", size - 2)
  f:write(string.pack("<I2", 4242))
  f:close()
  collectgarbage()
  local before = rss()
  local tok = tc.from_file(path, {dtype = "uint16"})
  check.eq(#tok, size // 2)
  local sum = 0
  for _, start in ipairs {1, 1000000, 20000000} do sum = sum + tok:narrow(1, start, 1024):sum():item() end
  check.eq(sum, 0)
  check.eq(tok[#tok], 4242, "the last item")
  local grown = rss() - before
  assert(grown < 8 * 1024 * 1024, ("mapping a 64 MiB file grew the resident set by %d bytes"):format(grown))
  local read = tc.from_file(path, {dtype = tc.uint8, mmap = false})
  assert(rss() - before > size // 2, "reading the file (mmap = false) is seen in the resident set: the measure works")
  check.eq(read[size]:item(), 16)  -- 4242 = 0x1092, little-endian
  os.remove(path)
end

function tests.from_file_errors_name_the_problem()
  local path = tmpname(".bin")
  write(path, string.rep("\0", 12))
  local function msg(kind, opts, p)
    local e = check.raises(kind, tc.from_file, p or path, opts)
    return e.message
  end
  assert(msg("IOError", {}, path .. ".missing"):find("No such file", 1, true))
  assert(msg("IOError", {}, "/tmp"):find("directory", 1, true))
  assert(msg("ValueError", {dtype = tc.int32, shape = {2, 2}}):find("needs 16", 1, true))
  assert(msg("ValueError", {dtype = tc.float64}):find("not a whole number of float64 items", 1, true))
  assert(msg("ValueError", {offset = 13}):find("past the end", 1, true))
  assert(msg("ValueError", {dtype = tc.int32, offset = 2}):find("not a multiple", 1, true))
  assert(msg("DTypeError", {dtype = "float8"}):find("unsupported dtype float8", 1, true))
  assert(msg("ValueError", {ofset = 1}):find("did you mean 'offset'", 1, true))
  check.eq(tc.from_file(path, {offset = 12}):numel(), 0, "offset at the end: empty")
  os.remove(path)
end

-- state_dict mid-epoch, then load_state_dict(sd, {mid_epoch = true}) in a fresh loader: the rest of
-- that epoch, then the same later epochs, with tc's RNG untouched by the resumed epoch's start
function tests.a_loader_restored_mid_epoch_gives_the_rest_of_the_epoch_and_draws_nothing()
  for _, opts in ipairs({{batch_size = 3, shuffle = true}, {batch_size = 3, shuffle = true, seed = 4},
                         {batch_size = 3, shuffle = true, seed = 4, num_workers = 2}}) do
    local function make() return data.DataLoader(range_ds(20), opts) end
    tc.manual_seed(9)
    local a = make()
    local it = a:iter()
    local first = {it(), it(), it()}
    local sd = a:state_dict()
    check.eq(sd.batches, 3)
    local rng = tc.get_rng_state()
    local rest, rest2 = {}, {}
    for b in it do rest[#rest + 1] = b[1] end
    for b in a do rest2[#rest2 + 1] = b[1] end  -- the next epoch
    local b = make()
    tc.set_rng_state(rng)
    b:load_state_dict(sd, {mid_epoch = true})
    local got = {}
    for x in b:iter() do got[#got + 1] = x[1] end
    check.eq(#got, #rest)
    for k = 1, #got do assert(tc.equal(got[k], rest[k]), "batch " .. (k + 3) .. " of the resumed epoch") end
    local s2 = tc.get_rng_state()
    check.eq(s2.offset, rng.offset, "the resumed epoch drew nothing from tc's RNG")
    local k = 0
    for x in b do k = k + 1; assert(tc.equal(x[1], rest2[k]), "batch " .. k .. " of the next epoch") end
    check.eq(k, #rest2)
    local _ = first
  end
end

return tests
