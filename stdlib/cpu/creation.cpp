// Meta rules and CPU kernels of the "creation" group of ops.def: constructors (empty zeros ones
// full eye arange linspace), fill_, and the random ops, whose kernels live in random.cpp.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "cpu/loops.h"
#include "random_kernels.h"
#include "tc/ops.h"

namespace tc {
namespace {

Device device_arg(const Value& v) { return v.is_none() ? default_device() : v.device(); }
DType dtype_arg(const Value& v, DType dflt) { return v.is_none() ? dflt : v.dtype(); }

Shape size_arg(Op op, const IntList& sizes) {
  for (int64_t s : sizes)
    TC_CHECK(s >= 0, ShapeError, "%s(): trying to create tensor with negative dimension %lld: %s", op_name(op),
             (long long)s, shape_string(sizes).c_str());
  return Shape(sizes.begin(), sizes.end());
}

void check_requires_grad(Op op, const Value& v, DType dt) {
  TC_CHECK(!v.to_bool() || is_floating(dt), DTypeError,
           "%s(): only tensors of floating point dtype can require gradients, got %s", op_name(op), dtype_name(dt));
}

void check_float_dtype(Op op, DType dt) {
  TC_CHECK(is_floating(dt), DTypeError, "%s(): expected a floating point dtype, got %s", op_name(op), dtype_name(dt));
}

// Largest finite value of a dtype, as a double.
double dtype_max(DType dt) {
  switch (dt) {
    case DType::Float32: return std::numeric_limits<float>::max();
    case DType::Float64: return std::numeric_limits<double>::max();
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e38;
    case DType::Int64: return 9223372036854775807.0;
    case DType::Int32: return 2147483647.0;
    case DType::UInt8: return 255.0;
    case DType::Bool: return 1.0;
  }
  return 0;
}

// PyTorch's checked Scalar conversion: a value that overflows the dtype is an error. Integers
// may wrap into uint8 from down to -255; infinities and nan stay representable in float dtypes.
void check_scalar_fits(Op op, const Value& v, DType dt) {
  if (v.is_bool() || dt == DType::Bool || dt == DType::Float64) return;
  double hi = dtype_max(dt), lo = dt == DType::UInt8 ? (v.is_int() ? -255.0 : 0.0) : -hi;
  bool ok;
  if (v.is_int()) {
    int64_t x = v.to_int();
    ok = dt == DType::Int64 || ((double)x >= lo && (double)x <= hi);
  } else {
    double x = v.to_double();
    if (is_floating(dt)) ok = std::isinf(x) || std::isnan(x) || (x >= lo && x <= hi);
    else ok = x >= lo && (dt == DType::Int64 ? x < 9223372036854775808.0 : x <= hi);
  }
  TC_CHECK(ok, ValueError, "%s(): value %s cannot be converted to type %s without overflow", op_name(op),
           v.is_int() ? std::to_string(v.to_int()).c_str() : std::to_string(v.to_double()).c_str(), dtype_name(dt));
}

// A checked Scalar as T: bool from nonzero, integers by truncation (negatives wrap into uint8).
template <typename T>
T scalar_as(const Value& v) {
  if constexpr (std::is_same_v<T, bool>) return v.to_double() != 0;
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(v.is_double() ? (int64_t)v.to_double() : v.to_int());
  else if (v.is_int()) return static_cast<T>(static_cast<opmath_t<T>>(v.to_int()));
  else return static_cast<T>(static_cast<opmath_t<T>>(v.to_double()));
}

// The dtype PyTorch gives a Scalar on its own: bool, int64 or the default float dtype.
DType scalar_dtype(const Value& v) { return v.is_bool() ? DType::Bool : v.is_int() ? DType::Int64 : default_dtype(); }

void fill_tensor(const Tensor& t, const Value& v) {
  visit_dtype(t.dtype(), [&]<typename T>() {
    T x = scalar_as<T>(v);
    cpu::strided_loop<1>(t.sizes(), {static_cast<char*>(t.data_ptr())}, {cpu::broadcast_byte_strides(t, t.sizes())},
                         [x](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
                           for (int64_t i = 0; i < n; i++) *reinterpret_cast<T*>(p[0] + i * s[0]) = x;
                         });
  });
}

// arange: start, end, step as PyTorch reads them for the result dtype.
struct Range {
  Value start, end, step;
};

Range range_args(const Stack& a) {
  if (a[1].is_none()) return {Value((int64_t)0), a[0], a[2]};  // arange(end)
  return {a[0], a[1], a[2]};
}

// The number of elements of arange, with PyTorch's checks. int64 results compute it from the
// truncated integers, other dtypes in double (their step is still checked as the dtype reads it).
int64_t arange_size(const Range& r, DType dt) {
  auto as_int = [](const Value& v) { return v.is_double() ? (int64_t)v.to_double() : v.to_int(); };
  bool int_acc = !is_floating(dt);
  double xs = int_acc ? (double)as_int(r.start) : r.start.to_double();
  double xe = int_acc ? (double)as_int(r.end) : r.end.to_double();
  double xstep = int_acc ? (double)as_int(r.step) : r.step.to_double();
  if (dt == DType::Float16 || dt == DType::BFloat16) {
    xs = (float)xs;
    xe = (float)xe;
    xstep = (float)xstep;
  }
  TC_CHECK(xstep > 0 || xstep < 0, ValueError, "arange(): step must be nonzero");
  TC_CHECK(std::isfinite(xs) && std::isfinite(xe), ValueError, "arange(): unsupported range: %g -> %g", xs, xe);
  TC_CHECK((xstep > 0 && xe >= xs) || (xstep < 0 && xe <= xs), ValueError,
           "arange(): upper bound and larger bound inconsistent with step sign (start %g, end %g, step %g)", xs, xe,
           xstep);
  double size_d;
  if (dt == DType::Int64)
    size_d = std::ceil((double)(as_int(r.end) - as_int(r.start)) / (double)as_int(r.step));
  else
    size_d = std::ceil((r.end.to_double() - r.start.to_double()) / r.step.to_double());
  TC_CHECK(size_d >= 0 && size_d <= 9.2e18, ValueError, "arange(): invalid size, possible overflow?");
  return (int64_t)size_d;
}

// PyTorch 1.13's CPU range kernels (AVX2 build, one thread: every range under its 32768-element
// grain) compute runs of 2 * kLanes elements as vectors of kLanes = 32 / sizeof(T) lanes, each
// lane = base + k * step from a vector base computed like a scalar element; the remaining
// elements are scalar. Its compiler fused multiply-adds in some of these expressions and not in
// others; std::fma below marks the fused ones (matched against PyTorch element for element, see
// tests/fixtures/gen_creation.py). The unfused lanes rely on our build not contracting a * b + c
// (no -mfma): keep it so.
template <typename T>
struct Lanes {
  static constexpr int64_t kLanes = 32 / sizeof(T);
  int64_t vec_end;  // elements [0, vec_end) are vector lanes
  explicit Lanes(int64_t n) : vec_end(n / (2 * kLanes) * (2 * kLanes)) {}
  // (vector base index, lane) of element i, lane -1 for a scalar element
  std::pair<int64_t, int64_t> of(int64_t i) const {
    return i < vec_end ? std::pair{i - i % kLanes, i % kLanes} : std::pair{i, (int64_t)-1};
  }
};

template <typename T>
T to_t(double v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>((int64_t)v);
  else return static_cast<T>(static_cast<opmath_t<T>>(v));
}

// arange: start + step * i in the accumulate type (int64 for integers, double for float32/64,
// float for the 16-bit types); vector lanes are unfused for the 16-bit types.
template <typename T>
void arange_fill(T* out, int64_t n, const Range& r) {
  if constexpr (std::is_integral_v<T>) {
    auto as_int = [](const Value& v) { return v.is_double() ? (int64_t)v.to_double() : v.to_int(); };
    int64_t s = as_int(r.start), st = as_int(r.step);
    parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) out[i] = static_cast<T>(s + st * i);
    });
  } else {
    constexpr bool narrow = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
    using Acc = std::conditional_t<narrow, float, double>;
    Acc s = (Acc)r.start.to_double(), st = (Acc)r.step.to_double();
    Lanes<T> lanes(n);
    parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        auto [j, k] = lanes.of(i);
        Acc v = std::fma(st, (Acc)j, s);
        if (k >= 0) {
          Acc base = (Acc)(opmath_t<T>)T((opmath_t<T>)v);
          if constexpr (narrow) {
            Acc kst = (Acc)k * st;
            v = base + kst;
          } else {
            v = std::fma((Acc)k, st, base);
          }
        }
        out[i] = T((opmath_t<T>)v);
      }
    });
  }
}

