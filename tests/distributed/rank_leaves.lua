-- Run by run.sh as two plain tcrun processes (no launcher to stop the survivor), the store's
-- default timeout (300 s): rank 1 fails before its collective; rank 0, waiting in all_reduce,
-- must fail at once with a DeviceError that says rank 1 left, not after the timeout.
local tc = require "tc"
local dist = require "tc.distributed"
dist.init_process_group{backend = "gloo"}
local rank = dist.get_rank()
if rank == 1 then error("rank one fails before the all_reduce") end
local t = tc.ones(3)
local ok, e = pcall(dist.all_reduce, t)
assert(not ok, "all_reduce returned although rank 1 never called it")
local msg = type(e) == "table" and e.message or tostring(e)
if type(e) ~= "table" or e.kind ~= "DeviceError" or not msg:find("rank 1", 1, true) or msg:find("timed out", 1, true) then
  error("expected a DeviceError saying rank 1 left, got " .. tostring(e))
end
print("rank 0: " .. msg)
print("rank 0: rank_leaves ok")
