"""Where PyTorch's eager training step spends device time (the twin of tc's TC_CUDA_PROFILE=1 on
bench/train_step.lua): torch.profiler over N steps of bench/peer_torch_train.py's step, the device
ms per step and its kernels grouped by family (the first words of the kernel's name), then the top
kernels. Float32 with TF32 allowed.
Usage: python3 bench/profile_torch_train.py MODEL [N (5)]   (densenet121, gpt2)"""
import collections, re, sys, time
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity

sys.path.insert(0, "bench")
model_name, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_default_device("cuda")
torch.manual_seed(0)
if model_name == "gpt2":
    from torch_models import GPT2
    model, V = GPT2(), 50257
    x, y = torch.randint(0, V, (8, 256)), torch.randint(0, V, (8, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_of = lambda: F.cross_entropy(model(x).view(-1, V), y.view(-1))
else:
    import torchvision
    model = getattr(torchvision.models, model_name)()
    x, y = torch.randn(16, 3, 128, 128), torch.randint(0, 1000, (16,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_of = lambda: F.cross_entropy(model(x), y)
model.train()


def step():
    opt.zero_grad(set_to_none=True)
    loss_of().backward()
    opt.step()


for _ in range(3):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(n):
        step()
    torch.cuda.synchronize()
wall = (time.perf_counter() - t0) * 1e3 / n
ev = [e for e in prof.key_averages() if e.device_time_total > 0]
ev.sort(key=lambda e: -e.device_time_total)
total = sum(e.device_time_total for e in ev) / n / 1e3
print(f"torch {model_name} eager step: {total:.3f} ms device, {wall:.3f} ms wall (profiled) per step")
fam = collections.Counter()
for e in ev:
    fam[" ".join(re.findall(r"[A-Za-z]+", e.key)[:3])] += e.device_time_total / n / 1e3
print("  by family: " + "; ".join(f"{k} {v:.3f}" for k, v in fam.most_common(15)))
for e in ev[:25]:
    print(f"  {e.device_time_total / n / 1e3:8.4f} ms x{e.count / n:<5.1f} {e.key[:110]}")
