"""Where PyTorch's time goes on the GPU for bench/compare_torch_cuda's models (the twin of tc's
TC_CUDA_PROFILE=1): torch.profiler over N eager calls (MODE=eager) or calls of torch.compile
(MODE=default), the top kernels by device time per call. Float32 with TF32 allowed.
Usage: python3 bench/profile_torch_cuda.py SECTION [MODE]   (resnet50, densenet121, gpt2)"""
import sys
import torch
from torch.profiler import profile, ProfilerActivity

sys.path.insert(0, "bench")
from torch_models import GPT2

section, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "eager")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_default_device("cuda")
torch.manual_seed(0)
if section == "gpt2":
    model, x = GPT2().eval(), torch.randint(0, 50257, (8, 256))
else:
    import torchvision
    model, x = getattr(torchvision.models, section)().eval(), torch.randn(16, 3, 128, 128)
f = model if mode == "eager" else torch.compile(model)
n = 10
with torch.no_grad():
    for _ in range(3):
        f(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            f(x)
        torch.cuda.synchronize()
ev = [e for e in prof.key_averages() if e.device_time_total > 0]
ev.sort(key=lambda e: -e.device_time_total)
total = sum(e.device_time_total for e in ev) / n / 1e3
print(f"torch {section} {mode}: {total:.3f} ms device per call")
for e in ev[:25]:
    print(f"  {e.device_time_total / n / 1e3:8.4f} ms x{e.count / n:<5.1f} {e.key[:110]}")
