// Meta rule of the "pointwise" group of ops.def (broadcasting, PyTorch 1.13 type promotion and
// every bad-input diagnosis) and the dispatch of its CPU kernels to the family files.
#include "cpu/pointwise.h"

#include <sys/mman.h>

#include <cfloat>
#include <cmath>

namespace tc {
namespace cpu {

namespace {

DType floatify(DType t) { return is_floating(t) ? t : default_dtype(); }

}  // namespace

// self's dtype, except that a Lua float given for it counts as the default dtype.
DType self_dtype(const Stack& a) {
  const Tensor* self = &a[0].tensor();
  return result_type(&self, 1);
}

namespace {

DType promoted(const Stack& a, std::initializer_list<int> idx) {
  TC_ASSERT(idx.size() <= 4, "promoted() takes up to 4 operands");
  const Tensor* ts[4];
  size_t n = 0;
  for (int i : idx) ts[n++] = &a[i].tensor();
  return result_type(ts, n);
}

// clamp's bounds take part in promotion like wrapped numbers.
Tensor wrap_scalar(const Value& v) {
  if (v.is_double()) return Tensor::fake({}, {}, DType::Float64);
  return Tensor::fake({}, {}, v.is_bool() ? DType::Bool : DType::Int64);
}

DType clamp_dtype(const Stack& a) {
  std::vector<Tensor> ts{a[0].tensor()};
  for (int i : {1, 2})
    if (!a[i].is_none()) {
      ts.push_back(wrap_scalar(a[i]));
      ts.back().impl()->wrapped_number = true;
    }
  return result_type(ts);
}

}  // namespace

DType pointwise_compute_dtype(Op op, const Stack& a) {
  switch (op) {
    case Op::sqrt: case Op::rsqrt: case Op::exp: case Op::exp2: case Op::log: case Op::log2:
    case Op::log1p: case Op::expm1: case Op::sin: case Op::cos: case Op::tan: case Op::tanh:
    case Op::sigmoid: case Op::reciprocal: case Op::erf:
      return floatify(self_dtype(a));
    case Op::clamp: return clamp_dtype(a);
    case Op::div: return a[2].is_none() ? floatify(promoted(a, {0, 1})) : promoted(a, {0, 1});
    case Op::add: case Op::sub: case Op::mul: case Op::remainder: case Op::pow: case Op::minimum:
    case Op::maximum: case Op::eq: case Op::ne: case Op::lt: case Op::le: case Op::gt: case Op::ge:
    case Op::logical_and: case Op::logical_or: case Op::logical_xor: case Op::bitwise_and:
    case Op::bitwise_or: case Op::bitwise_xor:
      return promoted(a, {0, 1});
    case Op::where: return promoted(a, {1, 2});
    default: return self_dtype(a);  // the other ops compute in self's dtype
  }
}

Value scalar_of(const Tensor& t) {
  if (is_floating(t.dtype())) return Value(t.item_double());
  if (t.dtype() == DType::Bool) return Value(t.item_int() != 0);
  return Value(t.item_int());
}

}  // namespace cpu

namespace {

using cpu::pointwise_compute_dtype;

const char* dn(DType t) { return dtype_name(t); }

std::string scalar_string(const Value& v) {
  char buf[64];
  if (v.is_double()) snprintf(buf, sizeof buf, "%g", v.to_double());
  else if (v.is_bool()) snprintf(buf, sizeof buf, "%s", v.to_bool() ? "true" : "false");
  else snprintf(buf, sizeof buf, "%lld", (long long)v.to_int());
  return buf;
}

// PyTorch's checked Scalar conversion (c10::overflows): integer targets reject out-of-range values,
// unsigned ones accept negatives down to -max (they wrap); float targets reject finite values
// beyond their range.
void check_fits(const char* op, const Value& v, DType t) {
  if (t == DType::Bool || v.is_bool()) return;
  double lo = 0, hi = 0;
  switch (t) {
    case DType::Float32: hi = FLT_MAX; break;
    case DType::Float64: hi = DBL_MAX; break;
    case DType::Float16: hi = 65504; break;
    case DType::BFloat16: hi = 3.3895313892515355e38; break;
    case DType::Int64: hi = 9223372036854775807.0; break;
    case DType::Int32: hi = 2147483647; break;
    case DType::UInt8: hi = 255; break;
    case DType::Bool: return;
  }
  lo = is_floating(t) ? -hi : t == DType::UInt8 ? (v.is_int() ? -255 : 0) : t == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
  bool bad;
  if (v.is_double()) {
    double d = v.to_double();
    bad = is_floating(t) ? std::isfinite(d) && (d < lo || d > hi) : std::isnan(d) || d < lo || d > hi;
  } else {
    int64_t x = v.to_int();
    bad = t != DType::Int64 && ((double)x < lo || (double)x > hi);
  }
  TC_CHECK(!bad, ValueError, "%s(): value %s cannot be converted to type %s without overflow", op,
           scalar_string(v).c_str(), dn(t));
}

Shape broadcast_args(const Stack& a, std::initializer_list<int> idx) {
  Shape s;
  for (int i : idx) s = broadcast_shapes(s, a[i].tensor().sizes());
  return s;
}

// The device of the result: that of the first tensor which is not a CPU 0-dim tensor.
Device out_device(const Stack& a) {
  for (const Value& v : a)
    if (v.is_tensor() && !(v.tensor().dim() == 0 && v.tensor().device().is_cpu())) return v.tensor().device();
  return a[0].tensor().device();
}

void require_float(const char* op, DType t) {
  TC_CHECK(is_floating(t), DTypeError, "%s(): expected a floating point tensor, got %s", op, dn(t));
}
void reject_bool(const char* op, DType t) {
  TC_CHECK(t != DType::Bool, DTypeError, "%s(): not supported for bool tensors", op);
}

void check_alpha(const char* op, const Value& alpha, DType rt) {
  TC_CHECK(!alpha.is_bool() || rt == DType::Bool, DTypeError,
           "%s(): boolean alpha only supported for boolean results", op);
  TC_CHECK(is_floating(rt) || !alpha.is_double(), DTypeError,
           "%s(): for integral input tensors, argument alpha must not be a floating point number", op);
  check_fits(op, alpha, rt);
}

// Checks the arguments; returns the output dtype.
DType check_and_type(Op op, const Stack& a) {
  const char* name = op_name(op);
  DType st = cpu::self_dtype(a), ct = pointwise_compute_dtype(op, a);
  switch (op) {
    case Op::neg:
      TC_CHECK(st != DType::Bool, DTypeError,
               "neg(): negation on a bool tensor is not supported; use logical_not() to invert a mask");
      return st;
    case Op::abs: case Op::relu: case Op::floor: case Op::ceil: case Op::round: case Op::trunc:
      reject_bool(name, st);
      return st;
    case Op::sign: return st;
    case Op::sqrt: case Op::rsqrt: case Op::exp: case Op::exp2: case Op::log: case Op::log2:
    case Op::log1p: case Op::expm1: case Op::sin: case Op::cos: case Op::tan: case Op::tanh:
    case Op::sigmoid: case Op::reciprocal: case Op::erf:
      return ct;
    case Op::gelu: {
      require_float(name, st);
      const std::string& ap = a[1].str();
      TC_CHECK(ap == "none" || ap == "tanh", ValueError,
               "gelu(): approximate argument must be either \"none\" or \"tanh\", got \"%s\"", ap.c_str());
      return st;
    }
    case Op::silu: case Op::softplus: case Op::leaky_relu: case Op::elu:
      require_float(name, st);
      return st;
    case Op::hardtanh:
      reject_bool(name, st);
      TC_CHECK(st != DType::UInt8 || (a[1].to_double() >= 0 && a[2].to_double() >= 0), ValueError,
               "hardtanh(): cannot do hardtanh on an unsigned type with negative limits");
      check_fits(name, a[1], st);
      check_fits(name, a[2], st);
      return st;
    case Op::clamp:
      TC_CHECK(!a[1].is_none() || !a[2].is_none(), ValueError, "clamp(): at least one of 'min' or 'max' must not be nil");
      reject_bool(name, ct);
      for (int i : {1, 2})
        if (!a[i].is_none()) check_fits(name, a[i], ct);
      return ct;
    case Op::logical_not: case Op::isnan: case Op::isinf: return DType::Bool;
    case Op::bitwise_not:
      TC_CHECK(!is_floating(st), DTypeError, "bitwise_not(): only integer and bool tensors are supported, got %s", dn(st));
      return st;
    case Op::to_dtype: return a[1].is_none() ? st : a[1].dtype();
    case Op::add: check_alpha(name, a[2], ct); return ct;
    case Op::sub:
      TC_CHECK(st != DType::Bool && a[1].tensor().dtype() != DType::Bool, DTypeError,
               "sub(): subtraction with a bool tensor is not supported; use logical_xor() or logical_not() instead");
      check_alpha(name, a[2], ct);
      return ct;
    case Op::mul: case Op::minimum: case Op::maximum: return ct;
    case Op::div:
      if (a[2].is_none()) return ct;
      TC_CHECK(a[2].str() == "trunc" || a[2].str() == "floor", ValueError,
               "div(): expected rounding_mode to be one of nil, \"trunc\" or \"floor\", but found \"%s\"", a[2].str().c_str());
      reject_bool(name, ct);
      return ct;
    case Op::remainder: reject_bool(name, ct); return ct;
    case Op::pow: {
      reject_bool(name, ct);
      const Tensor& e = a[1].tensor();
      bool neg_int_exp = e.is_wrapped_number() && !e.is_fake() && is_integral(e.dtype(), false) && e.item_int() < 0;
      TC_CHECK(!(is_integral(st, true) && neg_int_exp), ValueError, "pow(): integers to negative integer powers are not allowed");
      return ct;
    }
    case Op::eq: case Op::ne: case Op::lt: case Op::le: case Op::gt: case Op::ge:
    case Op::logical_and: case Op::logical_or: case Op::logical_xor:
      return DType::Bool;
    case Op::bitwise_and: case Op::bitwise_or: case Op::bitwise_xor:
      TC_CHECK(!is_floating(ct), DTypeError, "%s(): only integer and bool tensors are supported, got %s", name, dn(ct));
      return ct;
    case Op::where:
      TC_CHECK(st == DType::Bool, DTypeError, "where(): expected condition to be a bool tensor, got %s", dn(st));
      return ct;
    case Op::masked_fill: {
      const Tensor& mask = a[1].tensor();
      const Tensor& v = a[2].tensor();
      TC_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_fill(): expected a bool mask, got %s", dn(mask.dtype()));
      TC_CHECK(v.dim() == 0, ShapeError, "masked_fill(): only supports a 0-dimensional value tensor, but got a tensor with %lld dimension(s)",
               (long long)v.dim());
      if (!v.is_fake()) check_fits(name, cpu::scalar_of(v), st);
      return st;
    }
    case Op::lerp:
      require_float(name, st);
      for (int i : {1, 2}) {
        const Tensor& t = a[i].tensor();
        TC_CHECK(t.is_wrapped_number() || t.dtype() == st, DTypeError, "lerp(): expected dtype %s for `%s` but got dtype %s",
                 dn(st), i == 1 ? "end" : "weight", dn(t.dtype()));
      }
      return st;
    default: TC_ASSERT(false, "op is not in the pointwise group");
  }
}

Shape out_shape(Op op, const Stack& a) {
  switch (op) {
    case Op::where: case Op::lerp: return broadcast_args(a, {0, 1, 2});
    case Op::masked_fill: return broadcast_args(a, {0, 1});
    default:
      if (schema(op).args.size() >= 2 && schema(op).args[1].type == ArgType::Tensor) return broadcast_args(a, {0, 1});
      return a[0].tensor().sizes();
  }
}

// A large fresh output is about to be written whole: ask for transparent huge pages before the first
// touch. With 4 KiB pages the page faults cost more than the kernel (64 MiB: 30 ms against 8 ms).
void prefer_huge_pages(const Tensor& t) {
  const uintptr_t huge = 2u << 20;
  size_t bytes = t.storage()->nbytes();
  if (bytes < 4 * huge) return;
  uintptr_t p = reinterpret_cast<uintptr_t>(t.storage()->data());
  uintptr_t b = (p + huge - 1) & ~(huge - 1), e = (p + bytes) & ~(huge - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);  // a hint: errors are harmless
}

}  // namespace

Metas meta_pointwise(Op op, const Stack& a) {
  Shape shape = out_shape(op, a);
  DType dt = check_and_type(op, a);
  return {contiguous_meta(shape, dt, out_device(a))};
}

Stack cpu_pointwise(Op op, const Stack& a, const Metas& m) {
  Tensor out = empty_from_meta(m[0]);
  if (out.numel() == 0) return {Value(out)};
  prefer_huge_pages(out);
  switch (op) {
    case Op::add: case Op::sub: case Op::mul: case Op::div: case Op::remainder: case Op::pow:
    case Op::minimum: case Op::maximum: case Op::lerp:
      cpu::arith_kernel(op, a, out);
      break;
    case Op::eq: case Op::ne: case Op::lt: case Op::le: case Op::gt: case Op::ge: case Op::logical_and:
    case Op::logical_or: case Op::logical_xor: case Op::bitwise_and: case Op::bitwise_or:
    case Op::bitwise_xor: case Op::where: case Op::masked_fill:
      cpu::logic_kernel(op, a, out);
      break;
    default: cpu::unary_kernel(op, a, out); break;
  }
  return {Value(out)};
}

}  // namespace tc
