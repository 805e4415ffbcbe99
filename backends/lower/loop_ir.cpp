// The loop IR's small functions: compute types, symbolic sizes, structural identity, printing.
#include "loop_ir.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "tc/error.h"

namespace tc::lower {

Ty compute_type(DType d) {
  switch (d) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return Ty::F32;
    case DType::Float64:
      return Ty::F64;
    case DType::Int64:
      return Ty::I64;
    case DType::Int32:
    case DType::UInt8:
      return Ty::I32;
    case DType::Bool:
      return Ty::Bool;
  }
  __builtin_unreachable();
}

const char* scalar_op_name(ScalarOp op) {
  static const char* const names[] = {
#define TC_SCALAR_OP(name, arity) #name,
#include "scalar_ops.def"
#undef TC_SCALAR_OP
  };
  return names[int(op)];
}

// ---- SymInt ---------------------------------------------------------------------------------------

static SymInt normalized(std::vector<SymInt::Term> terms) {
  std::map<std::vector<int>, int64_t> by;
  for (SymInt::Term& t : terms) {
    std::sort(t.syms.begin(), t.syms.end());
    by[t.syms] += t.c;
  }
  SymInt out;
  for (auto& [syms, c] : by)
    if (c != 0) out.terms.push_back({c, syms});
  return out;
}

SymInt SymInt::of(int64_t c) { return normalized({{c, {}}}); }
SymInt SymInt::sym(int k) { return normalized({{1, {k}}}); }

bool SymInt::is_const() const {
  return terms.empty() || (terms.size() == 1 && terms[0].syms.empty());
}

int64_t SymInt::const_value() const {
  TC_ASSERT(is_const(), "SymInt::const_value of a symbolic size");
  return terms.empty() ? 0 : terms[0].c;
}

int64_t SymInt::eval(const std::vector<int64_t>& symbol_values) const {
  // Checked: a dynamic size from a huge input (a stride-0 expand of 2^40 squared) must be an
  // error, not a wrapped size that allocates too little.
  const char* what = "a compiled graph's size for these input sizes";
  int64_t v = 0;
  for (const Term& t : terms) {
    int64_t p = t.c;
    for (int s : t.syms) p = checked_mul(p, symbol_values.at(s), what);
    v = checked_add(v, p, what);
  }
  return v;
}

std::vector<int64_t> eval_all(const std::vector<SymInt>& v, const std::vector<int64_t>& symbol_values) {
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const SymInt& s : v) out.push_back(s.eval(symbol_values));
  return out;
}

SymInt operator+(const SymInt& a, const SymInt& b) {
  std::vector<SymInt::Term> t = a.terms;
  t.insert(t.end(), b.terms.begin(), b.terms.end());
  return normalized(std::move(t));
}

SymInt operator*(const SymInt& a, const SymInt& b) {
  std::vector<SymInt::Term> t;
  for (const SymInt::Term& x : a.terms)
    for (const SymInt::Term& y : b.terms) {
      SymInt::Term p{x.c * y.c, x.syms};
      p.syms.insert(p.syms.end(), y.syms.begin(), y.syms.end());
      t.push_back(std::move(p));
    }
  return normalized(std::move(t));
}

std::string to_string(const SymInt& s) {
  if (s.terms.empty()) return "0";
  std::string out;
  for (const SymInt::Term& t : s.terms) {
    if (!out.empty()) out += " + ";
    std::string f = t.c != 1 || t.syms.empty() ? std::to_string(t.c) : "";
    for (int k : t.syms) f += (f.empty() ? "s" : "*s") + std::to_string(k);
    out += f;
  }
  return out;
}

// ---- structural identity --------------------------------------------------------------------------

namespace {

struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <typename T>
  void pod(const T& v) { bytes(&v, sizeof v); }
  void vals(const std::vector<Val>& v) {
    pod(v.size());
    bytes(v.data(), v.size() * sizeof(Val));
  }
};

}  // namespace

bool Kernel::same_structure(const Kernel& o) const {
  return buffers == o.buffers && num_size_params == o.num_size_params && instrs == o.instrs &&
         preamble == o.preamble && outer == o.outer && body == o.body && outer_reductions == o.outer_reductions &&
         final == o.final;
}

