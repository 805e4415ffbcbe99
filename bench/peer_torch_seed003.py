"""Seed 003's benchmark in PyTorch (the peer of scripts/examples/seed003_inception.lua): torchvision's
Inception-v3 trained with SGD(lr=0.01) on generated 16x3x512x512 batches, `logits.sum()` as the loss,
median step time after the first, eager vs torch.compile (default and max-autotune-no-cudagraphs /
reduce-overhead when asked). Lightning is not installed on the GPU machine, so this is the plain loop
the Trainer runs (zero_grad, forward, backward, step), timed with CUDA events as the guide's
Benchmark callback does.
    python3 bench/peer_torch_seed003.py [--batch 16] [--size 512] [--steps 10] [--modes eager,default]
"""
import argparse, statistics, time
import torch
import torchvision.models as models

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=16)
p.add_argument("--size", type=int, default=512)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--modes", default="eager,default")
a = p.parse_args()
torch.manual_seed(0)
dev = "cuda"
data = [torch.randn(a.batch, 3, a.size, a.size, device=dev) for _ in range(4)]

def run(mode):
    torch.manual_seed(0)
    model = models.inception_v3(init_weights=True).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    def step(x):
        out = model(x)
        return (out.logits if hasattr(out, "logits") else out).sum()
    f = step if mode == "eager" else torch.compile(step, mode=None if mode == "default" else mode)
    times = []
    t0 = time.perf_counter()
    first = None
    for i in range(a.steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        opt.zero_grad(set_to_none=True)
        loss = f(data[i % len(data)])
        loss.backward()
        opt.step()
        e.record()
        torch.cuda.synchronize()
        if i == 0:
            first = time.perf_counter() - t0
        else:
            times.append(s.elapsed_time(e) / 1000)
    med = statistics.median(times)
    print(f"torch {mode}: first step {first:.2f} s, median step {med:.4f} s", flush=True)
    return med

res = {m: run(m) for m in a.modes.split(",")}
if "eager" in res:
    for m, t in res.items():
        if m != "eager":
            print(f"torch speedup {m}: {res['eager'] / t:.2f}x")
print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
