// The "nn" group of ops.def: dispatch to the per-op meta rules and kernels (nn_norm.cpp,
// nn_loss.cpp, nn_attention.cpp, nn_interpolate.cpp), and the two small ops embedding and dropout.
#include "cpu/nn.h"
#include "cpu/optim.h"

#include <cstring>

namespace tc {

Metas meta_nn(Op op, const Stack& a) {
  switch (op) {
#define X(name)  \
  case Op::name: \
    return {cpu::name##_meta(a)};
    TC_NN_OPS(X)
#undef X
    TC_FUSED_OPTIM_OPS:
      return {cpu::fused_optim_meta(op, a)};
    case Op::_batch_norm_backward:
      return cpu::batch_norm_backward_meta(a);
    default:
      break;
  }
  TC_ASSERT(false, "op is not in the nn group");
}

Stack cpu_nn(Op op, const Stack& a, const Metas& out) {
  switch (op) {
#define X(name)  \
  case Op::name: \
    return {Value(cpu::name##_kernel(a, out[0]))};
    TC_NN_OPS(X)
#undef X
    TC_FUSED_OPTIM_OPS:
      return {Value(cpu::fused_optim_kernel(op, a, out[0]))};
    case Op::_batch_norm_backward:
      return cpu::batch_norm_backward_kernel(a, out);
    default:
      break;
  }
  TC_ASSERT(false, "op is not in the nn group");
}

namespace cpu {

// ---- embedding(input, weight, padding_idx): rows of weight picked by 1-based ids
// ------------------
TensorMeta embedding_meta(const Stack& a) {
  const Tensor &ids = a[0].tensor(), &w = a[1].tensor();
  TC_CHECK(ids.dtype() == DType::Int64 || ids.dtype() == DType::Int32, DTypeError,
           "embedding(): expected ids of type int64 or int32, got %s", dtype_name(ids.dtype()));
  TC_CHECK(w.dim() == 2, ShapeError, "embedding(): 'weight' must be 2-D, got shape %s",
           shape_string(w.sizes()).c_str());
  if (!a[2].is_none()) {  // only affects gradients; checked like PyTorch (1-based, negative from
                          // the end)
    int64_t p = a[2].to_int(), n = w.sizes()[0];
    TC_CHECK(
        (p >= 1 && p <= n) || (p < 0 && p >= -n), ValueError,
        "embedding(): padding_idx (%lld) must be within num_embeddings (%lld; ids are 1-based)",
        (long long)p, (long long)n);
  }
  Shape out = ids.sizes();
  out.push_back(w.sizes()[1]);
  return contiguous_meta(out, w.dtype(), w.device());
}

Tensor embedding_kernel(const Stack& a, const TensorMeta& m) {
  Tensor ids = a[0].tensor().to(DType::Int64).contiguous(), w = a[1].tensor();
  if (w.strides()[1] != 1) w = w.contiguous();
  Tensor out = empty_from_meta(m);
  int64_t n = ids.numel(), rows = w.sizes()[0], d = w.sizes()[1], row_stride = w.strides()[0];
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < n; i++)
    TC_CHECK(id[i] >= 1 && id[i] <= rows, IndexError,
             "embedding(): index %lld is out of range for %lld embeddings (ids are 1-based)",
             (long long)id[i], (long long)rows);
  size_t item = w.itemsize();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, n, row_grain(d), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++)
      std::memcpy(dst + i * d * item, src + (id[i] - 1) * row_stride * item, d * item);
  });
  return out;
}

// ---- dropout(input, p, training): zero elements with probability p, scale the rest by 1/(1-p)
// -----
TensorMeta dropout_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  double p = a[1].to_double();
  TC_CHECK(p >= 0 && p <= 1, ValueError,
           "dropout probability has to be between 0 and 1, but got %g", p);
  if (a[2].to_bool() && p > 0) check_floating("dropout", "input", x);
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

Tensor dropout_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& x = a[0].tensor();
  double p = a[1].to_double();
  Tensor out = empty_from_meta(m);
  out.copy_from(x);
  if (!a[2].to_bool() || p == 0) return out;
  // keep ~ bernoulli(1 - p), the random stream of the creation group
  Tensor keep = p == 1 ? Tensor() : call1(Op::bernoulli, {x, 1.0 - p}).to(x.dtype()).contiguous();
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    T* o = out.data<T>();
    const T* k = keep.defined() ? keep.data<T>() : nullptr;
    A scale = p == 1 ? A(0) : A(1.0 / (1.0 - p));
    parallel_for(0, out.numel(), 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) o[i] = T(k ? A(o[i]) * (A(k[i]) * scale) : A(o[i]) * A(0));
    });
  });
  return out;
}

}  // namespace cpu
}  // namespace tc
