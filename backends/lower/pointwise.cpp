// Pointwise ops of ops.def as scalar code: one row per op mapping operands (already converted to
// the op's operand types) to a value, with eager's formulas (stdlib/cpu/pointwise_*.cpp).
#include <cmath>

#include "pointwise.h"
#include "tc/error.h"

namespace tc::lower {
namespace {

bool is_float_ty(Ty t) { return t == Ty::F32 || t == Ty::F64; }

Val num(KernelBuilder& kb, const Value& v, Ty t) {
  if (v.is_tensor()) {
    const Tensor& s = v.tensor();
    return is_floating(s.dtype()) ? (is_float_ty(t) ? kb.cf(s.item_double(), t) : kb.cast(kb.cf(s.item_double(), Ty::F64), t))
                                  : kb.cast(kb.ci(s.item_int(), Ty::I64), t);
  }
  if (v.is_double()) return is_float_ty(t) ? kb.cf(v.to_double(), t) : kb.cast(kb.cf(v.to_double(), Ty::F64), t);
  return kb.cast(kb.ci(v.to_int(), Ty::I64), t);
}

// clamp as eager: NaN stays, then lower bound, then upper bound.
Val clamp(KernelBuilder& kb, Val x, Val lo, Val hi) {
  Ty t = kb.ty(x);
  Val r = x;
  if (lo != kNoVal) r = kb.math(ScalarOp::where, kb.math(ScalarOp::lt, r, lo), lo, r);
  if (hi != kNoVal) r = kb.math(ScalarOp::where, kb.math(ScalarOp::gt, r, hi), hi, r);
  if (is_float_ty(t)) r = kb.math(ScalarOp::where, kb.math(ScalarOp::isnan, x), x, r);
  return r;
}

}  // namespace

Ty operand_ty(Op op, int arg, Ty ct, DType arg_dtype) {
  switch (op) {
    case Op::logical_not: case Op::logical_and: case Op::logical_or: case Op::logical_xor:
      return Ty::Bool;
    case Op::where:
      return arg == 0 ? Ty::Bool : ct;
    case Op::masked_fill:
      return arg == 1 ? Ty::Bool : ct;
    case Op::isnan: case Op::isinf: case Op::to_dtype:
      return compute_type(arg_dtype);
    default:
      return ct;
  }
}

Val emit_pointwise(KernelBuilder& kb, Op op, const Stack& a, const std::vector<Val>& x, Ty ct, Ty out) {
  auto m = [&](ScalarOp s, Val p, Val q = kNoVal, Val r = kNoVal) { return kb.math(s, p, q, r); };
  auto c = [&](double v) { return is_float_ty(ct) ? kb.cf(v, ct) : kb.cast(kb.ci(int64_t(v), Ty::I64), ct); };
  bool integral = !is_float_ty(ct);
  switch (op) {
    case Op::neg: return m(ScalarOp::neg, x[0]);
    case Op::abs: return ct == Ty::Bool ? x[0] : m(ScalarOp::abs, x[0]);
    case Op::sign: return ct == Ty::Bool ? x[0] : m(ScalarOp::sign, x[0]);
    case Op::sqrt: return m(ScalarOp::sqrt, x[0]);
    case Op::rsqrt: return m(ScalarOp::rsqrt, x[0]);
    case Op::exp: return m(ScalarOp::exp, x[0]);
    case Op::exp2: return m(ScalarOp::exp2, x[0]);
    case Op::log: return m(ScalarOp::log, x[0]);
    case Op::log2: return m(ScalarOp::log2, x[0]);
    case Op::log1p: return m(ScalarOp::log1p, x[0]);
    case Op::expm1: return m(ScalarOp::expm1, x[0]);
    case Op::sin: return m(ScalarOp::sin, x[0]);
    case Op::cos: return m(ScalarOp::cos, x[0]);
    case Op::tan: return m(ScalarOp::tan, x[0]);
    case Op::tanh: return m(ScalarOp::tanh, x[0]);
    case Op::sigmoid: return m(ScalarOp::sigmoid, x[0]);
    case Op::erf: return m(ScalarOp::erf, x[0]);
    case Op::floor: return integral ? x[0] : m(ScalarOp::floor, x[0]);
    case Op::ceil: return integral ? x[0] : m(ScalarOp::ceil, x[0]);
    case Op::round: return integral ? x[0] : m(ScalarOp::round, x[0]);
    case Op::trunc: return integral ? x[0] : m(ScalarOp::trunc, x[0]);
    case Op::reciprocal: return m(ScalarOp::reciprocal, x[0]);
    case Op::logical_not: return m(ScalarOp::logical_not, x[0]);
    case Op::bitwise_not: return ct == Ty::Bool ? m(ScalarOp::logical_not, x[0]) : m(ScalarOp::bitwise_not, x[0]);
    case Op::isnan: return is_float_ty(kb.ty(x[0])) ? m(ScalarOp::isnan, x[0]) : kb.ci(0, Ty::Bool);
    case Op::isinf: return is_float_ty(kb.ty(x[0])) ? m(ScalarOp::isinf, x[0]) : kb.ci(0, Ty::Bool);
    case Op::to_dtype: return kb.cast(x[0], out);
    case Op::relu: return m(ScalarOp::where, m(ScalarOp::lt, x[0], c(0)), c(0), x[0]);
    case Op::gelu:
      if (a[1].str() == "tanh") {
        Val inner = m(ScalarOp::mul, c(std::sqrt(2.0 / M_PI)),
                      m(ScalarOp::add, x[0], m(ScalarOp::mul, c(0.044715), m(ScalarOp::mul, x[0], m(ScalarOp::mul, x[0], x[0])))));
        return m(ScalarOp::mul, m(ScalarOp::mul, c(0.5), x[0]), m(ScalarOp::add, c(1), m(ScalarOp::tanh, inner)));
      }
      return m(ScalarOp::mul, m(ScalarOp::mul, x[0], c(0.5)),
               m(ScalarOp::add, c(1), m(ScalarOp::erf, m(ScalarOp::mul, x[0], c(M_SQRT1_2)))));
    case Op::silu: return m(ScalarOp::div, x[0], m(ScalarOp::add, c(1), m(ScalarOp::exp, m(ScalarOp::neg, x[0]))));
    case Op::softplus: {
      Val beta = num(kb, a[1], ct), xb = m(ScalarOp::mul, x[0], beta);
      Val soft = m(ScalarOp::div, m(ScalarOp::log1p, m(ScalarOp::exp, xb)), beta);
      return m(ScalarOp::where, m(ScalarOp::gt, xb, num(kb, a[2], ct)), x[0], soft);
    }
    case Op::leaky_relu:
      return m(ScalarOp::where, m(ScalarOp::gt, x[0], c(0)), x[0], m(ScalarOp::mul, x[0], num(kb, a[1], ct)));
    case Op::elu:
      return m(ScalarOp::where, m(ScalarOp::gt, x[0], c(0)), x[0],
               m(ScalarOp::mul, num(kb, a[1], ct), m(ScalarOp::expm1, x[0])));
    case Op::hardtanh: return clamp(kb, x[0], num(kb, a[1], ct), num(kb, a[2], ct));
    case Op::clamp:
      return clamp(kb, x[0], a[1].is_none() ? kNoVal : num(kb, a[1], ct), a[2].is_none() ? kNoVal : num(kb, a[2], ct));
    case Op::add: case Op::sub: {
      Val y = x[1];
      if (!(a[2].is_int() && a[2].to_int() == 1) && !(a[2].is_double() && a[2].to_double() == 1))
        y = m(ScalarOp::mul, y, num(kb, a[2], ct));
      return m(op == Op::add ? ScalarOp::add : ScalarOp::sub, x[0], y);
    }
    case Op::mul: return ct == Ty::Bool ? m(ScalarOp::logical_and, x[0], x[1]) : m(ScalarOp::mul, x[0], x[1]);
    case Op::div:
      if (a[2].is_none()) return m(ScalarOp::div, x[0], x[1]);
      return m(a[2].str() == "trunc" ? ScalarOp::div_trunc : ScalarOp::div_floor, x[0], x[1]);
    case Op::remainder: return m(ScalarOp::mod, x[0], x[1]);
    case Op::pow: return m(ScalarOp::pow, x[0], x[1]);
    case Op::minimum: return m(ScalarOp::minimum, x[0], x[1]);
    case Op::maximum: return m(ScalarOp::maximum, x[0], x[1]);
    case Op::eq: return m(ScalarOp::eq, x[0], x[1]);
    case Op::ne: return m(ScalarOp::ne, x[0], x[1]);
    case Op::lt: return m(ScalarOp::lt, x[0], x[1]);
    case Op::le: return m(ScalarOp::le, x[0], x[1]);
    case Op::gt: return m(ScalarOp::gt, x[0], x[1]);
    case Op::ge: return m(ScalarOp::ge, x[0], x[1]);
    case Op::logical_and: return m(ScalarOp::logical_and, x[0], x[1]);
    case Op::logical_or: return m(ScalarOp::logical_or, x[0], x[1]);
    case Op::logical_xor: return m(ScalarOp::logical_xor, x[0], x[1]);
    case Op::bitwise_and: return m(ct == Ty::Bool ? ScalarOp::logical_and : ScalarOp::bitwise_and, x[0], x[1]);
    case Op::bitwise_or: return m(ct == Ty::Bool ? ScalarOp::logical_or : ScalarOp::bitwise_or, x[0], x[1]);
    case Op::bitwise_xor: return m(ct == Ty::Bool ? ScalarOp::logical_xor : ScalarOp::bitwise_xor, x[0], x[1]);
    case Op::where: return m(ScalarOp::where, x[0], x[1], x[2]);
    case Op::masked_fill: return m(ScalarOp::where, x[1], x[2], x[0]);
    case Op::lerp: {
      Val d = m(ScalarOp::sub, x[1], x[0]);
      Val lo = m(ScalarOp::add, x[0], m(ScalarOp::mul, x[2], d));
      Val hi = m(ScalarOp::sub, x[1], m(ScalarOp::mul, d, m(ScalarOp::sub, c(1), x[2])));
      return m(ScalarOp::where, m(ScalarOp::lt, m(ScalarOp::abs, x[2]), c(0.5)), lo, hi);
    }
    default:
      TC_ASSERT(false, "emit_pointwise: not a pointwise op");
  }
  return kNoVal;
}

}  // namespace tc::lower