// linspace: the first half counts up from start, the second half down from end. Integer dtypes
// step in double, float32/64 in their own precision, the 16-bit types round after every
// operation (c10::Half arithmetic); vector lanes are never fused.
template <typename T>
void linspace_fill(T* out, int64_t n, const Value& vs, const Value& ve) {
  if (n == 0) return;
  T start = scalar_as<T>(vs), end = scalar_as<T>(ve);
  if (n == 1) {
    out[0] = start;
    return;
  }
  int64_t half = n / 2;
  Lanes<T> lanes(n);
  if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
    using S = std::conditional_t<std::is_integral_v<T>, double, T>;  // step type
    S s = (S)start, e = (S)end, step = (e - s) / (S)(n - 1);
    auto at = [&](int64_t i) { return i < half ? std::fma(step, (S)i, s) : std::fma(-step, (S)(n - i - 1), e); };
    parallel_for(0, n, 32768, [&](int64_t b, int64_t en) {
      for (int64_t i = b; i < en; i++) {
        auto [j, k] = lanes.of(i);
        S v = at(j);
        if (k >= 0) {
          S base = (S)to_t<T>(v), kst = (S)k * step;
          v = base + kst;
        }
        out[i] = to_t<T>(v);
      }
    });
  } else {
    auto r = [](float x) { return (float)T(x); };  // one rounding to T
    float s = (float)start, e = (float)end, step = r(r(e - s) / r((float)(n - 1)));
    auto at = [&](int64_t i) { return i < half ? r(s + r(step * r((float)i))) : r(e - r(step * r((float)(n - i - 1)))); };
    parallel_for(0, n, 32768, [&](int64_t b, int64_t en) {
      for (int64_t i = b; i < en; i++) {
        auto [j, k] = lanes.of(i);
        out[i] = T(k < 0 ? at(j) : r(at(j) + r(step * r((float)k))));
      }
    });
  }
}

