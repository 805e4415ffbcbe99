-- Run by run.sh: rank 1 fails; the others would wait forever in a barrier, so the launcher must
-- stop them.
local dist = require "tc.distributed"
dist.init_process_group{backend = "gloo"}
if dist.get_rank() == 1 then error("rank one gives up") end
dist.barrier()
print("unreachable")
