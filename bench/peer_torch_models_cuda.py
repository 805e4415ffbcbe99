"""PyTorch's eager CUDA forward time for the models of bench/models_cuda.lua (same architectures and
inputs; no grad, eval mode, TF32 allowed). Usage: python3 bench/peer_torch_models_cuda.py [MODEL...]
Prints "<name> <best ms> <median ms> <iterations>" per model (synchronized per call)."""
import statistics, sys, time
import torch
import torch.nn as nn
import torchvision

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(0)
wanted = set(sys.argv[1:])
d = torch.device("cuda")

from torch_models import SeedModel  # noqa: E402


class ConvLoop(nn.Module):
    """50 convolutions per call with one weight (bench/models_cuda.lua's conv loops)."""

    def __init__(self, cin, cout, k, pad):
        super().__init__()
        self.w, self.pad = torch.randn(cout, cin, k, k, device=d) * 0.02, pad

    def forward(self, x):
        for _ in range(50):
            y = torch.nn.functional.conv2d(x, self.w, None, 1, self.pad)
        return y


tv = torchvision.models
models = [
    ("conv3x3_x50", lambda: ConvLoop(256, 256, 3, 1), lambda: torch.randn(16, 256, 16, 16, device=d), 20),
    ("conv1x1_x50", lambda: ConvLoop(1024, 256, 1, 0), lambda: torch.randn(16, 1024, 8, 8, device=d), 20),
    ("seed_64_layers", SeedModel, lambda: torch.randn(10, 10, device=d), 100),
    ("resnet50", tv.resnet50, lambda: torch.randn(16, 3, 128, 128, device=d), 20),
    ("densenet121", tv.densenet121, lambda: torch.randn(16, 3, 128, 128, device=d), 20),
]
for name, make, inp, iters in models:
    if wanted and name not in wanted:
        continue
    model, x = make().to(d).eval(), inp()
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"{name} {min(times):.4f} {statistics.median(times):.4f} {iters}", flush=True)
