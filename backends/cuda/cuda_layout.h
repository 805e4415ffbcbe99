// The CUDA backend's layout choice: convolutions write channels-last (NHWC) results, and lowering
// keeps that layout through what follows them (lower::LowerOptions::channels_last_call).
//
//   lower::LowerOptions lo;
//   lo.channels_last_call = channels_last_calls(graph);  // null: TC_CUDA_LAYOUT=nchw, training
//
// Why: cuDNN's fastest engines for ResNet's and DenseNet's 3x3 convolutions on small maps are
// channels-last only (H100, batch 16: 13-18 us against 27-40 us NCHW on 8x8 and 4x4 maps).
// Copying layouts around each convolution ate that gain; keeping the layout between convolutions
// does not copy at all: conv2d's result is channels-last, the generated batch_norm / relu /
// residual-add / pool kernels read it and store their results channels-last (iterating N, H, W, C,
// so accesses stay coalesced), the next convolution reads that, and DenseNet's fused
// cat + batch_norm + relu reads and writes channels-last pieces. Graph inputs and outputs stay
// contiguous (a contiguous input is copied into the layout by the first convolution's call).
#pragma once
#include <functional>
#include <memory>

#include "tc/capture/graph.h"

namespace tc::backends::cuda {

// For lowering: the channels-last call replacing an extern node (float 4-D conv2d; the
// channels-last cat + batch_norm + relu for that call's node when its pieces are channels-last), or
// null. Null itself when TC_CUDA_LAYOUT=nchw, and for training graphs (g differentiates inputs, or
// computes a convolution's weight gradient): their backward convolutions are NCHW and would copy
// every channels-last operand.
std::function<std::shared_ptr<const capture::ExternalFn>(const capture::Node&,
                                                         bool reads_channels_last)>
channels_last_calls(const capture::Graph& g);

}  // namespace tc::backends::cuda
