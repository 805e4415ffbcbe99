-- DistributedSampler (tc.distributed): shares partition the dataset, padding and drop_last as
-- torch's, shuffles equal on every rank and change with the epoch. Run: tcrun tests/distributed/sampler.lua
local tc = require "tc"
local dist = tc.distributed
local function shares(n, replicas, opts)
  local all, out = {}, {}
  for r = 0, replicas - 1 do
    local o = {num_replicas = replicas, rank = r}
    for k, v in pairs(opts or {}) do o[k] = v end
    local s = dist.DistributedSampler(n, o)
    if opts and opts.epoch then s:set_epoch(opts.epoch) end
    out[r + 1] = s:indices()
    assert(#out[r + 1] == #s)
    for _, i in ipairs(out[r + 1]) do all[#all + 1] = i end
  end
  return out, all
end
-- no shuffle: rank r takes r+1, r+1+R, ... (as torch's indices[rank::R]); 10 over 3 pads with 1, 2
local out, all = shares(10, 3, {shuffle = false})
assert(table.concat(out[1], ",") == "1,4,7,10" and table.concat(out[2], ",") == "2,5,8,1" and table.concat(out[3], ",") == "3,6,9,2")
out = shares(10, 3, {shuffle = false, drop_last = true})
assert(#out[1] == 3 and table.concat(out[3], ",") == "3,6,9")
-- shuffle: every index once over the ranks (no padding at 12 over 3), same permutation on every
-- rank (each rank's share is disjoint), another epoch another order, same seed same order
out, all = shares(12, 3, {epoch = 1})
table.sort(all)
assert(table.concat(all, ",") == "1,2,3,4,5,6,7,8,9,10,11,12")
local again = shares(12, 3, {epoch = 1})
local other = shares(12, 3, {epoch = 2})
assert(table.concat(again[2], ",") == table.concat(out[2], ","))
assert(table.concat(other[1], ",") ~= table.concat(out[1], ",") or table.concat(other[2], ",") ~= table.concat(out[2], ","))
local n = 0
for i in dist.DistributedSampler(5, {num_replicas = 2, rank = 1, shuffle = false}):iter() do n = n + i end
assert(n == 2 + 4 + 1)
local ok, err = pcall(dist.DistributedSampler, 4, {num_replicas = 2, rank = 2})
assert(not ok and tostring(err):find("rank 2 is not in", 1, true), tostring(err))
print("sampler ok")
