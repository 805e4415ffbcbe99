// CPU kernels of the comparing and selecting pointwise ops: eq/ne/lt/le/gt/ge, logical and
// bitwise and/or/xor, where and masked_fill.
#include "cpu/pointwise.h"

namespace tc::cpu {
namespace {

template <typename T>
void compare_kernel(Op op, const Tensor& x, const Tensor& y, const Tensor& out) {
  using M = opmath_t<T>;
  auto cmp = [&](auto f) { map<bool, T, T>(out, {x, y}, f); };
  switch (op) {
    case Op::eq: return cmp([](M a, M b) { return a == b; });
    case Op::ne: return cmp([](M a, M b) { return a != b; });
    case Op::lt: return cmp([](M a, M b) { return a < b; });
    case Op::le: return cmp([](M a, M b) { return a <= b; });
    case Op::gt: return cmp([](M a, M b) { return a > b; });
    case Op::ge: return cmp([](M a, M b) { return a >= b; });
    case Op::logical_and: return cmp([](M a, M b) { return a != M(0) && b != M(0); });
    case Op::logical_or: return cmp([](M a, M b) { return a != M(0) || b != M(0); });
    case Op::logical_xor: return cmp([](M a, M b) { return (a != M(0)) != (b != M(0)); });
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {  // bitwise: integers and bool (bool & bool is and)
    auto bit = [&](auto f) { map<T, T, T>(out, {x, y}, f); };
    switch (op) {
      case Op::bitwise_and: return bit([](M a, M b) { return M(a & b); });
      case Op::bitwise_or: return bit([](M a, M b) { return M(a | b); });
      case Op::bitwise_xor: return bit([](M a, M b) { return M(a ^ b); });
      default: break;
    }
  }
  TC_ASSERT(false, "logical pointwise op without a kernel for this dtype (the meta rule should have rejected it)");
}

}  // namespace

void logic_kernel(Op op, const Stack& a, const Tensor& out) {
  DType ct = pointwise_compute_dtype(op, a);
  if (op == Op::where) {
    Tensor c = a[0].tensor(), x = a[1].tensor().to(ct), y = a[2].tensor().to(ct);
    return visit_dtype(ct, [&]<typename T>() {
      using M = opmath_t<T>;
      map<T, bool, T, T>(out, {c, x, y}, [](bool s, M p, M q) { return s ? p : q; });
    });
  }
  if (op == Op::masked_fill) {
    Tensor x = a[0].tensor(), mask = a[1].tensor();
    Value v = scalar_of(a[2].tensor());
    return visit_dtype(ct, [&]<typename T>() {
      using M = opmath_t<T>;
      M fill = scalar_to<T>(v);
      map<T, T, bool>(out, {x, mask}, [=](M p, bool m) { return m ? fill : p; });
    });
  }
  Tensor x = a[0].tensor().to(ct), y = a[1].tensor().to(ct);
  visit_dtype(ct, [&]<typename T>() { compare_kernel<T>(op, x, y, out); });
}

}  // namespace tc::cpu
