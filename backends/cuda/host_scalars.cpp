// host_scalar_inputs and with_host_scalars (host_scalars.h): a GPU graph's 0-dim CPU inputs
// copied to the device at each call.
#include "host_scalars.h"

#include <memory>

#include "cuda_graphs.h"

namespace tc::backends {

HostScalars host_scalar_inputs(const capture::Graph& g) {
  HostScalars hs;
  std::vector<int> input_of(g.nodes.size(), -1);
  std::vector<bool> host(g.inputs.size(), false);
  bool any = false;
  for (size_t i = 0; i < g.inputs.size(); i++) {
    input_of[size_t(g.inputs[i])] = int(i);
    const Tensor& t = g.nodes[size_t(g.inputs[i])].fakes[0].tensor();
    host[i] = t.dim() == 0 && t.device().is_cpu();
    any |= host[i];
    if (!host[i] && t.device().is_cuda() && hs.device.is_cpu()) hs.device = t.device();
  }
  if (!any || hs.device.is_cpu()) return hs;
  auto is_host = [&](capture::Ref r) {
    const int in = input_of[size_t(g.view_root(r))];
    return in >= 0 && host[size_t(in)];
  };
  for (const capture::Node& n : g.nodes) {
    if (n.kind == capture::NodeKind::Input) continue;
    const OpSchema* s = n.kind == capture::NodeKind::Op ? &schema(n.op) : nullptr;
    for (size_t a = 0; a < n.args.size(); a++) {
      // a Lua function (External) would see a device tensor; a write would miss the host tensor
      const bool keeps_host = !s || (a < s->args.size() && s->args[a].mutated);
      if (!keeps_host) continue;
      for (capture::Ref r : n.args[a].refs)
        if (is_host(r)) return {};
    }
  }
  for (capture::Ref r : g.outputs)
    if (is_host(r)) return {};  // returned: the caller gets the host tensor, as eager
  hs.graph = g;
  for (size_t i = 0; i < g.inputs.size(); i++) {
    if (!host[i]) continue;
    hs.inputs.push_back(int(i));
    Value& f = hs.graph.nodes[size_t(g.inputs[i])].fakes[0];
    const Tensor& old = f.tensor();
    Tensor moved = Tensor::fake({}, {}, old.dtype(), hs.device);
    moved.set_requires_grad(old.requires_grad());
    moved.impl()->wrapped_number = old.is_wrapped_number();  // (type promotion is in the fakes already)
    f = Value(moved);
  }
  // everything else on that GPU (not: an op of the scalar alone, a CPU tensor, a second GPU)
  if (!on_one_gpu(hs.graph)) return {};
  return hs;
}

Compiled with_host_scalars(Compiled c, const HostScalars& hs, bool fixed) {
  struct State {
    capture::CompiledGraph inner;
    std::vector<int> inputs;
    std::vector<Tensor> fakes;  // each input's fake on the device
    bool fixed;
    std::vector<Tensor> slots;  // fixed: the device scalars (made at the first call)
  };
  auto st = std::make_shared<State>();
  st->inner = std::move(c.run);
  st->inputs = hs.inputs;
  for (int i : hs.inputs) st->fakes.push_back(hs.graph.nodes[size_t(hs.graph.inputs[size_t(i)])].fakes[0].tensor());
  st->fixed = fixed;
  // a device scalar like the fake (a Lua number stays a wrapped number for eager's promotion)
  auto scalar = [](const Tensor& fake) {
    Tensor t = Tensor::empty({}, fake.dtype(), fake.device());
    t.impl()->wrapped_number = fake.is_wrapped_number();
    return t;
  };
  c.run = [st, scalar](capture::GraphInputs inputs) {
    std::vector<const Tensor*> args(inputs.begin(), inputs.end());
    std::vector<Tensor> fresh;
    if (st->fixed && st->slots.empty())
      for (const Tensor& f : st->fakes) st->slots.push_back(scalar(f));
    if (!st->fixed) fresh.reserve(st->inputs.size());
    for (size_t k = 0; k < st->inputs.size(); k++) {
      const size_t i = size_t(st->inputs[k]);
      Tensor d = st->fixed ? st->slots[k] : scalar(st->fakes[k]);
      d.copy_from(*inputs[i]);
      if (!st->fixed) fresh.push_back(d);
      args[i] = st->fixed ? &st->slots[k] : &fresh.back();
    }
    return st->inner(args);
  };
  return c;
}

}  // namespace tc::backends
