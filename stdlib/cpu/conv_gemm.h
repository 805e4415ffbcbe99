// Internal interface of conv2d's float32 fast path (conv_gemm.cpp): a blocked GEMM whose B
// panels are packed straight from the NCHW input (implicit im2col, all samples side by side as
// columns), with an AVX-512 micro-kernel. Used by conv.cpp when the CPU has AVX-512.
#pragma once
#include <cstdint>

namespace tc::cpu {

// One 2-D convolution (conv1d: H = KH = 1). Input [N, C, H, W], weight [O, C/groups, KH, KW],
// output [N, O, OH, OW], all contiguous float32.
struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, groups;
  int64_t sh, sw, ph, pw, dh, dw, OH, OW;
};

// True when this CPU can run conv2d_f32_fast (AVX-512 F/BW/VL/DQ).
bool conv_fast_available();

// y = conv(x, w) + bias (bias may be null). Runs in parallel over column blocks / channel chunks.
void conv2d_f32_fast(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y);

}  // namespace tc::cpu
