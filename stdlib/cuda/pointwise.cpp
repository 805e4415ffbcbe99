// CUDA kernels of the pointwise group (every op of ops.def's pointwise section) and the device
// copies (strided, converting, broadcasting) behind Tensor::copy_from. Semantics mirror
// stdlib/cpu/pointwise_*.cpp: inputs are converted to the compute dtype (through its storage
// type, so float16 rounding matches), the expression runs in the compute type's opmath.
#include <cmath>
#include <limits>

#include "cpu/pointwise.h"
#include "cuda/elementwise.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// A host value rounded through dtype t's storage (what CPU `.to(t)` of a scalar does).
double round_through(DType t, double v) {
  if (t == DType::Float16) return (float)Half((float)v);
  if (t == DType::BFloat16) return (float)BFloat16((float)v);
  if (t == DType::Float32) return (float)v;
  return v;
}

std::string lit(double v) {
  char b[64];
  snprintf(b, sizeof b, "%.17g", v);
  return b;
}

struct Builder {
  EwSpec spec;
  std::vector<Tensor> ptrs;
  std::vector<PVal> vals;     // Param inputs
  std::vector<PVal> pvals;    // params
  DType ct;
  std::string M;

  // An input converted to the compute type (or to "bool" for masks and conditions).
  void input(const Tensor& t, bool as_bool = false) {
    std::string cty = as_bool ? "bool" : M;
    if (t.device().is_cpu()) {  // a 0-dim CPU tensor or wrapped number: a by-value argument
      if (as_bool) {
        vals.push_back(pval("bool", 0, t.item_int() != 0 ? 1 : 0, true));
      } else if (is_floating(ct)) {
        vals.push_back(pval(cty, round_through(ct, t.item_double()), 0, false));
      } else if (is_floating(t.dtype())) {
        // float -> integer: truncation like static_cast (uint8 through int64)
        vals.push_back(pval(cty, 0, (int64_t)t.item_double(), true));
      } else {
        vals.push_back(pval(cty, 0, t.item_int(), true));
      }
      spec.in.push_back({EwIn::Param, t.dtype(), cty});
      return;
    }
    std::string c = cty;
    spec.in.push_back({EwIn::Ptr, t.dtype(), c});
    ptrs.push_back(t);
    // float16/bfloat16 compute: other dtypes round through the half type first (CPU .to(ct)).
    if (!as_bool && is_half(ct) && t.dtype() != ct) {
      // cast via a converting copy: exact parity with the CPU path at the cost of a pass
      Tensor r = contiguous_as(t, ct);
      ptrs.back() = r;
      spec.in.back().storage = ct;
    }
  }
  void param(double v, int64_t iv, bool is_int) {
    spec.params.push_back(M);
    pvals.push_back(pval(M, v, iv, is_int));
  }
};

bool is_one(const Value& v) { return v.is_double() ? v.to_double() == 1.0 : v.is_bool() ? v.to_bool() : v.to_int() == 1; }

// PyTorch's Scalar -> T conversion as the CPU kernels' scalar_to<T>.
void scalar_param(Builder& b, const Value& v) {
  if (is_floating(b.ct)) {
    double d = v.is_double() ? v.to_double() : (double)v.to_int();
    b.param(round_through(b.ct, d), 0, false);
  } else if (b.ct == DType::Bool) {
    b.param(0, v.to_double() != 0 ? 1 : 0, true);
  } else {
    b.param(0, v.is_double() ? (int64_t)v.to_double() : v.to_int(), true);
  }
}

}  // namespace

