// Groups whose native CUDA kernels are not written yet answer "not handled": cuda_dispatch then
// runs them through the host fallback. Each moves to its own file when it gets kernels.
#include "cuda/runtime.h"

namespace tc::cuda {

bool movement(Op, const Stack&, const Metas&, Stack*) { return false; }
bool nn(Op, const Stack&, const Metas&, Stack*) { return false; }
bool creation(Op, const Stack&, const Metas&, Stack*) { return false; }

}  // namespace tc::cuda
