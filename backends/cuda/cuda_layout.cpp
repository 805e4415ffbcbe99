// Which extern nodes write channels-last results (cuda_layout.h).
#include "cuda_layout.h"

#include <cstdlib>
#include <cstring>

#include "cuda_library_calls.h"

namespace tc::backends::cuda {
namespace {

bool float_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16;
}

// conv2d of a 4-D input (batched), its weight a tensor of the result's dtype.
bool channels_last_conv(const capture::Node& n) {
  if (n.kind != capture::NodeKind::Op || n.op != Op::conv2d || n.args.size() != 7 ||
      n.fakes.size() != 1)
    return false;
  if (n.args[0].kind != capture::NodeArg::Kind::Ref ||
      n.args[1].kind != capture::NodeArg::Kind::Ref)
    return false;
  const Tensor& y = n.fakes[0].tensor();
  return y.dim() == 4 && float_dtype(y.dtype());
}

}  // namespace

std::function<std::shared_ptr<const capture::ExternalFn>(const capture::Node&,
                                                         bool reads_channels_last)>
channels_last_calls(const capture::Graph& g) {
  const char* e = std::getenv("TC_CUDA_LAYOUT");
  if (e && std::strcmp(e, "nchw") == 0) return nullptr;
  // Training graphs keep NCHW: a forward whose ops differentiate inputs (its saved values go to an
  // NCHW backward), a backward (weight gradients).
  bool differentiated = false, requires_grad = false;
  for (const capture::Node& n : g.nodes) {
    if (n.kind == capture::NodeKind::Op && n.op == Op::_conv2d_weight_backward) return nullptr;
    differentiated = differentiated || (n.kind == capture::NodeKind::Op && !n.no_grad);
    requires_grad = requires_grad ||
                    (n.kind == capture::NodeKind::Input && n.fakes[0].tensor().requires_grad());
  }
  if (differentiated && requires_grad) return nullptr;
  return [](const capture::Node& n,
            bool reads_channels_last) -> std::shared_ptr<const capture::ExternalFn> {
    if (channels_last_conv(n)) return conv2d_channels_last_call();
    if (n.kind != capture::NodeKind::External || !reads_channels_last) return nullptr;
    // cat_norm_relu_call's node (cuda_fuse.cpp): its pieces, then 4 tensors and eps
    const int pieces = int(n.args.size()) - 5;
    if (pieces >= 1 && n.ext->name == cat_norm_relu_call(pieces)->name)
      return cat_norm_relu_call(pieces, true);
    return nullptr;
  };
}

}  // namespace tc::backends::cuda
