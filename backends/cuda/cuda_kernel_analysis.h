// What the CUDA code generator's launch planning (cuda_kernel_shape.cpp) and its emitter
// (cuda_codegen.cpp) both read of a loop-IR kernel: scalar ops' arity, which values exist only after a
// reduction, and the loads and stores of a pointwise kernel that can move as vectors.
#pragma once
#include <set>
#include <utility>
#include <vector>

#include "lower/loop_ir.h"

namespace tc::backends::cuda {

// (this header is private to the two files: the loop IR's names without lower::)
using lower::Instr;
using lower::Kernel;
using lower::Opc;
using lower::ReduceOp;
using lower::ScalarOp;
using lower::Stmt;
using lower::Ty;
using lower::Val;

inline bool is_float(Ty t) { return t == Ty::F32 || t == Ty::F64; }

// Operands of a scalar op (lower/scalar_ops.def).
int arity(ScalarOp op);

// Per Val of `k`: whether it depends on a reduction's result (an Acc), i.e. exists only after a
// Loop finished. (Operands point backwards.)
std::vector<char> after_reductions(const Kernel& k);

// The loads and stores of a pointwise kernel whose index steps by one along the innermost outer
// dim (vector accesses): Load Vals, and (stmt, store) pairs.
struct VectorAccesses {
  std::set<Val> loads;
  std::set<std::pair<int, int>> stores;
  int min_bytes = 16, max_bytes = 0;  // element sizes among them
};
VectorAccesses vector_accesses(const Kernel& k);

}  // namespace tc::backends::cuda
