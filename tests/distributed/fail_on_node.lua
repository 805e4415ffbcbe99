-- Run by run.sh under two `tcrun --nnodes 2` launchers (args: the failing global rank, a FIFO
-- nobody writes): every rank joins the process group; the failing rank raises an error, the
-- others block opening the FIFO, where no collective and no store notices anything: only the
-- launchers, telling each other, can stop them.
local dist = require "tc.distributed"
dist.init_process_group{backend = "gloo"}
local rank = dist.get_rank()
if rank == tonumber(arg[1]) then error(("rank %d gives up"):format(rank)) end
io.open(arg[2], "r")  -- blocks until a writer opens the FIFO: never
print("unreachable")
