// Pointwise ops as scalar code (pointwise.cpp).
#pragma once
#include "lower_internal.h"

namespace tc::lower {

// The type operand `arg` (of dtype `arg_dtype`) is converted to before op's scalar code, given the
// op's compute type `ct`.
Ty operand_ty(Op op, int arg, Ty ct, DType arg_dtype);

// The scalar code of pointwise `op` (bound arguments `a`) on converted operands `x`; `out` is the
// compute type of its result.
Val emit_pointwise(KernelBuilder& kb, Op op, const Stack& a, const std::vector<Val>& x, Ty ct, Ty out);

}  // namespace tc::lower
