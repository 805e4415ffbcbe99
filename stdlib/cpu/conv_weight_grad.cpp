// _conv2d_weight_backward, conv2d's weight gradient: its meta rule and its kernel written in ops, so
// that it runs on any device (the CPU kernel, and CUDA's when cuDNN's backward-filter does not take
// the problem): per group, a convolution of the padded input by the output gradient with batch and
// channels swapped and stride and dilation swapped, cut to the kernel size.
#include "cpu/linalg.h"

namespace tc {

namespace cpu {

std::array<int64_t, 4> conv2d_padding(const Value& padding, const IntList& dil, int64_t kh, int64_t kw) {
  if (padding.is_string()) {
    bool same = padding.str() == "same";
    int64_t th = same ? dil[0] * (kh - 1) : 0, tw = same ? dil[1] * (kw - 1) : 0;
    return {th / 2, th - th / 2, tw / 2, tw - tw / 2};
  }
  IntList p = expand_param("conv2d", "padding", padding.ints(), 2);
  return {p[0], p[0], p[1], p[1]};
}

}  // namespace cpu

Metas meta_conv2d_weight_backward(const Stack& a) {
  const Tensor &g = a[0].tensor(), &x = a[1].tensor();
  const IntList& ws = a[2].ints();
  int64_t groups = a[6].to_int();
  TC_CHECK(is_floating(x.dtype()) && g.dtype() == x.dtype(), DTypeError,
           "_conv2d_weight_backward(): expected grad_out and input of one floating dtype, got %s and %s",
           dtype_name(g.dtype()), dtype_name(x.dtype()));
  TC_CHECK(g.dim() == 4 && x.dim() == 4 && ws.size() == 4 && g.sizes()[0] == x.sizes()[0] && groups > 0 &&
               ws[0] == g.sizes()[1] && ws[1] * groups == x.sizes()[1],
           ShapeError,
           "_conv2d_weight_backward(): grad_out %s, input %s and weight size %s (groups %lld) do not belong to one "
           "convolution",
           shape_string(g.sizes()).c_str(), shape_string(x.sizes()).c_str(),
           shape_string(Shape(ws.begin(), ws.end())).c_str(), (long long)groups);
  return {contiguous_meta(Shape(ws.begin(), ws.end()), x.dtype(), x.device())};
}

Tensor conv2d_weight_grad_by_ops(const Stack& a) {
  const Tensor &g = a[0].tensor(), &x = a[1].tensor();
  const IntList& ws = a[2].ints();
  IntList stride = cpu::expand_param("conv2d", "stride", a[3].ints(), 2);
  IntList dil = cpu::expand_param("conv2d", "dilation", a[5].ints(), 2);
  int64_t groups = a[6].to_int(), kh = ws[2], kw = ws[3];
  auto pad = cpu::conv2d_padding(a[4], dil, kh, kw);
  bool padded = pad[0] || pad[1] || pad[2] || pad[3];
  Tensor xp = padded ? call1(Op::pad, {x, IntList{pad[2], pad[3], pad[0], pad[1]}}) : x;
  int64_t cg = x.sizes()[1] / groups, og = g.sizes()[1] / groups;
  TensorList parts;
  for (int64_t k = 0; k < groups; k++) {
    Tensor xg = groups == 1 ? xp : call1(Op::narrow, {xp, 2, k * cg + 1, cg});
    Tensor gg = groups == 1 ? g : call1(Op::narrow, {g, 2, k * og + 1, og});
    Tensor r = call1(Op::conv2d, {call1(Op::transpose, {xg, 1, 2}), call1(Op::transpose, {gg, 1, 2}), Value(), dil,
                                  Value(IntList{0, 0}), stride, 1});
    r = call1(Op::narrow, {call1(Op::narrow, {r, 3, 1, kh}), 4, 1, kw});
    parts.push_back(call1(Op::transpose, {r, 1, 2}));
  }
  return groups == 1 ? parts[0] : call1(Op::cat, {parts, 1});
}

Stack cpu_conv2d_weight_backward(const Stack& a, const Metas& m) {
  Tensor out = empty_from_meta(m[0]);
  out.copy_from(conv2d_weight_grad_by_ops(a));
  return {Value(out)};
}

}  // namespace tc
