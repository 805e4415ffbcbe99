"""PyTorch's CUDA eager numbers for the same cases as bench/cuda_eager.cpp: large pointwise GB/s
against a device-to-device copy, and per-op launch overhead (µs). Run on the GPU machine."""
import sys, time
import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 28
d = torch.device("cuda")
print("device:", torch.cuda.get_device_name())
x = torch.randn(n, device=d)
y = torch.randn(n, device=d)
o = torch.empty(n, device=d)


def time_ms(iters, f):
    f()
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e3 / iters)
    return best


gb1 = 4.0 * n / 1e9
copy = time_ms(20, lambda: o.copy_(x))
copy_gbs = 2 * gb1 / copy * 1e3
print(f"d2d copy: {copy:.3f} ms, {copy_gbs:.0f} GB/s")
cases = [
    ("relu", 2 * gb1, lambda: torch.relu(x)),
    ("add", 3 * gb1, lambda: x + y),
    ("mul_scalar", 2 * gb1, lambda: x * 2.5),
    ("gelu", 2 * gb1, lambda: torch.nn.functional.gelu(x)),
    ("to_bf16", 1.5 * gb1, lambda: x.to(torch.bfloat16)),
    ("add_bcast_row", 2 * gb1, lambda: x.view(-1, 1024) + y[:1024]),
    ("sum", 1 * gb1, lambda: x.sum()),
]
for name, b, f in cases:
    ms = time_ms(20, f)
    print(f"{name:14s} {ms:.3f} ms  {b / ms * 1e3:.0f} GB/s  {100 * b / ms * 1e3 / copy_gbs:.0f}% of copy")
a, b, c = torch.randn(100000, device=d), torch.randn(1 << 24, device=d), torch.randn(64, 50000, device=d)
m = b > 0
for name, f in [("sort_100k", lambda: torch.sort(a, stable=True)), ("sort_16M", lambda: torch.sort(b, stable=True)),
                ("sort_64x50k", lambda: torch.sort(c, stable=True)), ("topk_100k_k100", lambda: torch.topk(a, 100)),
                ("nonzero_16M", lambda: torch.nonzero(m)), ("masked_select_16M", lambda: torch.masked_select(b, m))]:
    print(f"{name:18s} {time_ms(5, f):.3f} ms")
s = torch.ones(1, device=d)
for name, f in [("add_tensor_tensor", lambda: s + s), ("mul_tensor_number", lambda: s * 2),
                ("relu", lambda: torch.relu(s)), ("sum", lambda: s.sum())]:
    print(f"overhead {name:18s} {time_ms(20000, f) * 1e3:.2f} us/op")
