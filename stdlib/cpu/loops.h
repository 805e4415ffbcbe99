// Strided N-operand loops over a shape for CPU kernels: dims are coalesced where every operand
// allows it, the innermost dim is handed to a callback as a 1-D strided run, and the outer
// iterations are split across threads for large tensors.
//
//   // out = a + b over broadcast views (all strides in bytes):
//   tc::cpu::strided_loop<3>(out.sizes(), {out_ptr, a_ptr, b_ptr}, {so, sa, sb},
//       [](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
//         for (int64_t i = 0; i < n; i++) *(float*)(p[0] + i*s[0]) = ...;
//       });
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "tc/error.h"
#include "tc/parallel.h"
#include "tc/tensor.h"

namespace tc::cpu {

// Byte strides of `t` broadcast to `shape` (0 where t is broadcast). t.dim() <= shape.size().
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  int64_t off = (int64_t)shape.size() - t.dim();
  for (int64_t d = 0; d < t.dim(); d++)
    out[off + d] = t.sizes()[d] == 1 && shape[off + d] != 1 ? 0 : t.strides()[d] * (int64_t)t.itemsize();
  return out;
}

constexpr int64_t kMaxLoopDims = 64;

template <size_t N, typename F>
void strided_loop(const Shape& shape, std::array<char*, N> base, const std::array<Shape, N>& strides, F&& fn,
                  int64_t grain = 32768) {
  // Coalesce: drop size-1 dims, merge d into d-1 when contiguous-compatible for all operands.
  // Fixed-size buffers: this runs for every eager op, and heap allocation would dominate tiny ones.
  TC_ASSERT((int64_t)shape.size() <= kMaxLoopDims, "tensor rank above 64");
  int64_t sizes[kMaxLoopDims];
  int64_t st[N][kMaxLoopDims];
  int64_t nd = 0;
  for (size_t d = 0; d < shape.size(); d++) {
    if (shape[d] == 1) continue;
    if (shape[d] == 0) return;
    bool merge = nd > 0;
    for (size_t k = 0; k < N && merge; k++) merge = st[k][nd - 1] == strides[k][d] * shape[d];
    if (merge) {
      sizes[nd - 1] *= shape[d];
      for (size_t k = 0; k < N; k++) st[k][nd - 1] = strides[k][d];
    } else {
      sizes[nd] = shape[d];
      for (size_t k = 0; k < N; k++) st[k][nd] = strides[k][d];
      nd++;
    }
  }
  if (nd == 0) {  // a single element
    sizes[0] = 1;
    for (size_t k = 0; k < N; k++) st[k][0] = 0;
    nd = 1;
  }
  int64_t inner = sizes[nd - 1], outer = 1;
  for (int64_t d = 0; d < nd - 1; d++) outer *= sizes[d];
  std::array<int64_t, N> inner_st;
  for (size_t k = 0; k < N; k++) inner_st[k] = st[k][nd - 1];
  auto run = [&](int64_t b, int64_t e) {
    int64_t idx[kMaxLoopDims];  // multi-index of outer iteration b
    int64_t rem = b;
    for (int64_t d = nd - 2; d >= 0; d--) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
    }
    std::array<char*, N> p;
    for (size_t k = 0; k < N; k++) {
      p[k] = base[k];
      for (int64_t d = 0; d < nd - 1; d++) p[k] += idx[d] * st[k][d];
    }
    for (int64_t it = b; it < e; it++) {
      fn(p, inner_st, inner);
      for (int64_t d = nd - 2; d >= 0; d--) {  // increment the multi-index
        for (size_t k = 0; k < N; k++) p[k] += st[k][d];
        if (++idx[d] < sizes[d]) break;
        for (size_t k = 0; k < N; k++) p[k] -= st[k][d] * sizes[d];
        idx[d] = 0;
      }
    }
  };
  if (outer * inner >= grain && outer > 1) {
    int64_t g = std::max<int64_t>(1, grain / inner);
    parallel_for(0, outer, g, run);
  } else if (outer == 1 && inner >= 2 * grain) {
    // one long run: split it
    parallel_for(0, inner, grain, [&](int64_t b, int64_t e) {
      std::array<char*, N> p;
      for (size_t k = 0; k < N; k++) p[k] = base[k] + b * inner_st[k];
      fn(p, inner_st, e - b);
    });
  } else {
    run(0, outer);
  }
}

}  // namespace tc::cpu
