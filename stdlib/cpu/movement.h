// Internal to the movement group: the CPU kernels of stdlib/cpu/movement_{copy,index}.cpp,
// called by cpu_movement (movement.cpp) once the meta rule has checked the arguments. Each takes
// the bound arguments and the output's meta and returns the result tensor.
#pragma once
#include <cstring>

#include "tc/ops.h"

namespace tc::cpu {

// movement_copy.cpp: block copies between views of the input and the output.
Tensor contiguous_kernel(const Stack& a, const TensorMeta& m);
Tensor clone_kernel(const Stack& a, const TensorMeta& m);
Tensor copy_kernel(const Stack& a, const TensorMeta& m);
Tensor to_device_kernel(const Stack& a, const TensorMeta& m);
Tensor cat_kernel(const Stack& a, const TensorMeta& m);
Tensor stack_kernel(const Stack& a, const TensorMeta& m);
Tensor flip_kernel(const Stack& a, const TensorMeta& m);
Tensor roll_kernel(const Stack& a, const TensorMeta& m);
Tensor repeat_kernel(const Stack& a, const TensorMeta& m);
Tensor tri_kernel(Op op, const Stack& a, const TensorMeta& m);  // tril, triu
Tensor pad_kernel(const Stack& a, const TensorMeta& m);

// movement_index.cpp: copies driven by index values or masks.
Tensor index_select_kernel(const Stack& a, const TensorMeta& m);
Tensor gather_kernel(const Stack& a, const TensorMeta& m);
Tensor scatter_kernel(Op op, const Stack& a, const TensorMeta& m);  // scatter, scatter_add
Tensor masked_select_kernel(const Stack& a);
Tensor nonzero_kernel(const Stack& a);

// cat() skips legacy empty tensors (1-D with size 0), like PyTorch.
inline bool cat_skips(const Tensor& t) {
  return t.dim() == 1 && t.sizes()[0] == 0;
}

// Unsigned integer of `size` bytes: element copies that do not care about the dtype.
template <typename F>
void visit_itemsize(size_t size, F&& fn) {
  switch (size) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    case 8:
      return fn.template operator()<uint64_t>();
  }
  TC_ASSERT(false, "unexpected item size");
}

}  // namespace tc::cpu
