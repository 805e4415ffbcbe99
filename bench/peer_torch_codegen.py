"""PyTorch's eager CPU time for the kernels of bench/codegen_cpu.lua (same shapes, threads and
best-of-N). Usage: python3 bench/peer_torch_codegen.py THREADS. Prints "key value" lines (ms)."""
import sys, time
import torch
import torch.nn.functional as F

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads())
torch.manual_seed(0)


def best_ms(f, iters, *args):
    f(*args)
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        f(*args)
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def chain(v):
    v = v * 1.5 + 0.25
    v = torch.relu(v) - 0.5
    v = torch.sigmoid(v) * v
    v = torch.tanh(v) + v
    return torch.abs(v) * 0.75


with torch.no_grad():
    x = torch.randn(16 * 1024 * 1024)
    print(f"chain_torch_ms {best_ms(chain, 5, x):.4f}", flush=True)
    m, w, b = torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)
    print(f"softmax_torch_ms {best_ms(lambda v: torch.softmax(v, -1), 20, m):.4f}", flush=True)
    print(f"layer_norm_torch_ms {best_ms(lambda v: F.layer_norm(v, (1024,), w, b), 20, m):.4f}", flush=True)
