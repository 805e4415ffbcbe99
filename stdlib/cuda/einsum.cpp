// einsum on CUDA: the CPU group's decomposition (stdlib/cpu/linalg_einsum.cpp, built from ops:
// bmm through cuBLAS, sum, device copies) run on CUDA tensors. Floating dtypes; integer einsum
// stays on the host fallback. Errors were raised by the meta rule already.
#include "cpu/linalg.h"
#include "cuda/runtime.h"

namespace tc::cuda {

bool einsum(const Stack& a, const Metas& metas, Stack* result) {
  const TensorList& ops = a[1].tensors();
  if (ops.empty() || !is_floating(ops[0].dtype())) return false;
  for (const Tensor& t : ops)
    if (!t.device().is_cuda()) return false;
  *result = einsum_by_ops(a, metas);
  return true;
}

}  // namespace tc::cuda
