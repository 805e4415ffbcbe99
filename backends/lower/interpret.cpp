// The loop-IR interpreter: runs a LoweredGraph on CPU tensors, one scalar at a time, with the
// semantics code generators must match (float32 math rounded to float32 after every op,
// float16/bfloat16 rounded on store, integer ops wrapping to their width). Slow and simple: the
// oracle for lowering tests and for the code generators. Externs run through tc::call.
#include <cmath>
#include <cstring>
#include <limits>

#include "lower.h"
#include "tc/error.h"

namespace tc::lower {
namespace {

struct S {
  double f = 0;
  int64_t i = 0;
};

bool is_f(Ty t) { return t == Ty::F32 || t == Ty::F64; }

S fval(double v, Ty t) { return {t == Ty::F32 ? double(float(v)) : v, 0}; }

S ival(int64_t v, Ty t) {
  if (t == Ty::I32) v = int32_t(uint32_t(uint64_t(v)));
  if (t == Ty::Bool) v = v != 0;
  return {0, v};
}

bool truthy(const S& s, Ty t) { return is_f(t) ? s.f != 0 : s.i != 0; }

S load(const char* base, DType d, int64_t i) {
  switch (d) {
    case DType::Float32: return {double(reinterpret_cast<const float*>(base)[i]), 0};
    case DType::Float64: return {reinterpret_cast<const double*>(base)[i], 0};
    case DType::Float16: return {double(float(reinterpret_cast<const Half*>(base)[i])), 0};
    case DType::BFloat16: return {double(float(reinterpret_cast<const BFloat16*>(base)[i])), 0};
    case DType::Int64: return {0, reinterpret_cast<const int64_t*>(base)[i]};
    case DType::Int32: return {0, reinterpret_cast<const int32_t*>(base)[i]};
    case DType::UInt8: return {0, reinterpret_cast<const uint8_t*>(base)[i]};
    case DType::Bool: return {0, reinterpret_cast<const bool*>(base)[i] ? 1 : 0};
  }
  __builtin_unreachable();
}

void store(char* base, DType d, int64_t i, const S& v) {
  switch (d) {
    case DType::Float32: reinterpret_cast<float*>(base)[i] = float(v.f); return;
    case DType::Float64: reinterpret_cast<double*>(base)[i] = v.f; return;
    case DType::Float16: reinterpret_cast<Half*>(base)[i] = Half(float(v.f)); return;
    case DType::BFloat16: reinterpret_cast<BFloat16*>(base)[i] = BFloat16(float(v.f)); return;
    case DType::Int64: reinterpret_cast<int64_t*>(base)[i] = v.i; return;
    case DType::Int32: reinterpret_cast<int32_t*>(base)[i] = int32_t(v.i); return;
    case DType::UInt8: reinterpret_cast<uint8_t*>(base)[i] = uint8_t(v.i); return;
    case DType::Bool: reinterpret_cast<bool*>(base)[i] = v.i != 0; return;
  }
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
  int64_t r = 1;
  while (e) {
    if (e & 1) r = int64_t(uint64_t(r) * uint64_t(b));
    b = int64_t(uint64_t(b) * uint64_t(b));
    e >>= 1;
  }
  return r;
}

// One scalar op. `t` is the result type, `at` the operands' type.
S math(ScalarOp op, Ty t, Ty at, const S& a, const S& b, const S& c) {
  auto F = [&](double v) { return fval(v, t); };
  auto I = [&](int64_t v) { return ival(v, t); };
  auto B = [&](bool v) { return S{0, v ? 1 : 0}; };
  bool fl = is_f(at);
  // float32 ops compute in float
  auto f1 = [&](auto fn) { return at == Ty::F32 ? F(double(fn(float(a.f)))) : F(fn(a.f)); };
  switch (op) {
    case ScalarOp::neg: return fl ? F(-a.f) : I(int64_t(0 - uint64_t(a.i)));
    case ScalarOp::abs: return fl ? F(std::fabs(a.f)) : I(a.i < 0 ? int64_t(0 - uint64_t(a.i)) : a.i);
    case ScalarOp::sign: return fl ? (std::isnan(a.f) ? F(a.f) : F(double((0 < a.f) - (a.f < 0)))) : I((0 < a.i) - (a.i < 0));
    case ScalarOp::sqrt: return f1([](auto x) { return std::sqrt(x); });
    case ScalarOp::rsqrt: return f1([](auto x) { return decltype(x)(1) / std::sqrt(x); });
    case ScalarOp::exp: return f1([](auto x) { return std::exp(x); });
    case ScalarOp::exp2: return f1([](auto x) { return std::exp2(x); });
    case ScalarOp::log: return f1([](auto x) { return std::log(x); });
    case ScalarOp::log2: return f1([](auto x) { return std::log2(x); });
    case ScalarOp::log1p: return f1([](auto x) { return std::log1p(x); });
    case ScalarOp::expm1: return f1([](auto x) { return std::expm1(x); });
    case ScalarOp::sin: return f1([](auto x) { return std::sin(x); });
    case ScalarOp::cos: return f1([](auto x) { return std::cos(x); });
    case ScalarOp::tan: return f1([](auto x) { return std::tan(x); });
    case ScalarOp::tanh: return f1([](auto x) { return std::tanh(x); });
    case ScalarOp::sigmoid: return f1([](auto x) { return decltype(x)(1) / (decltype(x)(1) + std::exp(-x)); });
    case ScalarOp::erf: return f1([](auto x) { return std::erf(x); });
    case ScalarOp::floor: return fl ? F(std::floor(a.f)) : a;
    case ScalarOp::ceil: return fl ? F(std::ceil(a.f)) : a;
    case ScalarOp::round: return fl ? F(std::nearbyint(a.f)) : a;
    case ScalarOp::trunc: return fl ? F(std::trunc(a.f)) : a;
    case ScalarOp::reciprocal: return f1([](auto x) { return decltype(x)(1) / x; });
    case ScalarOp::logical_not: return B(!truthy(a, at));
    case ScalarOp::bitwise_not: return at == Ty::Bool ? B(!a.i) : I(~a.i);
    case ScalarOp::isnan: return B(fl && std::isnan(a.f));
    case ScalarOp::round_f16: return F(float(Half(float(a.f))));
    case ScalarOp::round_bf16: return F(float(BFloat16(float(a.f))));
    case ScalarOp::isinf: return B(fl && std::isinf(a.f));
    case ScalarOp::cast:
      if (t == Ty::Bool) return B(truthy(a, at));
      if (is_f(t)) return F(fl ? a.f : double(a.i));
      if (fl) return I(std::isfinite(a.f) ? int64_t(a.f) : 0);
      return I(a.i);
    case ScalarOp::add: return fl ? (at == Ty::F32 ? F(float(a.f) + float(b.f)) : F(a.f + b.f)) : I(int64_t(uint64_t(a.i) + uint64_t(b.i)));
    case ScalarOp::sub: return fl ? (at == Ty::F32 ? F(float(a.f) - float(b.f)) : F(a.f - b.f)) : I(int64_t(uint64_t(a.i) - uint64_t(b.i)));
    case ScalarOp::mul: return fl ? (at == Ty::F32 ? F(float(a.f) * float(b.f)) : F(a.f * b.f)) : I(int64_t(uint64_t(a.i) * uint64_t(b.i)));
    case ScalarOp::div: return fl ? (at == Ty::F32 ? F(float(a.f) / float(b.f)) : F(a.f / b.f)) : I(b.i ? a.i / b.i : 0);
    case ScalarOp::div_trunc: return fl ? F(std::trunc(at == Ty::F32 ? double(float(a.f) / float(b.f)) : a.f / b.f)) : I(b.i ? a.i / b.i : 0);
    case ScalarOp::div_floor: return fl ? F(std::floor(at == Ty::F32 ? double(float(a.f) / float(b.f)) : a.f / b.f)) : I(floor_div(a.i, b.i));
    case ScalarOp::mod:
      if (fl) {
        double r = at == Ty::F32 ? double(std::fmod(float(a.f), float(b.f))) : std::fmod(a.f, b.f);
        if (r != 0 && ((r < 0) != (b.f < 0))) r += b.f;
        return F(r);
      }
      return I(b.i ? a.i - floor_div(a.i, b.i) * b.i : 0);
    case ScalarOp::fmod: return fl ? F(std::fmod(a.f, b.f)) : I(b.i ? a.i % b.i : 0);
    case ScalarOp::pow: return fl ? (at == Ty::F32 ? F(std::pow(float(a.f), float(b.f))) : F(std::pow(a.f, b.f))) : I(ipow(a.i, b.i));
    case ScalarOp::minimum:
      if (fl) return std::isnan(a.f) || std::isnan(b.f) ? F(NAN) : F(std::min(a.f, b.f));
      return I(std::min(a.i, b.i));
    case ScalarOp::maximum:
      if (fl) return std::isnan(a.f) || std::isnan(b.f) ? F(NAN) : F(std::max(a.f, b.f));
      return I(std::max(a.i, b.i));
    case ScalarOp::eq: return B(fl ? a.f == b.f : a.i == b.i);
    case ScalarOp::ne: return B(fl ? a.f != b.f : a.i != b.i);
    case ScalarOp::lt: return B(fl ? a.f < b.f : a.i < b.i);
    case ScalarOp::le: return B(fl ? a.f <= b.f : a.i <= b.i);
    case ScalarOp::gt: return B(fl ? a.f > b.f : a.i > b.i);
    case ScalarOp::ge: return B(fl ? a.f >= b.f : a.i >= b.i);
    case ScalarOp::logical_and: return B(truthy(a, at) && truthy(b, at));
    case ScalarOp::logical_or: return B(truthy(a, at) || truthy(b, at));
    case ScalarOp::logical_xor: return B(truthy(a, at) != truthy(b, at));
    case ScalarOp::bitwise_and: return I(a.i & b.i);
    case ScalarOp::bitwise_or: return I(a.i | b.i);
    case ScalarOp::bitwise_xor: return I(a.i ^ b.i);
    case ScalarOp::where: return a.i ? b : c;
    case ScalarOp::flag_if: return a;  // never lowered for this runner (LowerOptions::device_checks)
  }
  __builtin_unreachable();
}

struct Acc {
  S v, best;
  int64_t index = -1;
};

void init(Acc& acc, ReduceOp op, Ty t) {
  acc = {};
  switch (op) {
    case ReduceOp::Sum: break;
    case ReduceOp::Prod: acc.v = is_f(t) ? S{1, 0} : S{0, 1}; break;
    case ReduceOp::Max: acc.v = is_f(t) ? S{-INFINITY, 0} : S{0, std::numeric_limits<int64_t>::min()}; break;
    case ReduceOp::Min: acc.v = is_f(t) ? S{INFINITY, 0} : S{0, std::numeric_limits<int64_t>::max()}; break;
    case ReduceOp::ArgMax: case ReduceOp::ArgMin: break;
    case ReduceOp::Any: acc.v = S{0, 0}; break;
    case ReduceOp::All: acc.v = S{0, 1}; break;
  }
}

void combine(Acc& acc, ReduceOp op, Ty t, const S& x, int64_t index) {
  bool fl = is_f(t);
  switch (op) {
    case ReduceOp::Sum: acc.v = math(ScalarOp::add, t, t, acc.v, x, {}); return;
    case ReduceOp::Prod: acc.v = math(ScalarOp::mul, t, t, acc.v, x, {}); return;
    case ReduceOp::Max: case ReduceOp::Min: {
      bool mx = op == ReduceOp::Max;
      if (fl) {
        if (std::isnan(acc.v.f)) return;
        if (std::isnan(x.f) || (mx ? x.f > acc.v.f : x.f < acc.v.f)) acc.v = x;
      } else if (mx ? x.i > acc.v.i : x.i < acc.v.i) {
        acc.v = x;
      }
      return;
    }
    case ReduceOp::ArgMax: case ReduceOp::ArgMin: {
      bool mx = op == ReduceOp::ArgMax;
      bool take = acc.index < 0;
      if (!take && fl) {
        if (std::isnan(acc.best.f)) return;
        take = std::isnan(x.f) || (mx ? x.f > acc.best.f : x.f < acc.best.f);
      } else if (!take) {
        take = mx ? x.i > acc.best.i : x.i < acc.best.i;
      }
      if (take) {
        acc.best = x;
        acc.index = index;
      }
      return;
    }
    case ReduceOp::Any: acc.v.i = acc.v.i || x.i; return;
    case ReduceOp::All: acc.v.i = acc.v.i && x.i; return;
  }
}

// Calls fn(index) for every multi-index of `ext` (row-major).
template <typename Fn>
void for_each(const std::vector<int64_t>& ext, std::vector<int64_t>& idx, Fn fn) {
  idx.assign(ext.size(), 0);
  for (int64_t e : ext)
    if (e <= 0) return;
  while (true) {
    fn();
    int d = int(ext.size()) - 1;
    while (d >= 0 && ++idx[d] == ext[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

void run_kernel(const Kernel& k, const std::vector<char*>& bufs, const std::vector<int64_t>& sizes) {
  std::vector<S> v(k.instrs.size());
  std::vector<int64_t> outer_idx, loop_idx;
  auto eval = [&](Val x) {
    const Instr& in = k.instrs[x];
    switch (in.op) {
      case Opc::ConstI: v[x] = ival(in.i, in.ty); break;
      case Opc::ConstF: v[x] = fval(in.f, in.ty); break;
      case Opc::SizeParam: v[x] = {0, sizes[in.a]}; break;
      case Opc::OuterVar: v[x] = {0, outer_idx[in.a]}; break;
      case Opc::LoopVar: v[x] = {0, loop_idx[in.a]}; break;
      case Opc::Load: v[x] = load(bufs[in.a], k.buffers[in.a].dtype, v[in.b].i); break;
      case Opc::Math: {
        Ty at = k.instrs[in.sop == ScalarOp::where ? in.b : in.a].ty;
        v[x] = math(in.sop, in.ty, at, v[in.a], in.b >= 0 ? v[in.b] : S{}, in.c >= 0 ? v[in.c] : S{});
        break;
      }
      case Opc::Acc: case Opc::OuterAcc: break;  // set by its loop
    }
  };
  auto do_stores = [&](const Stmt& s) {
    for (const Store& st : s.stores) store(bufs[st.buffer], k.buffers[st.buffer].dtype, v[st.index].i, v[st.value]);
  };
  for (Val x : k.preamble) eval(x);
  std::vector<int64_t> outer;
  for (Val x : k.outer) outer.push_back(v[x].i);
  std::vector<Acc> accs, outer_accs(k.outer_reductions.size());
  for (size_t r = 0; r < outer_accs.size(); r++)
    init(outer_accs[r], k.outer_reductions[r].op, k.instrs[k.outer_reductions[r].result].ty);
  for_each(outer, outer_idx, [&]() {
    for (const Stmt& s : k.body) {
      if (s.kind == Stmt::Kind::Code) {
        for (Val x : s.body) eval(x);
        do_stores(s);
        continue;
      }
      std::vector<int64_t> ext;
      for (Val x : s.extents) ext.push_back(v[x].i);
      accs.assign(s.reductions.size(), {});
      for (size_t r = 0; r < s.reductions.size(); r++)
        init(accs[r], s.reductions[r].op, k.instrs[s.reductions[r].input].ty);
      std::vector<int64_t> li;
      for_each(ext, li, [&]() {
        loop_idx = li;
        for (Val x : s.body) eval(x);
        for (size_t r = 0; r < s.reductions.size(); r++) {
          const Reduction& red = s.reductions[r];
          if (red.ordered_fma) {  // as codegen: fma of the product's operands, in the input's type
            const Instr& mul = k.instrs[red.input];
            double a = v[mul.a].f, b = v[mul.b].f;
            accs[r].v.f = mul.ty == Ty::F32 ? (double)std::fmaf((float)a, (float)b, (float)accs[r].v.f)
                                            : std::fma(a, b, accs[r].v.f);
            continue;
          }
          combine(accs[r], red.op, k.instrs[red.input].ty, v[red.input], red.index >= 0 ? v[red.index].i : 0);
        }
        do_stores(s);
      });
      for (size_t r = 0; r < s.reductions.size(); r++) {
        const Reduction& red = s.reductions[r];
        bool arg = red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin;
        v[red.result] = arg ? S{0, std::max<int64_t>(accs[r].index, 0)} : accs[r].v;
        if (red.value >= 0) v[red.value] = accs[r].best;
      }
    }
    for (size_t r = 0; r < outer_accs.size(); r++) {  // in outer order (a code generator may reassociate)
      const Reduction& red = k.outer_reductions[r];
      combine(outer_accs[r], red.op, k.instrs[red.result].ty, v[red.input], 0);
    }
  });
  if (!k.two_level()) return;
  for (size_t r = 0; r < outer_accs.size(); r++) v[k.outer_reductions[r].result] = outer_accs[r].v;
  for (Val x : k.final.body) eval(x);
  do_stores(k.final);
}

Tensor view_of(const Tensor& base, const BufferView& b, const std::vector<int64_t>& syms) {
  Shape sizes, strides;
  for (const SymInt& s : b.sizes) sizes.push_back(s.eval(syms));
  for (const SymInt& s : b.strides) strides.push_back(s.eval(syms));
  return base.as_strided(sizes, strides, base.offset() + b.offset.eval(syms));
}

}  // namespace

std::vector<Tensor> run(const LoweredGraph& g, const std::vector<Tensor>& inputs) {
  std::vector<int64_t> syms;
  for (const Symbol& s : g.symbols) syms.push_back(inputs.at(s.input).sizes()[s.dim]);
  std::shared_ptr<Storage> arena = Storage::allocate(size_t(std::max<int64_t>(g.arena_bytes_static, 0)), Device{});
  std::vector<Tensor> bufs(g.buffers.size());
  for (size_t b = 0; b < g.buffers.size(); b++) {
    const Buffer& buf = g.buffers[b];
    if (buf.kind == Buffer::Kind::Input) {
      bufs[b] = inputs.at(buf.io);
      TC_CHECK(bufs[b].device().is_cpu(), DeviceError, "the loop-IR interpreter runs on CPU tensors only");
    } else if (buf.offset >= 0) {
      auto impl = std::make_shared<TensorImpl>();
      impl->storage = arena;
      impl->sizes = {buf.numel.eval(syms)};
      impl->strides = {1};
      impl->offset = buf.offset / int64_t(itemsize(buf.dtype));
      impl->dtype = buf.dtype;
      bufs[b] = Tensor(impl);
    } else {
      bufs[b] = Tensor::empty({buf.numel.eval(syms)}, buf.dtype);
    }
  }
  for (const Step& s : g.steps) {
    if (s.kind == Step::Kind::Launch) {
      std::vector<char*> ptrs;
      for (int b : s.launch.buffers) ptrs.push_back(static_cast<char*>(bufs[b].data_ptr()));
      run_kernel(g.kernels[s.launch.kernel], ptrs, eval_all(s.launch.sizes, syms));
      continue;
    }
    const Extern& e = s.ext;
    std::vector<Tensor> ins;
    for (const BufferView& v : e.inputs) ins.push_back(view_of(bufs[v.buffer], v, syms));
    Stack out;
    try {
      if (e.external) {
        for (const Tensor& t : e.external->call(extern_args(e, ins))) out.push_back(t);
      } else {
        out = call(e.op, extern_args(e, ins));
      }
    } catch (const capture::NodeError&) {
      throw;
    } catch (const Error& err) {
      throw capture::NodeError(err, e.node);  // capture names the node's user line
    }
    auto put = [&](const BufferView& v, const Tensor& result) {
      Tensor dst = view_of(bufs[v.buffer], v, syms);
      if (dst.data_ptr() == result.data_ptr() && dst.strides() == result.strides()) return;  // in place
      dst.copy_from(result);
    };
    put(e.output, out.at(0).tensor());
    for (size_t k = 0; k < e.more_outputs.size(); k++) put(e.more_outputs[k], out.at(k + 1).tensor());
  }
  std::vector<Tensor> outs;
  for (const BufferView& o : g.outputs) outs.push_back(view_of(bufs[o.buffer], o, syms));
  return outs;
}

}  // namespace tc::lower
