"""PyTorch's side of bench/optim_step.lua: the same optimizers over the same parameter list (a
conv net's shapes: 50 x {(c, c, 3, 3), (c,), (c,)}, c = 32 * (1 + i % 8), 11.5M values) with random
gradients, per step, foreach off and on, and fused=True where this torch has it (CUDA). Run: python3 bench/peer_torch_optim.py [DEVICE [STEPS]]
Prints "optimizer per_param|foreach|fused ms_per_step" lines like the Lua bench."""
import sys, time
import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
torch.manual_seed(0)
shapes = [s for i in range(1, 51) for c in [32 * (1 + i % 8)] for s in [(c, c, 3, 3), (c,), (c,)]]
params = [torch.randn(s, device=device, requires_grad=True) for s in shapes]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
print(f"# {len(params)} parameter tensors, {sum(p.numel() for p in params)} values, on {device}, torch {torch.__version__}")
sync = (lambda: torch.cuda.synchronize()) if device != "cpu" else (lambda: None)
cases = [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=1e-4)), ("Adam", dict(lr=1e-3)),
         ("AdamW", dict(lr=1e-3, weight_decay=1e-2)), ("RMSprop", dict(lr=1e-3, momentum=0.9)), ("Adagrad", dict(lr=1e-2))]
for name, kw in cases:
    for mode in ("per_param", "foreach", "fused"):
        try:  # this torch may lack fused for the class or the device (also raised at the first step)
            opt = getattr(torch.optim, name)(params, **(dict(fused=True) if mode == "fused" else dict(foreach=mode == "foreach")), **kw)
            with torch.no_grad():
                opt.step()
        except (TypeError, RuntimeError, ValueError) as e:
            print(f"{name} {mode} n/a: {str(e).splitlines()[0][:80]}")
            continue
        with torch.no_grad():
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                opt.step()
            sync()
        print(f"{name} {mode} {(time.perf_counter() - t0) * 1000 / steps:.3f}")