TensorMeta self_meta(const Tensor& t) {
  return TensorMeta{t.sizes(), t.strides(), t.offset(), t.dtype(), t.device(), 0};
}

}  // namespace

Metas meta_creation(Op op, const Stack& a) {
  switch (op) {
    case Op::empty:
    case Op::zeros:
    case Op::ones:
    case Op::rand:
    case Op::randn: {
      DType dt = dtype_arg(a[1], default_dtype());
      if (op == Op::rand || op == Op::randn) check_float_dtype(op, dt);
      check_requires_grad(op, a[3], dt);
      return {contiguous_meta(size_arg(op, a[0].ints()), dt, device_arg(a[2]))};
    }
    case Op::full: {
      DType dt = dtype_arg(a[2], scalar_dtype(a[1]));
      check_requires_grad(op, a[4], dt);
      check_scalar_fits(op, a[1], dt);
      return {contiguous_meta(size_arg(op, a[0].ints()), dt, device_arg(a[3]))};
    }
    case Op::eye: {
      int64_t n = a[0].to_int(), m = a[1].is_none() ? n : a[1].to_int();
      TC_CHECK(n >= 0, ShapeError, "eye(): n must be greater or equal to 0, got %lld", (long long)n);
      TC_CHECK(m >= 0, ShapeError, "eye(): m must be greater or equal to 0, got %lld", (long long)m);
      DType dt = dtype_arg(a[2], default_dtype());
      check_requires_grad(op, a[4], dt);
      return {contiguous_meta({n, m}, dt, device_arg(a[3]))};
    }
    case Op::arange: {
      Range r = range_args(a);
      auto integral = [](const Value& v) { return v.is_int() || v.is_bool(); };
      DType inferred = integral(r.start) && integral(r.end) && integral(r.step) ? DType::Int64 : default_dtype();
      DType dt = dtype_arg(a[3], inferred);
      TC_CHECK(dt != DType::Bool, DTypeError, "arange(): not implemented for bool");
      check_requires_grad(op, a[5], dt);
      return {contiguous_meta({arange_size(r, dt)}, dt, device_arg(a[4]))};
    }
    case Op::linspace: {
      int64_t steps = a[2].to_int();
      TC_CHECK(steps >= 0, ShapeError, "linspace(): number of steps must be non-negative, got %lld", (long long)steps);
      DType dt = dtype_arg(a[3], default_dtype());
      TC_CHECK(dt != DType::Bool, DTypeError, "linspace(): not implemented for bool");
      check_requires_grad(op, a[5], dt);
      check_scalar_fits(op, a[0], dt);
      check_scalar_fits(op, a[1], dt);
      return {contiguous_meta({steps}, dt, device_arg(a[4]))};
    }
    case Op::fill_: {
      const Tensor& t = a[0].tensor();
      check_scalar_fits(op, a[1], t.dtype());
      return {self_meta(t)};
    }
    case Op::randint: {
      int64_t low = a[0].to_int(), high = a[1].to_int();
      TC_CHECK(low < high, ValueError, "randint(): expects 'low' to be less than 'high', but got low=%lld >= high=%lld",
               (long long)low, (long long)high);
      DType dt = dtype_arg(a[3], DType::Int64);
      double lim = dt == DType::Float32 ? 0x1p24 : dt == DType::Float64 ? 0x1p53 : dt == DType::Float16 ? 0x1p11
                   : dt == DType::BFloat16 ? 0x1p8 : dtype_max(dt);
      double lo_lim = is_floating(dt) ? -lim : dt == DType::Int64 ? -lim - 1 : dt == DType::Int32 ? -lim - 1 : 0;
      TC_CHECK((double)low >= lo_lim && (double)low <= lim, ValueError, "randint(): low=%lld is out of bounds for %s",
               (long long)low, dtype_name(dt));
      TC_CHECK((double)(high - 1) >= lo_lim && (double)(high - 1) <= lim, ValueError,
               "randint(): high - 1 = %lld is out of bounds for %s", (long long)(high - 1), dtype_name(dt));
      return {contiguous_meta(size_arg(op, a[2].ints()), dt, device_arg(a[4]))};
    }
    case Op::uniform_: {
      const Tensor& t = a[0].tensor();
      check_float_dtype(op, t.dtype());
      double from = a[1].to_double(), to = a[2].to_double(), mx = dtype_max(t.dtype());
      TC_CHECK(from <= to, ValueError, "uniform_(): expects to return a [from, to) range, but found from=%g > to=%g",
               from, to);
      TC_CHECK(from >= -mx && to <= mx && to - from <= mx, ValueError,
               "uniform_(): from=%g and to=%g must be finite and within the range of %s", from, to,
               dtype_name(t.dtype()));
      return {self_meta(t)};
    }
    case Op::normal_: {
      const Tensor& t = a[0].tensor();
      check_float_dtype(op, t.dtype());
      double std = a[2].to_double();
      TC_CHECK(std >= 0, ValueError, "normal_(): expects std >= 0.0, but found std %g", std);
      return {self_meta(t)};
    }
    case Op::bernoulli: {
      const Tensor& t = a[0].tensor();
      if (a[1].is_none()) {
        check_float_dtype(op, t.dtype());
      } else {
        double p = a[1].to_double();
        TC_CHECK(p >= 0 && p <= 1, ValueError, "bernoulli(): expects p to be in [0, 1], but got p=%g", p);
      }
      return {contiguous_meta(t.sizes(), t.dtype(), t.device())};
    }
    case Op::multinomial: {
      const Tensor& t = a[0].tensor();
      int64_t n = a[1].to_int();
      TC_CHECK(is_floating(t.dtype()), DTypeError, "multinomial(): only supports floating-point dtypes for input, got %s",
               dtype_name(t.dtype()));
      TC_CHECK(t.dim() == 1 || t.dim() == 2, ShapeError, "multinomial(): prob_dist must be 1 or 2 dim, got %lld",
               (long long)t.dim());
      int64_t cats = t.sizes().back();
      TC_CHECK(cats > 0, ValueError, "multinomial(): cannot sample from an empty distribution");
      TC_CHECK(cats <= (1 << 24), ValueError, "multinomial(): number of categories cannot exceed 2^24, got %lld",
               (long long)cats);
      TC_CHECK(n > 0, ValueError, "multinomial(): cannot sample n_sample <= 0 samples (got %lld)", (long long)n);
      TC_CHECK(a[2].to_bool() || n <= cats, ValueError,
               "multinomial(): cannot sample n_sample > prob_dist.size(-1) samples without replacement (%lld > %lld)",
               (long long)n, (long long)cats);
      Shape sizes = t.dim() == 1 ? Shape{n} : Shape{t.sizes()[0], n};
      return {contiguous_meta(sizes, DType::Int64, t.device())};
    }
    default:
      TC_ASSERT(false, "op is not in the creation group");
  }
}

