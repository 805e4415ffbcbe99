-- Run by run.sh under `tcrun --nproc-per-node 2`, a 2 s timeout: rank 1 never makes the
-- all_reduce rank 0 waits in. Rank 0's DeviceError says which rank never came and what the
-- others called, not an internal store key; the store itself still works afterwards.
local tc = require "tc"
local dist = require "tc.distributed"
dist.init_process_group{backend = "gloo", timeout = 2}
local rank = dist.get_rank()
-- polls (a store get would time out after the 2 s too)
local function wait_for(key)
  while dist.store.add(key, 0) == 0 do os.execute("sleep 0.05") end
end
if rank == 0 then
  local ok, e = pcall(dist.all_reduce, tc.ones(3))
  assert(not ok, "all_reduce returned although rank 1 never called it")
  local msg = type(e) == "table" and e.message or tostring(e)
  if type(e) ~= "table" or e.kind ~= "DeviceError" or not msg:find("timed out after 2 s", 1, true)
     or not msg:find("rank 1 never came", 1, true) or not msg:find("rank 0 called all_reduce(float32[3], sum)", 1, true)
     or msg:find("c/", 1, true) then
    error("expected a DeviceError naming the rank that never came, got " .. tostring(e))
  end
  print("rank 0: " .. msg)
  dist.store.add("go", 1)
  wait_for("done")  -- rank 0 serves the store: stay until rank 1 is done with it
else
  wait_for("go")
  dist.store.add("done", 1)
end
print(("rank %d: timeout_names_ranks ok"):format(rank))
