"""PyTorch's device time for each convolution and batch_norm problem of DenseNet-121's training
step (batch 16, 3x128x128), to put next to tc's per-problem figures (TC_CUDNN_STATS=2 and
TC_CUDA_PROFILE=2 on bench/train_step.lua densenet121): per distinct problem, the forward, input
gradient (dgrad) and weight gradient (wgrad) of the convolution, or batch_norm's training forward
and backward, each the mean of 20 back-to-back calls after a spin that keeps the device busy while
the host enqueues them (device time, as in a CUDA graph replay). TF32 allowed, cuDNN's heuristics
(benchmark off), as bench/peer_torch_train.py's eager step.
Usage: python3 scripts/dev/densenet_torch_problems.py"""
import collections
import torch

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"
N = 16


def problems():
    """(kind, C, H, O, k, stride, pad) -> count, and (C, H) of every batch_norm -> count."""
    conv, bn = collections.Counter(), collections.Counter()
    conv[("conv", 3, 128, 64, 7, 2, 3)] += 1
    bn[(64, 64)] += 1
    c, h = 64, 32
    for i, n in enumerate((6, 12, 24, 16)):
        for j in range(n):
            cin = c + 32 * j
            bn[(cin, h)] += 1
            conv[("conv", cin, h, 128, 1, 1, 0)] += 1
            bn[(128, h)] += 1
            conv[("conv", 128, h, 32, 3, 1, 1)] += 1
        c += 32 * n
        if i < 3:
            bn[(c, h)] += 1
            conv[("conv", c, h, c // 2, 1, 1, 0)] += 1
            c, h = c // 2, h // 2
    bn[(c, h)] += 1
    return conv, bn


def device_us(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(3_000_000)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / reps


def main():
    print(f"# torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    conv, bn = problems()
    tot = collections.Counter()
    for (kind, C, H, O, k, s, p), n in conv.items():
        x = torch.randn(N, C, H, H, device=dev)
        w = torch.randn(O, C, k, k, device=dev)
        y = torch.nn.functional.conv2d(x, w, None, s, p)
        g = torch.randn_like(y)
        cb = torch.ops.aten.convolution_backward
        f = device_us(lambda: torch.nn.functional.conv2d(x, w, None, s, p))
        d = device_us(lambda: cb(g, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, False, False])) if C != 3 else 0
        wg = device_us(lambda: cb(g, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [False, True, False]))
        print(f"torch conv N{N} C{C} {H}x{H} O{O} k{k}x{k} s{s} p{p} x{n}: fwd {f:.1f} dgrad {d:.1f} wgrad {wg:.1f} us")
        tot["fwd"] += n * f
        tot["dgrad"] += n * d
        tot["wgrad"] += n * wg
    for (C, H), n in bn.items():
        x = torch.randn(N, C, H, H, device=dev, requires_grad=True)
        w = torch.ones(C, device=dev, requires_grad=True)
        b = torch.zeros(C, device=dev, requires_grad=True)
        rm, rv = torch.zeros(C, device=dev), torch.ones(C, device=dev)
        g = torch.randn(N, C, H, H, device=dev)
        fwd = lambda: torch.nn.functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
        f = device_us(fwd)
        y = fwd()
        fb = device_us(lambda: torch.autograd.grad(y, (x, w, b), g, retain_graph=True))
        print(f"torch batch_norm N{N} C{C} {H}x{H} x{n}: fwd {f:.1f} bwd {fb:.1f} us")
        tot["bn_fwd"] += n * f
        tot["bn_bwd"] += n * fb
    print("torch totals per step (ms): " + ", ".join(f"{k} {v / 1e3:.3f}" for k, v in tot.items()))


main()
