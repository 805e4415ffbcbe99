"""PyTorch's per-op eager overhead for the same tiny ops as bench/eager_overhead.lua (µs per op).
Run with an interpreter that has torch (Debian: /usr/bin/python3)."""
import sys, time
import torch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"  # or "cuda"
torch.set_num_threads(torch.get_num_threads())
x = torch.ones(1, device=device)
sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)


def measure(name, fn):
    fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    print(f"{name} {best / N * 1e6:.3f}")


measure("add_tensor_tensor", lambda: x + x)
measure("mul_tensor_number", lambda: x * 2)
measure("relu_method", lambda: x.relu())
