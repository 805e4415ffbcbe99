"""PyTorch's side of bench/train_step.lua: the same training steps (densenet121: torchvision's
DenseNet-121, batch 16 x 3x128x128, Adam; gpt2: bench/torch_models.py's GPT-2 small, batch 8 x 256,
AdamW; cnn: the same small CNN, batch 32 x 3x32x32, Adam), PyTorch's default optimizer
implementation (foreach on CUDA), TF32 allowed.
Usage: python3 bench/peer_torch_train.py MODEL [DEVICE [ITERS [VARIANTS]]]
VARIANTS: eager,default,reduce-overhead (torch.compile modes; n/a without torch.compile).
Prints "torch MODEL VARIANT <median ms> <first call s> <iterations>" or "torch MODEL VARIANT n/a: <error>"."""
import os, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
model_name = sys.argv[1] if len(sys.argv) > 1 else "cnn"
device = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cuda")
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 10
variants = (sys.argv[4] if len(sys.argv) > 4 else "eager,default,reduce-overhead").split(",")
budget = float(os.environ.get("TC_BENCH_BUDGET", "60"))
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(0)

if model_name == "densenet121":
    import torchvision
    model = torchvision.models.densenet121().to(device)
    x, y = torch.randn(16, 3, 128, 128, device=device), torch.randint(0, 1000, (16,), device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_of = lambda: F.cross_entropy(model(x), y)
elif model_name == "gpt2":
    from torch_models import GPT2
    model = GPT2().to(device)
    x, y = torch.randint(0, 50257, (8, 256), device=device), torch.randint(0, 50257, (8, 256), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_of = lambda: F.cross_entropy(model(x).view(-1, 50257), y.view(-1))
elif model_name == "cnn":
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10)).to(device)
    x, y = torch.randn(32, 3, 32, 32, device=device), torch.randint(0, 10, (32,), device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_of = lambda: F.cross_entropy(model(x), y)
else:
    sys.exit("peer_torch_train.py: MODEL must be densenet121, gpt2 or cnn")
model.train()


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = loss_of()
    loss.backward()
    opt.step()
    return loss


sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
name = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
print(f"# torch {torch.__version__} {model_name} on {device} ({name})", flush=True)
for v in variants:
    try:
        fn = train_step
        if v != "eager":
            if not hasattr(torch, "compile"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
            fn = torch.compile(train_step, mode=None if v == "default" else v)
        t0 = time.perf_counter()
        fn()
        sync()
        first = time.perf_counter() - t0
        fn()
        sync()
        times, start = [], time.perf_counter()
        for _ in range(iters):
            s = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - s) * 1e3)
            if time.perf_counter() - start > budget:
                break
        print(f"torch {model_name} {v} {statistics.median(times):.3f} {first:.2f} {len(times)}", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on with the next variant
        print(f"torch {model_name} {v} n/a: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}", flush=True)
