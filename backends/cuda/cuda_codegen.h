// Loop-IR kernels to CUDA C++ (one __global__ function each), compiled together by NVRTC: planned
// by cuda_kernel_shape.cpp, emitted by cuda_codegen.cpp.
//
//   KernelShape sh = plan_kernel(k, {});          // how the kernel maps onto threads
//   std::string src = emit_kernel(k, "tck_0", sh); // extern "C" __global__ void tck_0(...)
//
// Kernel ABI: one pointer per buffer parameter (in Kernel::buffers order; bool as u8), then one
// i64 per size parameter, then `i64 n_outer` (the number of outer iterations), then, in kernels
// that check index values (checks_index_values), `i64* tc_err`: the device's error word, where
// a bad index value flags its IndexCheck (stdlib/cuda's flag_error: code = check number, detail =
// the value). Runners may pass the error word to every kernel (extra parameters are ignored). Launch with
// `block` threads per block and ceil(n_outer * threads_per_row / (block * unroll)) blocks (or
// fewer): the kernel walks its outer iterations grid-stride.
//
// Strategies (KernelShape::threads_per_row):
//   1      pointwise kernels (no Loop stmt), and row kernels whose rows are tiny: one thread per
//          outer iteration, Loops run serially in the thread;
//   32     one warp per row: each lane takes every 32nd loop iteration, accumulators combined by
//          warp shuffles; rows of moderate length (and of unknown length);
//   block  one block per row (256 or 1024 threads): warp shuffles, then shared memory across warps.
// Code stmts of a row kernel run on every lane (values are uniform), their stores on lane 0 only.
// A two-level kernel (Kernel::outer_reductions) accumulates its outer reductions on each row's lane
// 0, combines them per block, and its last block to finish combines the blocks' results in block
// order and runs Kernel::final: launch it with at most kMaxTwoLevelBlocks blocks, also when
// n_outer is 0.
// Values are computed in the loop IR's compute types (float16/bfloat16 load and store as such,
// computed in float32); integer and bool semantics are eager CUDA's (stdlib/cuda/pointwise.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lower/loop_ir.h"

namespace tc::backends::cuda {

constexpr int64_t kMaxTwoLevelBlocks = 1024;

struct KernelShape {
  int threads_per_row = 1;  // 1, 32 or `block`
  int block = 256;
  bool index32 = false;  // the outer index space fits 31 bits: 32-bit index decomposition
  bool noalias = false;  // no written parameter aliases another parameter (__restrict__)
  // Pointwise kernels: outer iterations per thread and grid-stride step, `block` apart (unrolled,
  // so that the loads of several iterations are in flight at once).
  int unroll = 1;
  // A `__device__` function run by one block (its threads stride over the outer iterations):
  // a step of a tiny graph's single kernel (threads_per_row 1).
  bool device_fn = false;
  // A device_fn's outer iterations in rows of `warp_row` (<= 32) consecutive ones, a warp per row
  // (its lane i takes the row's i-th), so that each step reads only what earlier steps of the same
  // warp wrote (cuda_tiny_rows.h): the tiny graph syncs warps, not the block. 0: the block's
  // threads stride over the outer iterations. The function is declared TC_TINY_STEP (the tiny
  // graph's program defines it: __forceinline__ or __noinline__).
  int warp_row = 0;
  // Pointwise kernels: `vec` consecutive outer iterations per thread (the innermost outer dim's
  // extent a multiple of it), loads and stores whose index steps by one along it moved as one
  // 16-byte (or 8/32-byte) access when the address is aligned (checked at run time), else element
  // by element; a partial last group runs element by element.
  int vec = 1;
  // A split reduction (0: none; else its grid size): a kernel whose Loops only reduce (no stores,
  // none reading another's result) between Code stmts. Its rows are cut into tiles of W = min(n_outer, kSplitTile)
  // neighbouring rows, and the grid into `split / tiles` blocks per tile: thread i of a block takes
  // row tile * W + i % W and slice (blockIdx / tiles) * per + i / W (per = block / W slices a
  // block), reducing iterations slice, slice + (split / tiles) * per, ... of its row (a warp reads
  // neighbouring rows: coalesced for sums over leading dims, whose rows are columns); each block
  // combines its slices per row into a static slot, and the last block of a tile to finish
  // combines the tile's slots in block order and runs the Code stmts, a thread per row.
  // Deterministic (threads_per_row 1). Few long rows (a sum of everything), or many rows whose
  // loads step by one from row to row (column sums: bias and layer_norm gradients).
  int split = 0;
  // A tuning variant of mode = "max-autotune" (cuda_autotune.h): chosen only by timing, never by
  // choose_shape.
  bool variant = false;
  bool operator==(const KernelShape&) const = default;
};

constexpr int64_t kSplitBlocks = 1024;              // a split kernel's grid, at most; also its tiles' counters
constexpr int64_t kSplitSlots = kSplitBlocks * 32;  // a split kernel's blocks' results (split / tiles * n_outer)
constexpr int kSplitTile = 32;                      // rows per tile of a split kernel

// Integer value of a preamble instruction given the size parameters (nullopt when it depends on a
// size that `sizes` lacks, or on an instruction the host evaluator does not handle).
std::optional<int64_t> eval_uniform(const lower::Kernel& k, lower::Val v, const std::vector<int64_t>* sizes);

// Outer iterations and the longest Loop's iteration count per outer iteration (1 without Loops);
// nullopt when they depend on sizes not given.
struct KernelWork {
  int64_t outer = 1, row = 1;
  bool has_loops = false;
};
std::optional<KernelWork> kernel_work(const lower::Kernel& k, const std::vector<int64_t>* sizes);

// The strategies to compile for a kernel: one, chosen from its work when that is known at compile
// time; for a row kernel whose row length depends on dynamic sizes, two (a warp per row, a block
// per row) between which each launch chooses (choose_shape). 64-bit indices when the outer size
// is not known to fit 31 bits.
std::vector<KernelShape> plan_kernel(const lower::Kernel& k, bool noalias);

// How many elements one thread of a `vec` kernel takes (plan_kernel's choice for this kernel: 1
// when none of its loads and stores steps by one along the innermost outer dim, or that dim's
// extent does not allow it).
int vector_width(const lower::Kernel& k);
int choose_shape(const std::vector<KernelShape>& shapes, const KernelWork& w);

// Whether `k` checks index values on the device (loop IR flag_if): its last parameter is then
// the error word.
bool checks_index_values(const lower::Kernel& k);

// The C type of a buffer element in generated code (bool as u8).
const char* buffer_type(DType d);

// The CUDA C++ of `k` as `extern "C" __global__ void <name>(...)`. Throws tc::Error
// (CompileError) for a construct it cannot generate.
std::string emit_kernel(const lower::Kernel& k, const std::string& name, const KernelShape& shape);

// What every program of this backend starts with after stdlib/cuda's prelude() (helpers for the
// scalar ops and the cross-thread reductions).
const std::string& codegen_prelude();

}  // namespace tc::backends::cuda
