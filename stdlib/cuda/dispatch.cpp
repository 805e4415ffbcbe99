// cuda_dispatch: the eager entry for ops on CUDA tensors (called by tc::call after the meta
// rule). Views share the CPU view kernel (it only builds strides); every group tries its native
// CUDA kernels; an op (or a case of one) without a native kernel runs through the host fallback:
// the CUDA arguments are copied to the host, the CPU kernel runs, results are copied back (and
// arguments written in place are written back), so every op works on CUDA, natively or not.
#include <chrono>

#include "cuda/runtime.h"
#include "tc/cuda.h"

namespace tc {

namespace {

Stack host_fallback(Op op, const Stack& a, const Metas& m) {
  Device target{};
  for (auto& t : m)
    if (t.device.is_cuda()) target = t.device;
  const OpSchema& s = schema(op);
  Stack h = a;
  std::vector<std::pair<Tensor, Tensor>> written;  // (cuda original, host copy)
  auto to_host = [&](const Tensor& t, bool mutated) -> Tensor {
    if (!t.defined() || !t.device().is_cuda()) return t;
    if (target.is_cpu()) target = t.device();
    Tensor c = Tensor::empty(t.sizes(), t.dtype());
    c.copy_from(t);
    c.set_requires_grad(t.requires_grad());
    c.impl()->wrapped_number = t.is_wrapped_number();
    if (mutated) written.emplace_back(t, c);
    return c;
  };
  for (size_t i = 0; i < h.size(); i++) {
    bool mutated = i < s.args.size() && s.args[i].mutated;
    if (h[i].is_tensor()) {
      h[i] = Value(to_host(h[i].tensor(), mutated));
    } else if (h[i].is_tensor_list()) {
      TensorList l = h[i].tensors();
      for (auto& t : l) t = to_host(t, mutated);
      h[i] = Value(l);
    } else if (h[i].is_device() && h[i].device().is_cuda()) {
      target = h[i].device();
      h[i] = Value(Device{});
    }
  }
  if (target.is_cpu()) target = Device{DeviceType::CUDA, 0};
  Stack r = call(op, h);
  for (auto& [orig, host] : written) Tensor(orig).copy_from(host);
  auto back = [&](const Tensor& t) -> Tensor {
    if (!t.defined()) return t;
    for (auto& [orig, host] : written)
      if (t.same(host)) return orig;
    Tensor d = Tensor::empty(t.sizes(), t.dtype(), target);
    d.copy_from(t);
    d.set_requires_grad(t.requires_grad());
    return d;
  };
  for (auto& v : r) {
    if (v.is_tensor()) v = Value(back(v.tensor()));
    else if (v.is_tensor_list()) {
      TensorList l = v.tensors();
      for (auto& t : l) t = back(t);
      v = Value(l);
    }
  }
  return r;
}

Stack cuda_dispatch_impl(Op op, const Stack& a, const Metas& m) {
  cuda::ensure_initialized();
  const OpSchema& s = schema(op);
  if (s.group == OpGroup::view) return cpu_view(op, a, m);
  Stack out;
  bool done = false;
  switch (s.group) {
    case OpGroup::pointwise: done = cuda::pointwise(op, a, m, &out); break;
    case OpGroup::reduction: done = cuda::reduction(op, a, m, &out); break;
    case OpGroup::movement:
      done = (op == Op::cat && cuda::cat_contiguous(a, m[0], &out)) || cuda::movement(op, a, m, &out);
      break;
    case OpGroup::linalg: done = cuda::linalg(op, a, m, &out); break;
    case OpGroup::nn: done = cuda::nn(op, a, m, &out); break;
    case OpGroup::creation: done = cuda::creation(op, a, m, &out); break;
    default: break;
  }
  if (done) {
    cuda::dispatch_stats().native++;
    return out;
  }
  cuda::dispatch_stats().fallback++;
  return host_fallback(op, a, m);
}

}  // namespace

// TC_CUDA_PROFILE (cuda/runtime.h): time and launches per op.
Stack cuda_dispatch(Op op, const Stack& a, const Metas& m) {
  if (!cuda::profile_level()) return cuda_dispatch_impl(op, a, m);
  auto t0 = std::chrono::steady_clock::now();
  int64_t l0 = cuda::launch_count();
  Stack r = cuda_dispatch_impl(op, a, m);
  if (cuda::profile_level() >= 2 && !m.empty() && m[0].device.is_cuda()) cuda::sync_stream(m[0].device.index);
  cuda::profile_op(op, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(),
                   cuda::launch_count() - l0);
  return r;
}

}  // namespace tc
