// mode = "max-autotune" for generated kernels: a few launch variants per kernel (block size,
// vector accesses or unrolling, the split of a reduction), compiled in the same NVRTC program as
// the planned one, each timed once per distinct launch when the graph is compiled, the fastest
// recorded in the disk cache next to the cubins (kind "cuda-tune", keyed by the program's code
// key, tc / codegen / NVRTC versions, arch and device name), so a warm start does not time again.
//
//   code.shapes[k] = with_variants(k, plan_kernel(k, noalias));  // generate(): extra functions
//   Program p = load(...);
//   autotune(p, code.key, &report);  // p.static_launches[step].shape: the fastest variant
//
// Timing runs on scratch buffers of the graph's sizes (zero-filled, allocated for the timing
// and freed after), not on the caller's tensors: a kernel that updates a buffer in place can be
// run many times, and the timing happens before any CUDA graph capture. Only graphs with static
// sizes are tuned (their launch geometry is fixed at compile time).
#pragma once
#include <string>
#include <vector>

#include "cuda_program.h"

namespace tc::backends::cuda {

// The planned shapes of `k` followed by its tuning variants (KernelShape::variant), for kernels
// with one planned shape and static sizes; the planned shapes alone for the others.
std::vector<KernelShape> with_variants(const lower::Kernel& k, std::vector<KernelShape> planned);

// Times the variants of every launch of `p` (static graphs; nothing in compile-only mode or for a
// tiny graph) or reads the choices from the disk cache, and sets each step's shape and grid.
// `report` gets tuned_kernels, tuned_cached and tune_ms added.
void autotune(Program& p, const std::string& code_key, capture::CompileReport& report);

// The disk-cache form of the choices (one "step shape" line per tuned step), and its reading:
// false for text that does not fit `p` (then the launches are timed again).
std::string choices_text(const Program& p);
bool apply_choices(Program& p, const std::string& text);

}  // namespace tc::backends::cuda
