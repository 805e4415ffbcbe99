// Device-wide prefix sums (stdlib/cuda/scan.cpp): the building block of the radix sort
// (sort.cpp) and of the ops whose output size depends on the data (nonzero, masked_select).
#pragma once
#include <string>

#include "cuda/runtime.h"

namespace tc::cuda {

// data[i] = data[0] + ... + data[i-1] for n contiguous int64 values in device memory, in place.
void exclusive_scan(void* data, int64_t n, int device);

// __device__ i64 block_exclusive(i64 v, i64* total): the exclusive prefix sum of v over a block of
// exactly 256 threads (and the block's total); every thread must call it. Needs the prelude.
const std::string& block_exclusive_src();

}  // namespace tc::cuda