bool pointwise(Op op, const Stack& a, const Metas& m, Stack* result) {
  Tensor out = empty_from_meta(m[0]);
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  Builder b;
  b.ct = cpu::pointwise_compute_dtype(op, a);
  b.M = mtype(b.ct);
  const std::string& M = b.M;
  const bool fl = is_floating(b.ct), isint = is_integral(b.ct, false), isbool = b.ct == DType::Bool;
  b.spec.out = out.dtype();
  b.spec.tag = op_name(op);
  std::string e;
  auto un = [&](const std::string& expr) {
    b.input(a[0].tensor());
    e = expr;
  };
  auto bin = [&](const std::string& expr) {
    b.input(a[0].tensor());
    b.input(a[1].tensor());
    e = expr;
  };
  auto f1 = [&](const char* fn) { un(std::string(fn) + "(a0)"); };
  switch (op) {
    case Op::neg: un(isint ? "wsub((" + M + ")0, a0)" : "-a0"); break;
    case Op::abs:
      un(b.ct == DType::UInt8 ? "a0" : isint ? "a0 < 0 ? wsub((" + M + ")0, a0) : a0" : "m_fabs(a0)");
      break;
    case Op::sign: un(isbool ? "a0" : "(" + M + ")(((" + M + ")0 < a0) - (a0 < (" + M + ")0))"); break;
    case Op::sqrt: f1("m_sqrt"); break;
    case Op::rsqrt: un("(" + M + ")1 / m_sqrt(a0)"); break;
    case Op::exp: f1("m_exp"); break;
    case Op::exp2: f1("m_exp2"); break;
    case Op::log: f1("m_log"); break;
    case Op::log2: f1("m_log2"); break;
    case Op::log1p: f1("m_log1p"); break;
    case Op::expm1: f1("m_expm1"); break;
    case Op::sin: f1("m_sin"); break;
    case Op::cos: f1("m_cos"); break;
    case Op::tan: f1("m_tan"); break;
    case Op::tanh: f1("m_tanh"); break;
    case Op::erf: f1("m_erf"); break;
    case Op::sigmoid: un("(" + M + ")1 / ((" + M + ")1 + m_exp(-a0))"); break;
    case Op::reciprocal: un("(" + M + ")1 / a0"); break;
    case Op::silu: un("a0 / ((" + M + ")1 + m_exp(-a0))"); break;
    case Op::relu: un("a0 < (" + M + ")0 ? (" + M + ")0 : a0"); break;
    case Op::gelu:
      if (a[1].str() == "tanh") {
        double beta = M_SQRT2 * M_2_SQRTPI * 0.5;
        un("(" + M + ")0.5 * a0 * ((" + M + ")1 + m_tanh((" + M + ")" + lit(beta) + " * (a0 + (" + M + ")" +
           lit(0.044715) + " * a0 * a0 * a0)))");
        b.spec.tag += "_tanh";
      } else {
        un("a0 * (" + M + ")0.5 * ((" + M + ")1 + m_erf(a0 * (" + M + ")" + lit(M_SQRT1_2) + "))");
      }
      break;
    case Op::softplus:
      un("a0 * p0 > p1 ? a0 : m_log1p(m_exp(a0 * p0)) / p0");
      scalar_param(b, a[1]);
      scalar_param(b, a[2]);
      break;
    case Op::leaky_relu:
      un("a0 > (" + M + ")0 ? a0 : a0 * p0");
      scalar_param(b, a[1]);
      break;
    case Op::elu:
      un("a0 > (" + M + ")0 ? a0 : p0 * m_expm1(a0)");
      scalar_param(b, a[1]);
      break;
    case Op::hardtanh:
      un("clampv(a0, p0, p1)");
      scalar_param(b, a[1]);
      scalar_param(b, a[2]);
      break;
    case Op::clamp:
      un("clampv(a0, p0, p1)");
      for (int i : {1, 2}) {
        if (!a[i].is_none()) {
          scalar_param(b, a[i]);
        } else if (fl) {
          b.param(i == 1 ? -INFINITY : INFINITY, 0, false);
        } else {
          int64_t lo = 0, hi = 0;
          switch (b.ct) {
            case DType::Int64: lo = std::numeric_limits<int64_t>::lowest(); hi = std::numeric_limits<int64_t>::max(); break;
            case DType::Int32: lo = std::numeric_limits<int32_t>::lowest(); hi = std::numeric_limits<int32_t>::max(); break;
            default: lo = 0; hi = 255; break;
          }
          b.param(0, i == 1 ? lo : hi, true);
        }
      }
      break;
    case Op::floor: un(fl ? "m_floor(a0)" : "a0"); break;
    case Op::ceil: un(fl ? "m_ceil(a0)" : "a0"); break;
    case Op::round: un(fl ? "m_rint(a0)" : "a0"); break;
    case Op::trunc: un(fl ? "m_trunc(a0)" : "a0"); break;
    case Op::logical_not: un("!(a0 != (" + M + ")0)"); break;
    case Op::bitwise_not: un(isbool ? "!a0" : "(" + M + ")(~a0)"); break;
    case Op::isnan: un(fl ? "a0 != a0" : "false"); break;
    case Op::isinf: un(fl ? "m_fabs(a0) == m_inf<" + M + ">()" : "false"); break;
    case Op::to_dtype: un("a0"); break;
    case Op::add: case Op::sub: {
      bool sub = op == Op::sub;
      if (isbool) {
        bool alpha = a[2].is_bool() ? a[2].to_bool() : a[2].to_double() != 0;
        bin(alpha ? "a0 || a1" : "a0");
      } else if (isint) {
        int64_t alpha = a[2].is_bool() ? a[2].to_bool() : a[2].is_double() ? (int64_t)a[2].to_double() : a[2].to_int();
        // as the CPU: alpha converted to T first, then negated for sub
        Tensor tmp = Tensor::scalar_int(alpha, b.ct);
        alpha = tmp.item_int();
        if (sub) alpha = (int64_t)(0 - (uint64_t)alpha);
        if (b.ct == DType::Int32) alpha = (int32_t)alpha;
        if (b.ct == DType::UInt8) alpha = (uint8_t)alpha;
        if (alpha == 1) bin("wadd(a0, a1)");
        else if ((b.ct == DType::UInt8 && alpha == 255) || alpha == -1) bin("wsub(a0, a1)");
        else {
          bin("wadd(a0, wmul(p0, a1))");
          b.param(0, alpha, true);
        }
      } else if (is_one(a[2])) {
        bin(sub ? "a0 - a1" : "a0 + a1");
      } else {
        bin("a0 + p0 * a1");
        double alpha = a[2].to_double();
        // CPU: alpha = M(alpha); negated for sub
        double am = b.M == "float" ? (double)(float)alpha : alpha;
        b.param(sub ? -am : am, 0, false);
      }
      break;
    }
    case Op::mul: bin(isbool ? "a0 && a1" : isint ? "wmul(a0, a1)" : "a0 * a1"); break;
    case Op::minimum: bin(fl ? "nan_min(a0, a1)" : "a1 < a0 ? a1 : a0"); break;
    case Op::maximum: bin(fl ? "nan_max(a0, a1)" : "a0 < a1 ? a1 : a0"); break;
    case Op::pow: {
      if (isint) {
        bin("pow_i(a0, a1)");
        break;
      }
      const Tensor& y = a[1].tensor();
      if (y.dim() == 0) {
        double ev = round_through(b.ct, y.item_double());
        if (b.M == "float") ev = (float)ev;
        if (ev == 2) { un("a0 * a0"); b.spec.tag += "_sq"; break; }
        if (ev == 3) { un("a0 * a0 * a0"); b.spec.tag += "_cube"; break; }
        if (ev == 0.5) { un("m_sqrt(a0)"); b.spec.tag += "_sqrt"; break; }
        if (ev == -1) { un("(" + M + ")1 / a0"); b.spec.tag += "_recip"; break; }
      }
      bin("m_pow(a0, a1)");
      break;
    }
    case Op::div:
      if (fl) {
        if (a[2].is_none()) bin("a0 / a1");
        else if (a[2].str() == "trunc") bin("m_trunc(a0 / a1)");
        else bin("div_floor_f(a0, a1)");
      } else {
        bin(a[2].str() == "trunc" ? "div_trunc_i(a0, a1)" : "div_floor_i(a0, a1)");
        b.spec.zero_div_check = true;
      }
      break;
    case Op::remainder:
      if (fl) bin("rem_f(a0, a1)");
      else {
        bin("rem_i(a0, a1)");
        b.spec.zero_div_check = true;
      }
      break;
    case Op::lerp: {
      b.input(a[0].tensor());
      b.input(a[1].tensor());
      b.input(a[2].tensor());
      e = "lerp_f(a0, a1, a2)";
      break;
    }
    case Op::eq: bin("a0 == a1"); break;
    case Op::ne: bin("a0 != a1"); break;
    case Op::lt: bin("a0 < a1"); break;
    case Op::le: bin("a0 <= a1"); break;
    case Op::gt: bin("a0 > a1"); break;
    case Op::ge: bin("a0 >= a1"); break;
    case Op::logical_and: bin("a0 != (" + M + ")0 && a1 != (" + M + ")0"); break;
    case Op::logical_or: bin("a0 != (" + M + ")0 || a1 != (" + M + ")0"); break;
    case Op::logical_xor: bin("(a0 != (" + M + ")0) != (a1 != (" + M + ")0)"); break;
    case Op::bitwise_and: bin("(" + M + ")(a0 & a1)"); break;
    case Op::bitwise_or: bin("(" + M + ")(a0 | a1)"); break;
    case Op::bitwise_xor: bin("(" + M + ")(a0 ^ a1)"); break;
    case Op::where:
      b.input(a[0].tensor(), true);
      b.input(a[1].tensor());
      b.input(a[2].tensor());
      e = "a0 ? a1 : a2";
      break;
    case Op::masked_fill: {
      b.input(a[0].tensor());
      b.input(a[1].tensor(), true);
      e = "a1 ? p0 : a0";
      scalar_param(b, cpu::scalar_of(a[2].tensor()));
      break;
    }
    default: return false;
  }
  b.spec.expr = e;
  std::vector<PVal> vals = b.vals;
  vals.insert(vals.end(), b.pvals.begin(), b.pvals.end());
  run_elementwise(b.spec, out, b.ptrs, vals);
  return true;
}

