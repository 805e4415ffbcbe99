// einsum on CUDA: the CPU group's decomposition (stdlib/cpu/linalg_einsum.cpp, built from ops:
// bmm through cuBLAS (integer_linalg.cpp for integers), sum, device copies) run on CUDA tensors.
// Errors were raised by the meta rule already.
#include "cpu/linalg.h"
#include "cuda/runtime.h"

namespace tc::cuda {

bool einsum(const Stack& a, const Metas& metas, Stack* result) {
  const TensorList& ops = a[1].tensors();
  if (ops.empty()) return false;
  for (const Tensor& t : ops)
    if (!t.device().is_cuda()) return false;
  *result = einsum_by_ops(a, metas);
  return true;
}

}  // namespace tc::cuda