uint64_t Kernel::structural_hash() const {
  Hasher h;
  h.pod(buffers.size());
  for (const BufferParam& b : buffers) {
    h.pod(b.dtype);
    h.pod(b.written);
  }
  h.pod(num_size_params);
  h.pod(instrs.size());
  for (const Instr& i : instrs) {
    h.pod(i.op);
    h.pod(i.ty);
    h.pod(i.sop);
    h.pod(i.a);
    h.pod(i.b);
    h.pod(i.c);
    h.pod(i.i);
    uint64_t bits;
    std::memcpy(&bits, &i.f, 8);
    h.pod(bits);
  }
  h.vals(preamble);
  h.vals(outer);
  auto reductions = [&](const std::vector<Reduction>& rs) {
    h.pod(rs.size());
    for (const Reduction& r : rs) {
      h.pod(r.op);
      h.pod(r.input);
      h.pod(r.index);
      h.pod(r.result);
      h.pod(r.value);
      h.pod(r.ordered_fma);
    }
  };
  auto stmt = [&](const Stmt& s) {
    h.pod(s.kind);
    h.vals(s.extents);
    h.vals(s.body);
    reductions(s.reductions);
    h.pod(s.stores.size());
    for (const Store& st : s.stores) {
      h.pod(st.buffer);
      h.pod(st.index);
      h.pod(st.value);
    }
  };
  h.pod(body.size());
  for (const Stmt& s : body) stmt(s);
  reductions(outer_reductions);
  stmt(final);
  return h.h;
}

// ---- extern arguments -----------------------------------------------------------------------------

Stack extern_args(const Extern& e, const std::vector<Tensor>& inputs) {
  Stack args;
  size_t in = 0, c = 0;
  for (int k : e.arg_kinds) {
    if (k == Extern::kConstArg) {
      TC_ASSERT(c < e.constants.size(), "extern_args: too few constants");
      args.push_back(e.constants[c++]);
    } else if (k == Extern::kTensorArg) {
      TC_ASSERT(in < inputs.size(), "extern_args: too few inputs");
      args.push_back(inputs[in++]);
    } else {
      TensorList l(inputs.begin() + in, inputs.begin() + in + k);
      in += k;
      args.push_back(std::move(l));
    }
  }
  return args;
}

// ---- printing -------------------------------------------------------------------------------------

static const char* ty_name(Ty t) {
  switch (t) {
    case Ty::Bool: return "bool";
    case Ty::I32: return "i32";
    case Ty::I64: return "i64";
    case Ty::F32: return "f32";
    case Ty::F64: return "f64";
  }
  __builtin_unreachable();
}

static const char* reduce_name(ReduceOp r) {
  switch (r) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::Any: return "any";
    case ReduceOp::All: return "all";
  }
  __builtin_unreachable();
}

static std::string v(Val x) { return "%" + std::to_string(x); }

static std::string print_instr(const Kernel& k, Val x) {
  const Instr& i = k.instrs[x];
  std::string s = v(x) + " = ";
  switch (i.op) {
    case Opc::ConstI: return s + "const." + ty_name(i.ty) + " " + std::to_string(i.i);
    case Opc::ConstF: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", i.f);
      return s + "const." + ty_name(i.ty) + " " + buf;
    }
    case Opc::SizeParam: return s + "size p" + std::to_string(i.a);
    case Opc::OuterVar: return s + "outer " + std::to_string(i.a);
    case Opc::LoopVar: return s + "loopvar " + std::to_string(i.a);
    case Opc::Load: return s + "load." + ty_name(i.ty) + " b" + std::to_string(i.a) + "[" + v(i.b) + "]";
    case Opc::Acc:
      return s + "acc." + ty_name(i.ty) + " r" + std::to_string(i.a) + (i.b ? ".value" : "");
    case Opc::OuterAcc: return s + "acc." + ty_name(i.ty) + " outer r" + std::to_string(i.a);
    case Opc::Math: {
      s += std::string(scalar_op_name(i.sop)) + "." + ty_name(i.ty) + " " + v(i.a);
      if (i.b != kNoVal) s += ", " + v(i.b);
      if (i.c != kNoVal) s += ", " + v(i.c);
      return s;
    }
  }
  __builtin_unreachable();
}

static std::string vals(const std::vector<Val>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); i++) s += (i ? ", " : "") + v(xs[i]);
  return s;
}

static void print_reductions(const std::vector<Reduction>& rs, const std::string& ind, std::string& s) {
  for (size_t r = 0; r < rs.size(); r++) {
    const Reduction& red = rs[r];
    s += ind + "r" + std::to_string(r) + ": " + reduce_name(red.op) + (red.ordered_fma ? " fma " : " ") + v(red.input);
    if (red.index != kNoVal) s += " at " + v(red.index);
    s += " -> " + v(red.result);
    if (red.value != kNoVal) s += ", " + v(red.value);
    s += "\n";
  }
}

static void print_stmt(const Kernel& k, const Stmt& st, const std::string& ind, std::string& s) {
  for (Val x : st.body) s += ind + print_instr(k, x) + "\n";
  print_reductions(st.reductions, ind, s);
  for (const Store& o : st.stores)
    s += ind + "store b" + std::to_string(o.buffer) + "[" + v(o.index) + "] = " + v(o.value) + "\n";
}

