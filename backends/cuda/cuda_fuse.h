// Library epilogues for the CUDA backend: before lowering, chains
//
//   linear(x, w[, b])  [-> relu | gelu(approximate = "tanh")]  [-> add(that, r) | add(r, that)]
//
// whose intermediate results have no other reader become ONE External node that runs
// tc::cuda::linear_act (cuBLASLt: bias, activation and the residual read as C in the product's
// epilogue) — one library call instead of a product and a pointwise kernel that reads and writes
// the whole result again. The residual only without an activation (cuBLASLt applies it after C).
// Node indices are kept (errors keep naming the user's line): the chain's last node becomes the
// call, the absorbed nodes become unused zeros (lazy: never computed). Tiny products (every dim
// <= 16: generated reductions), graphs with dynamic dims and dtypes other than float32/16/bf16
// are left alone. When cuBLASLt declines at run time (layouts, no algorithm), the call runs the
// unfused eager ops.
//
// Likewise float32 attention that the fused kernel takes, followed by the head merge
//
//   scaled_dot_product_attention(q, k, v) [B, H, L, E] -> transpose(2, 3) -> reshape / view [B, L, H*E]
//
// becomes one call whose kernel writes the merged layout (no copy kernel for the merge).
//
// And DenseNet's pre-activation on concatenated features, float32 with more than 4 pieces
//
//   cat(pieces, 2) -> batch_norm(training = false) -> relu
//
// becomes one kernel reading each piece where it is (cat_norm_relu_call): the concatenation is
// never written nor read back (H100: 0.32 ms of DenseNet-121's 3.1 ms of device time per call).
//
// And a training step's normalization with batch statistics followed by its activation
//
//   batch_norm(training = true) -> relu
//
// becomes one kernel that applies the relu as it stores the output (norm_relu_call): no relu
// kernel reading and writing the normalized activations again. Its backward
//
//   _batch_norm_backward(mul(g, gt(relu result, 0)), x, ...)
//
// likewise becomes one kernel that applies relu's derivative as it reads g
// (relu_norm_backward_call).
#pragma once
#include "tc/capture/graph.h"

namespace tc::backends::cuda {

// The rewritten graph; `fused` gets the number of chains replaced. TC_CUDA_EPILOGUES=0 disables.
capture::Graph fuse_library_epilogues(const capture::Graph& g, int* fused);

}  // namespace tc::backends::cuda
