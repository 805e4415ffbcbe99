"""PyTorch's eager CPU forward time for the models of bench/models_cpu.lua (same architectures,
inputs and thread count; no grad, eval mode). Usage: python3 bench/peer_torch_models.py THREADS [MODEL...]
Prints "<name> <best ms> <median ms> <iterations>" per model."""
import statistics, sys, time
import torch
try:  # resnet, densenet, inception; without torchvision only the models defined here run
    import torchvision
except ImportError:
    torchvision = None

threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
torch.set_num_threads(threads)
torch.manual_seed(0)
wanted = set(sys.argv[2:])

from torch_models import GPT2, MyModule, SeedModel  # noqa: E402

models = [
    ("seed_64_layers", SeedModel, lambda: torch.randn(10, 10), 200),
    ("my_module", MyModule, lambda: torch.randn(10, 100), 500),
    ("gpt2_small", GPT2, lambda: torch.randint(0, 50257, (2, 64)), 3),
]
if torchvision is not None:
    tv = torchvision.models
    models[2:2] = [
        ("resnet18", tv.resnet18, lambda: torch.randn(2, 3, 128, 128), 5),
        ("resnet50", tv.resnet50, lambda: torch.randn(2, 3, 128, 128), 3),
        ("densenet121", tv.densenet121, lambda: torch.randn(2, 3, 128, 128), 3),
        ("inception_v3", lambda: tv.inception_v3(aux_logits=False, init_weights=False), lambda: torch.randn(1, 3, 299, 299), 3),
    ]
for name, make, inp, iters in models:
    if wanted and name not in wanted:
        continue
    model, x = make().eval(), inp()
    with torch.no_grad():
        model(x)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"{name} {min(times):.4f} {statistics.median(times):.4f} {iters}", flush=True)