Stack cpu_creation(Op op, const Stack& a, const Metas& metas) {
  const TensorMeta& m = metas[0];
  TC_CHECK(m.device.is_cpu(), DeviceError, "%s(): no kernel for device %s yet", op_name(op), m.device.str().c_str());
  // In-place ops: write self (through a contiguous buffer when self is strided) and return it.
  auto in_place = [&](auto&& fill) {
    const Tensor& self = a[0].tensor();
    if (self.is_contiguous()) {
      fill(self);
      Tensor(self).bump_version();
    } else {
      Tensor tmp = Tensor::empty(self.sizes(), self.dtype(), self.device());
      fill(tmp);
      Tensor(self).copy_from(tmp);  // bumps the version
    }
    return Stack{Value(self)};
  };
  switch (op) {
    case Op::fill_: {
      const Tensor& self = a[0].tensor();
      fill_tensor(self, a[1]);
      Tensor(self).bump_version();
      return {Value(self)};
    }
    case Op::uniform_:
      return in_place([&](const Tensor& t) { cpu::random_uniform(t, a[1].to_double(), a[2].to_double()); });
    case Op::normal_:
      return in_place([&](const Tensor& t) { cpu::random_normal(t, a[1].to_double(), a[2].to_double()); });
    default:
      break;
  }
  Tensor out = empty_from_meta(m);
  switch (op) {
    case Op::empty: break;
    case Op::zeros: std::memset(out.data_ptr(), 0, (size_t)out.numel() * out.itemsize()); break;
    case Op::ones: fill_tensor(out, Value((int64_t)1)); break;
    case Op::full: fill_tensor(out, a[1]); break;
    case Op::eye: {
      std::memset(out.data_ptr(), 0, (size_t)out.numel() * out.itemsize());
      int64_t n = m.sizes[0], cols = m.sizes[1];
      visit_dtype(out.dtype(), [&]<typename T>() {
        for (int64_t i = 0; i < std::min(n, cols); i++) out.data<T>()[i * cols + i] = scalar_as<T>(Value((int64_t)1));
      });
      break;
    }
    case Op::arange: {
      Range r = range_args(a);
      visit_dtype(out.dtype(), [&]<typename T>() {
        if constexpr (!std::is_same_v<T, bool>) arange_fill<T>(out.data<T>(), out.numel(), r);
      });
      break;
    }
    case Op::linspace:
      visit_dtype(out.dtype(), [&]<typename T>() {
        if constexpr (!std::is_same_v<T, bool>) linspace_fill<T>(out.data<T>(), out.numel(), a[0], a[1]);
      });
      break;
    case Op::rand: cpu::random_uniform(out, 0.0, 1.0); break;
    case Op::randn: cpu::random_normal(out, 0.0, 1.0); break;
    case Op::randint: cpu::random_int(out, a[0].to_int(), a[1].to_int()); break;
    case Op::bernoulli:
      if (a[1].is_none()) cpu::random_bernoulli(out, a[0].tensor(), 0.0);
      else cpu::random_bernoulli(out, Tensor(), a[1].to_double());
      break;
    case Op::multinomial: cpu::random_multinomial(out, a[0].tensor(), a[1].to_int(), a[2].to_bool()); break;
    default:
      TC_ASSERT(false, "op is not in the creation group");
  }
  // requires_grad is the last argument of the constructors that have it
  const ArgSpec& last = schema(op).args.back();
  if (last.name == "requires_grad" && a.back().to_bool()) out.set_requires_grad(true);
  return {Value(out)};
}

}  // namespace tc
