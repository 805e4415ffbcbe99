"""PyTorch's side of bench/codegen_cuda.lua's kernels section on the GPU: eager and torch.compile
(default mode) for the same shapes, median of N synchronized calls. Usage:
python3 bench/peer_torch_codegen_cuda.py. Prints "key value" lines (ms; *_compile_s: first call)."""
import time
import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True


def median_ms(f, iters, *args):
    f(*args)
    torch.cuda.synchronize()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        f(*args)
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[(iters - 1) // 2]


def compare(name, f, iters, *args):
    print(f"{name}_torch_eager_ms {median_ms(f, iters, *args):.4f}", flush=True)
    cf = torch.compile(f, dynamic=False)
    t0 = time.perf_counter()
    cf(*args)
    torch.cuda.synchronize()
    print(f"{name}_torch_compile_s {time.perf_counter() - t0:.2f}", flush=True)
    print(f"{name}_torch_compiled_ms {median_ms(cf, iters, *args):.4f}", flush=True)


def chain(v):
    v = v * 1.5 + 0.25
    v = torch.relu(v) - 0.5
    v = torch.sigmoid(v) * v
    v = torch.tanh(v) + v
    return torch.abs(v) * 0.75


with torch.no_grad():
    x = torch.randn(64 * 1024 * 1024, device="cuda")
    compare("chain", chain, 20, x)
    for rows, cols in ((8192, 1024), (4096, 4096), (1024, 32768)):
        m = torch.randn(rows, cols, device="cuda")
        w, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
        compare(f"softmax_{rows}x{cols}", lambda v: torch.softmax(v, -1), 20, m)
        compare(f"layer_norm_{rows}x{cols}", lambda v, c=cols: F.layer_norm(v, (c,), w, b), 20, m)
    r = torch.randn(1024 * 1024, 64, device="cuda")
    compare("sum_last_1Mx64", lambda v: v.sum(1), 20, r)
    compare("sum_leading_1Mx64", lambda v: v.sum(0), 20, r)