std::string print(const Kernel& k) {
  std::string s = "kernel " + k.name + "(";
  for (size_t b = 0; b < k.buffers.size(); b++)
    s += (b ? ", b" : "b") + std::to_string(b) + ": " + dtype_name(k.buffers[b].dtype) +
         (k.buffers[b].written ? " out" : "");
  s += ")";
  if (k.num_size_params) s += " sizes p0..p" + std::to_string(k.num_size_params - 1);
  if (!k.source_nodes.empty()) {
    s += "  # nodes";
    for (int n : k.source_nodes) s += " " + std::to_string(n);
  }
  s += "\n";
  for (Val x : k.preamble) s += "  " + print_instr(k, x) + "\n";
  s += "  for outer [" + vals(k.outer) + "]\n";
  for (const Stmt& st : k.body) {
    std::string ind = "    ";
    if (st.kind == Stmt::Kind::Loop) {
      s += "    loop [" + vals(st.extents) + "]\n";
      ind = "      ";
    }
    print_stmt(k, st, ind, s);
  }
  if (!k.two_level()) return s;
  print_reductions(k.outer_reductions, "  outer ", s);
  s += "  once\n";
  print_stmt(k, k.final, "    ", s);
  return s;
}

static std::string print_view(const BufferView& b) {
  std::string s = "buf" + std::to_string(b.buffer);
  if (!(b.offset == SymInt::of(0))) s += "+" + to_string(b.offset);
  s += "[";
  for (size_t i = 0; i < b.sizes.size(); i++) s += (i ? ", " : "") + to_string(b.sizes[i]);
  s += " : ";
  for (size_t i = 0; i < b.strides.size(); i++) s += (i ? ", " : "") + to_string(b.strides[i]);
  return s + "]";
}

std::string print(const LoweredGraph& g) {
  std::string s;
  for (size_t i = 0; i < g.symbols.size(); i++)
    s += "s" + std::to_string(i) + " = input " + std::to_string(g.symbols[i].input) + " dim " +
         std::to_string(g.symbols[i].dim) + "\n";
  for (size_t b = 0; b < g.buffers.size(); b++) {
    const Buffer& buf = g.buffers[b];
    const char* kind = buf.kind == Buffer::Kind::Input ? "input" : buf.kind == Buffer::Kind::Output ? "output" : "temp";
    s += "buf" + std::to_string(b) + ": " + kind;
    if (buf.io >= 0) s += " " + std::to_string(buf.io);
    s += " " + std::string(dtype_name(buf.dtype)) + "[" + to_string(buf.numel) + "]";
    if (buf.offset >= 0) s += " @" + std::to_string(buf.offset);
    s += "\n";
  }
  for (size_t k = 0; k < g.kernels.size(); k++) s += print(g.kernels[k]);
  for (const Step& st : g.steps) {
    if (st.kind == Step::Kind::Launch) {
      s += "launch " + g.kernels[st.launch.kernel].name + "(";
      for (size_t i = 0; i < st.launch.buffers.size(); i++)
        s += (i ? ", buf" : "buf") + std::to_string(st.launch.buffers[i]);
      for (const SymInt& z : st.launch.sizes) s += "; " + to_string(z);
      s += ")\n";
    } else {
      const Extern& e = st.ext;
      s += e.external ? "call " + e.external->name + "(" : std::string(e.fallback ? "fallback " : "extern ") + op_name(e.op) + "(";
      for (size_t i = 0; i < e.inputs.size(); i++) s += (i ? ", " : "") + print_view(e.inputs[i]);
      s += ") -> " + print_view(e.output);
      for (const BufferView& o : e.more_outputs) s += ", " + print_view(o);
      s += "\n";
    }
  }
  s += "outputs:";
  for (const BufferView& o : g.outputs) s += " " + print_view(o);
  s += "\narena " + std::to_string(g.arena_bytes_static) + " bytes\n";
  for (const std::string& h : g.perf_hints) s += "hint: " + h + "\n";
  return s;
}

std::vector<bool> kernels_without_aliasing(const LoweredGraph& g) {
  std::vector<bool> ok(g.kernels.size(), true);
  for (const Step& s : g.steps) {
    if (s.kind != Step::Kind::Launch) continue;
    const Kernel& k = g.kernels[s.launch.kernel];
    for (size_t i = 0; i < k.buffers.size(); i++) {
      if (!k.buffers[i].written) continue;
      bool bad = g.buffers[s.launch.buffers[i]].kind == Buffer::Kind::Input;
      for (size_t j = 0; j < k.buffers.size(); j++) bad |= j != i && s.launch.buffers[j] == s.launch.buffers[i];
      if (bad) ok[s.launch.kernel] = false;
    }
  }
  return ok;
}

}  // namespace tc::lower
