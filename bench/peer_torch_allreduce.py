# PyTorch's side of bench/ddp_scaling.lua's all-reduce: a 256 MB float32 all_reduce over NCCL
# (the same NCCL library the machine ships), median of 10, as "key value" lines from rank 0.
# Run: torchrun --nproc-per-node N bench/peer_torch_allreduce.py
import os, statistics, time
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
x = torch.ones(64 * 1024 * 1024, device=dev)
dist.all_reduce(x)
ts = []
for _ in range(10):
    dist.barrier(); torch.cuda.synchronize()
    t0 = time.perf_counter(); dist.all_reduce(x); torch.cuda.synchronize()
    ts.append(time.perf_counter() - t0)
t = statistics.median(ts)
b = x.numel() * 4
if rank == 0:
    print(f"allreduce_256MB_ms {t * 1e3:.4f}")
    print(f"allreduce_algbw_GBps {b / t / 1e9:.4f}")
    print(f"allreduce_busbw_GBps {b / t / 1e9 * 2 * (world - 1) / world:.4f}")
dist.destroy_process_group()
