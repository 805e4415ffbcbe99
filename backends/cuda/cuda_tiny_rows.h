// Whether a tiny graph's steps are row-local, so that its single kernel may give each row of
// outer iterations to one warp and sync warps (__syncwarp) instead of the block between steps.
//
//   int c = tiny_warp_row(g);   // 10 for the seed model's [10, 10] layers; 0: keep __syncthreads
//
// Rows are runs of `c` consecutive flat outer iterations (f / c), the same for every step. The
// rule: every element that any step writes (an Output, or a Temp of the arena) is read and written
// only by outer iterations of its own row (element e belongs to row e / c), decided by evaluating
// each access's index for every outer and loop iteration (the graph is static and small); Temps
// sharing arena bytes must overlay element for element. Data-dependent indices, two-level
// kernels, written graph inputs and rows longer than a warp answer 0.
#pragma once
#include "lower/loop_ir.h"

namespace tc::backends::cuda {

int tiny_warp_row(const lower::LoweredGraph& g);

}  // namespace tc::backends::cuda
