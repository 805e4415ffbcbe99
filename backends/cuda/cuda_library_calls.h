// The library calls the CUDA backend puts into graphs as External nodes before lowering
// (cuda_fuse.h): linear with a cuBLASLt epilogue, attention writing merged heads. Each has a name
// that says all it does, so an AOT package stores the call by name and its loader gets the same
// call back (library_call).
//
//   auto fn = linear_act_call(tc::cuda::Act::Relu, /*bias=*/true, /*residual=*/false);
//   library_call(fn->name) -> a call doing the same; library_call("G.scale") -> null
#pragma once
#include <memory>
#include <string>

#include "tc/capture/graph.h"
#include "tc/cuda_blaslt.h"

namespace tc::backends::cuda {

// linear(x, w[, b]) [-> act] [-> + residual] as one tc::cuda::linear_act call; its arguments are
// x, w, then b (with bias), then the residual (with residual). When cuBLASLt declines at run time
// it runs the unfused eager ops.
std::shared_ptr<const capture::ExternalFn> linear_act_call(tc::cuda::Act act, bool bias, bool residual);

// scaled_dot_product_attention(q, k, v, is_causal = c, scale = s) [B, H, L, E] with its heads
// merged (transpose(1, 2), reshape to [B, L, H * E]) as one fused-attention launch writing the
// merged layout; its arguments are q, k, v, is_causal, scale (or none). When the fused kernel
// declines at run time it runs the eager ops.
std::shared_ptr<const capture::ExternalFn> attention_merged_heads_call();

// cat(p_1 .. p_pieces, dim = 2) -> batch_norm(eval: running statistics, weight, bias) -> relu of
// float32 [N, C_k, H, W] pieces as one kernel that reads the pieces where they are (DenseNet's
// layers, whose concatenation has no other reader); its arguments are the pieces, weight, bias,
// running mean, running variance, eps. Other dtypes or layouts run the eager ops.
// `channels_last`: the result is channels-last, and so are the pieces the kernel reads (others
// are copied into that layout first): cuda_layout.h.
std::shared_ptr<const capture::ExternalFn> cat_norm_relu_call(int pieces,
                                                              bool channels_last = false);

// conv2d(input, weight, bias, stride, padding, dilation, groups) writing a channels-last result
// (tc::cuda::conv2d_channels_last: cuDNN, or cuBLASLt for a 1x1 convolution, reading a
// channels-last input): cuda_layout.h. One per call site: it keeps what its shapes determine.
std::shared_ptr<const capture::ExternalFn> conv2d_channels_last_call();

// batch_norm(x, weight, bias, running_mean, running_var, training = true, momentum, eps,
// num_batches_tracked) -> relu as one kernel (tc::cuda::batch_norm_train with relu): the batch
// statistics, the running statistics' update and the normalized output with relu applied as it
// is stored; its arguments are batch_norm's nine. Where that kernel declines (parameters of mixed
// dtypes), the eager ops.
std::shared_ptr<const capture::ExternalFn> norm_relu_call();

// Its backward with relu's derivative folded in: _batch_norm_backward(mul(g, gt(y, 0)), input,
// weight, running_mean, running_var, training, eps) as one kernel reading g and relu's result y
// (tc::cuda::batch_norm_backward with relu_result); its arguments are g, y, then
// _batch_norm_backward's after its first; its outputs the input, weight and bias gradients.
std::shared_ptr<const capture::ExternalFn> relu_norm_backward_call();

// The library call named `name` (an ExternalFn::name made above), or null.
std::shared_ptr<const capture::ExternalFn> library_call(const std::string& name);

}  // namespace tc::backends::cuda
