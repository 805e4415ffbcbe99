# Writes tests/lua/api_gaps_cases.lua: PyTorch 1.13's values for test_api_gaps.lua (index_add,
# index_fill, repeat_interleave, where(cond), index tensors in any dim, printoptions, full backward
# hooks). Index values are shifted to tc's 1-based convention where they appear.
# Run: /usr/bin/python3 tests/lua/gen_api_gaps_cases.py > tests/lua/api_gaps_cases.lua
import torch

def lua(v):
    if isinstance(v, torch.Tensor):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(lua(e) for e in v) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return str(v)

out = {}
x = torch.arange(12.).view(3, 4)
w = torch.arange(12.).view(3, 4) / 10

# index_add: values and the gradients of sum(w * result) for self and source
xs = x.clone().requires_grad_()
src = (torch.arange(9.).view(3, 3) - 4).requires_grad_()
r = xs.index_add(1, torch.tensor([0, 3, 0]), src, alpha=2)
(r * w).sum().backward()
out["index_add_dim2"] = r
out["index_add_dim2_grad_self"] = xs.grad
out["index_add_dim2_grad_source"] = src.grad
out["index_add_dim1"] = x.index_add(0, torch.tensor([2, 0]), torch.ones(2, 4))

xs = x.clone().requires_grad_()
r = xs.index_fill(1, torch.tensor([0, 2]), -1.5)
(r * w).sum().backward()
out["index_fill_dim2"] = r
out["index_fill_dim2_grad"] = xs.grad
out["index_fill_dim1"] = x.index_fill(0, torch.tensor([1]), torch.tensor(7.))

a = torch.arange(6).view(2, 3)
out["repeat_interleave_flat"] = a.repeat_interleave(2)
out["repeat_interleave_dim2"] = a.repeat_interleave(2, dim=1)
out["repeat_interleave_tensor_dim2"] = a.repeat_interleave(torch.tensor([1, 0, 2]), dim=1)
out["repeat_interleave_tensor_dim1"] = a.repeat_interleave(torch.tensor([2, 1]), dim=0)
out["repeat_interleave_counts"] = torch.repeat_interleave(torch.tensor([1, 0, 2])) + 1
af = torch.arange(6.).view(2, 3).requires_grad_()
(af.repeat_interleave(torch.tensor([1, 0, 2]), dim=1) * torch.arange(6.).view(2, 3)).sum().backward()
out["repeat_interleave_tensor_grad"] = af.grad
af.grad = None
(af.repeat_interleave(2, dim=0) * torch.arange(12.).view(4, 3)).sum().backward()
out["repeat_interleave_int_grad"] = af.grad

cond = torch.tensor([[True, False, True], [False, True, False]])
out["where_cond"] = [t + 1 for t in torch.where(cond)]

# index tensors in any dim (tc: x[{ {}, idx }]); idx values shifted by 1 in the Lua expressions
y = torch.arange(24.).view(2, 3, 4)
out["get_dim2"] = y[:, [2, 0]]
out["get_int_then_dim3"] = y[0, :, torch.tensor([[1, 2], [3, 3]])]
out["get_dim3_after_int"] = y[:, 1, [0, 3]]
out["get_dim2_then_int"] = y[:, [0, 2], 1]
out["get_range_then_dim3"] = y[:, 1:3, [3, 0]]
z = y.clone(); z[:, [2, 0]] = -1
out["set_dim2_number"] = z
z = y.clone(); z[:, :, [1, 3]] = torch.tensor([10., 20.])
out["set_dim3_broadcast"] = z
z = y.clone(); z[[1]] = 5
out["set_dim1"] = z
yg = y.clone().requires_grad_()
(yg[:, [2, 0, 2]] * torch.arange(24.).view(2, 3, 4)).sum().backward()
out["get_dim2_grad"] = yg.grad
yg = y.clone().requires_grad_()
v = torch.tensor([[1., 2., 3., 4.]]).requires_grad_()
base = yg * 1
base[:, [0]] = v
(base * torch.arange(24.).view(2, 3, 4)).sum().backward()
out["set_dim2_grad_base"] = yg.grad
out["set_dim2_grad_value"] = v.grad

# printoptions: reprs
def rep(opts, t):
    torch.set_printoptions(**opts)
    s = repr(t)
    torch.set_printoptions(profile="default")
    return s
out["print_precision2"] = rep({"precision": 2}, torch.tensor([1.23456, 2.5]))
out["print_threshold5_edge2"] = rep({"threshold": 5, "edgeitems": 2}, torch.arange(10))
out["print_linewidth20"] = rep({"linewidth": 20}, torch.arange(12.))
out["print_sci_true"] = rep({"sci_mode": True}, torch.tensor([1.5, 2.25]))
out["print_sci_false"] = rep({"sci_mode": False}, torch.tensor([1e-5, 1.0]))
out["print_short"] = rep({"profile": "short"}, torch.arange(64.).view(8, 8) / 7)
out["print_precision6_2d"] = rep({"precision": 6, "linewidth": 40}, torch.arange(6.).view(2, 3) / 3)

# full backward hooks: grad_input/grad_output seen, and a replacement grad_input
class Lin(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.weight = torch.nn.Parameter(torch.tensor([[1., -2., 0.5], [0.25, 1., -1.]]))
    def forward(s, x):
        return x @ s.weight.t()
m = Lin()
seen = {}
def hook(mod, gi, go):
    seen["gi"], seen["go"] = gi[0].clone(), go[0].clone()
    return (gi[0] * 3,)
m.register_full_backward_hook(hook)
xi = torch.tensor([[1., 2., 3.], [-1., 0., 2.]], requires_grad=True)
(m(xi) * torch.tensor([[1., 2.], [3., 4.]])).sum().backward()
out["hook_grad_input"] = seen["gi"]
out["hook_grad_output"] = seen["go"]
out["hook_x_grad"] = xi.grad
out["hook_weight_grad"] = m.weight.grad

class Two(torch.nn.Module):
    def forward(s, a, k, b):
        return a * b + a, b.sum()
t2 = Two()
seen2 = {}
def hook2(mod, gi, go):
    seen2["gi"] = [g.clone() if g is not None else None for g in gi]
    seen2["go"] = [g.clone() if g is not None else None for g in go]
    return (gi[0] * 0 + 1, None, gi[2])
t2.register_full_backward_hook(hook2)
pa = torch.tensor([1., 2., 3.], requires_grad=True)
pb = torch.tensor([4., 5., 6.], requires_grad=True)
o1, o2 = t2(pa, torch.tensor([0.]), pb)
(o1 * torch.tensor([1., 2., 3.]) + o2 * 2).sum().backward()
out["hook2_gi1"] = seen2["gi"][0]
out["hook2_gi3"] = seen2["gi"][2]
out["hook2_go1"] = seen2["go"][0]
out["hook2_go2"] = seen2["go"][1]
out["hook2_a_grad"] = pa.grad
out["hook2_b_grad"] = pb.grad

print("-- generated by /usr/bin/python3 tests/lua/gen_api_gaps_cases.py with PyTorch %s" % torch.__version__)
print("return {")
for k in sorted(out):
    print("  %s = %s," % (k, lua(out[k])))
print("}")