// ---- copies ------------------------------------------------------------------------------------

void copy_strided(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && src.sizes() == dst.sizes()) {
    device_allocator(DeviceType::CUDA)->copy(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(),
                                             (size_t)dst.numel() * dst.itemsize());
    return;
  }
  EwSpec s;
  s.tag = "copy";
  // The value goes through src's opmath type, like the CPU's convert_run.
  s.in.push_back({EwIn::Ptr, src.dtype(), mtype(src.dtype())});
  s.out = dst.dtype();
  s.expr = "a0";
  run_elementwise(s, dst, {src}, {});
}

Tensor contiguous_as(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), dt, t.device());
  copy_strided(out, t);
  return out;
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd.is_cuda() && sd.is_cuda() && dd.index == sd.index) return copy_strided(dst, src);
  if (dd.is_cuda() && sd.is_cuda()) {  // between devices: contiguous staging on the source device
    Tensor s = Tensor::empty(dst.sizes(), dst.dtype(), sd);
    copy_strided(s, src);
    Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dd);
    device_allocator(DeviceType::CUDA)->copy(d.data_ptr(), dd, s.data_ptr(), sd, (size_t)d.numel() * d.itemsize());
    if (!d.same(dst)) copy_strided(dst, d);
    return;
  }
  const DeviceAllocator* A = device_allocator(DeviceType::CUDA);
  if (dd.is_cuda()) {  // host -> device: convert and lay out on the host, one transfer, then place
    Tensor h = src;
    if (h.sizes() != dst.sizes()) h = h.as_strided(dst.sizes(), Shape(dst.dim(), 0), h.offset());
    bool direct = dst.is_contiguous() && h.dtype() == dst.dtype() && h.is_contiguous();
    if (direct) {
      A->copy(dst.data_ptr(), dd, h.data_ptr(), sd, (size_t)dst.numel() * dst.itemsize());
      return;
    }
    Tensor hc = Tensor::empty(dst.sizes(), dst.dtype());
    hc.copy_from(h);
    if (dst.is_contiguous()) {
      A->copy(dst.data_ptr(), dd, hc.data_ptr(), sd, (size_t)dst.numel() * dst.itemsize());
      return;
    }
    Tensor d = Tensor::empty(dst.sizes(), dst.dtype(), dd);
    A->copy(d.data_ptr(), dd, hc.data_ptr(), sd, (size_t)d.numel() * d.itemsize());
    copy_strided(dst, d);
    return;
  }
  // device -> host: convert and make contiguous on the device, one transfer, then place.
  Tensor s = src;
  if (s.sizes() != dst.sizes()) s = s.as_strided(dst.sizes(), Shape(dst.dim(), 0), s.offset());
  Tensor dc = contiguous_as(s, dst.dtype());
  if (dst.is_contiguous()) {
    A->copy(dst.data_ptr(), dd, dc.data_ptr(), sd, (size_t)dst.numel() * dst.itemsize());
    return;
  }
  Tensor h = Tensor::empty(dst.sizes(), dst.dtype());
  A->copy(h.data_ptr(), Device{}, dc.data_ptr(), sd, (size_t)h.numel() * h.itemsize());
  Tensor(dst).copy_from(h);
}

void fill(const Tensor& t, double v, int64_t iv, bool is_int) {
  if (t.numel() == 0) return;
  EwSpec s;
  s.tag = "fill";
  s.out = t.dtype();
  std::string M = mtype(t.dtype());
  s.params.push_back(M);
  s.expr = "p0";
  PVal p = is_floating(t.dtype()) ? pval(M, is_int ? (double)iv : round_through(t.dtype(), v), 0, false)
                                  : pval(M, v, iv, is_int);
  run_elementwise(s, t, {}, {p});
}

}  // namespace tc::cuda
