"""PyTorch's side of bench/compare_torch_cuda.sh (issue 12's table), the same sections and keys as
bench/compare_torch_cuda.lua: eager, torch.compile default and mode="reduce-overhead", float32 with
TF32 allowed, each time the median of N calls synchronized per call; "first_call" is the first call
after torch._dynamo.reset() (cold when TORCHINDUCTOR_CACHE_DIR is a fresh folder).
Usage: python3 bench/peer_torch_compare_cuda.py SECTION   (seed_whole, seed_regional, resnet50,
densenet121, gpt2, kernels). Prints "key value" lines (ms). TC_BENCH_QUICK=1: the kernels section
without reduce-overhead."""
import os, statistics, sys, time
import torch
import torch.nn.functional as F

from torch_models import GPT2, SeedModel

section = sys.argv[1]
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_default_device("cuda")
torch.manual_seed(0)
sync = torch.cuda.synchronize


def say(key, value):
    print(f"{key} {value:.4f}", flush=True)


def median_ms(f, iters, *args):
    for _ in range(3):  # warm-up (reduce-overhead: warm-up call, recording, first replay)
        f(*args)
    sync()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        f(*args)
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def first_call_ms(f, *args):
    torch._dynamo.reset()
    sync()
    t0 = time.perf_counter()
    f(*args)
    sync()
    return (time.perf_counter() - t0) * 1e3


def wanted(key):  # TC_BENCH_MODES="ro": only those modes (keys, comma-separated), as the Lua side
    only = os.environ.get("TC_BENCH_MODES")
    return not only or key in only.split(",")


def three_ways(prefix, model, x, iters):
    if wanted("eager"):
        say(prefix + "_eager_ms", median_ms(model, iters, x))
    for mode, key in (("default", "default"), ("reduce-overhead", "ro")):
        if not wanted(key):
            continue
        cm = torch.compile(model, mode=mode)
        say(f"{prefix}_{key}_first_call_ms", first_call_ms(cm, x))
        say(f"{prefix}_{key}_ms", median_ms(cm, iters, x))


def seed_regional():
    x = torch.randn(10, 10)
    with torch.no_grad():  # one eager call first, as bench/compare_torch_cuda.lua's regional section
        SeedModel().eval()(x)
    sync()
    for mode, key in (("default", "default"), ("reduce-overhead", "ro")):
        model = SeedModel().eval()
        for layer in model.layers:
            layer.compile(mode=mode)

        def step(v):  # reduce-overhead: a new step may overwrite the layers' static outputs
            torch.compiler.cudagraph_mark_step_begin()
            return model(v)
        say(f"seed_regional_{key}_first_call_ms", first_call_ms(step, x))
        say(f"seed_regional_{key}_ms", median_ms(step, 200, x))


def vision(name):
    import torchvision
    return lambda: three_ways(name, getattr(torchvision.models, name)().eval(), torch.randn(16, 3, 128, 128), 20)


def chain(v):
    v = v * 1.5 + 0.25
    v = torch.relu(v) - 0.5
    v = torch.sigmoid(v) * v
    v = torch.tanh(v) + v
    return torch.abs(v) * 0.75


def kernels():
    n = 64 * 1024 * 1024
    x, y = torch.randn(n), torch.empty(n)
    m, w, b = torch.randn(16384, 1024), torch.randn(1024), torch.randn(1024)
    tall = torch.randn(1024 * 1024, 16)
    say("copy_ms", median_ms(lambda: y.copy_(x), 20))
    cases = (("chain", chain, x), ("softmax", lambda v: torch.softmax(v, -1), m),
             ("layer_norm", lambda v: F.layer_norm(v, (1024,), w, b), m),
             ("sum_all", lambda v: torch.sum(v), x), ("sum_dim0", lambda v: torch.sum(v, 0), tall))
    quick = os.environ.get("TC_BENCH_QUICK") == "1"  # torch.compile default only (a short device call)
    for name, f, arg in cases:
        say(f"{name}_eager_ms", median_ms(f, 20, arg))
        say(f"{name}_default_ms", median_ms(torch.compile(f), 20, arg))
        if not quick:
            say(f"{name}_ro_ms", median_ms(torch.compile(f, mode="reduce-overhead"), 20, arg))


sections = {
    "seed_whole": lambda: three_ways("seed", SeedModel().eval(), torch.randn(10, 10), 200),
    "seed_regional": seed_regional,
    "resnet50": vision("resnet50"),
    "densenet121": vision("densenet121"),
    "gpt2": lambda: three_ways("gpt2", GPT2().eval(), torch.randint(0, 50257, (8, 256)), 20),
    "kernels": kernels,
}
with torch.no_grad():
    sections[section]()
