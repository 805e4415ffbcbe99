// Loop-IR kernels to CUDA C++ (cuda_codegen.h). Every instruction becomes one `const` local of
// its compute type, so the source reads like the loop IR printout; a row kernel's Loop stmts are
// split over the lanes of its row (strided iterations), and reductions are combined with warp
// shuffles and, for a block per row, shared memory.
#include "cuda_codegen.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "cuda/runtime.h"
#include "cuda_kernel_analysis.h"
#include "tc/error.h"

namespace tc::backends::cuda {

namespace {

const char* tyname(Ty t) {
  switch (t) {
    case Ty::Bool: return "bool";
    case Ty::I32: return "int";
    case Ty::I64: return "i64";
    case Ty::F32: return "float";
    case Ty::F64: return "double";
  }
  return "?";
}

// Storage type of a buffer element: stdlib/cuda's names, bool as a byte (any nonzero byte reads
// as true).
const char* storage_type(DType d) { return d == DType::Bool ? "u8" : tc::cuda::ctype(d); }

// As the CPU code generator: Bool for predicates, the cast's target, else the operands' type.
Ty result_type(ScalarOp op, Ty ty, const std::vector<Ty>& operands) {
  switch (op) {
    case ScalarOp::eq: case ScalarOp::ne: case ScalarOp::lt: case ScalarOp::le: case ScalarOp::gt:
    case ScalarOp::ge: case ScalarOp::logical_not: case ScalarOp::logical_and: case ScalarOp::logical_or:
    case ScalarOp::logical_xor: case ScalarOp::isnan: case ScalarOp::isinf:
      return Ty::Bool;
    case ScalarOp::cast: return ty;
    case ScalarOp::where: return operands[1];
    default: return operands.size() == 2 && operands[0] != operands[1] ? ty : operands[0];
  }
}

std::string cast(const std::string& e, Ty from, Ty to) {
  if (from == to) return e;
  if (to == Ty::Bool) return "(" + e + " != 0)";
  return "((" + std::string(tyname(to)) + ")" + e + ")";
}

std::string int_lit(int64_t v, Ty t) {
  if (t == Ty::Bool) return v ? "true" : "false";
  if (t == Ty::F32 || t == Ty::F64) {
    char b[64];
    std::snprintf(b, sizeof b, "((%s)%" PRId64 "ll)", tyname(t), v);
    return b;
  }
  if (v > -(int64_t(1) << 31) && v < (int64_t(1) << 31))
    return t == Ty::I64 ? std::to_string(v) + "ll" : "(" + std::to_string(v) + ")";
  char b[64];
  std::snprintf(b, sizeof b, "((%s)0x%" PRIx64 "ull)", tyname(t), (uint64_t)v);
  return b;
}

std::string float_lit(double v, Ty t) {
  char b[80];
  if (t == Ty::F32) {
    float f = (float)v;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (!std::isfinite(f)) {
      std::snprintf(b, sizeof b, "__int_as_float(0x%08x)", bits);
      return b;
    }
    std::snprintf(b, sizeof b, "%.9g", f);
    std::string s = b;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s + "f";
  }
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  if (std::isfinite(v)) std::snprintf(b, sizeof b, "%.17g", v);
  else std::snprintf(b, sizeof b, "__longlong_as_double(0x%016" PRIx64 "ll)", bits);
  std::string s = b;
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class Emitter {
 public:
  Emitter(const Kernel& k, const KernelShape& sh) : k_(k), sh_(sh), names_(k.instrs.size()), keys_(k.instrs.size()) {}
  std::string emit(const std::string& name);

 private:
  std::string get(Val v);
  Ty ty(Val v) const { return k_.instrs.at(v).ty; }
  void check_val(Val v) const {
    TC_CHECK(v >= 0 && v < (Val)k_.instrs.size(), CompileError, "cuda codegen: %s: value %%%d out of range",
             k_.name.c_str(), v);
  }
  void line(const std::string& s) { out_ += std::string(ind_ * 2, ' ') + s + "\n"; }
  void emit_instr(Val v);
  void emit_instrs(const std::vector<Val>& vals);
  std::string math(const Instr& in);
  void emit_stores(const Stmt& s, bool guard, int stmt = -1);
  void emit_vector_body();
  void emit_body_copy(const std::string& inner);
  void emit_split_end(const std::vector<std::string>& ext, const std::string& I);
  void emit_loop(const Stmt& s, int index);
  void emit_two_level_end();
  void block_combine(const std::string& v, ReduceOp op, Ty t, const std::string& sm);
  void barrier();
  std::string load_expr(int buffer, const std::string& index) const;
  std::string loaded(int buffer, const std::string& element) const;
  const std::string& key(Val v);
  void plan_row_cache();

  const Kernel& k_;
  KernelShape sh_;
  std::vector<std::string> names_;
  std::vector<std::string> outer_vars_, loop_vars_;
  std::string out_, shared_;
  int ind_ = 0;
  // Row cache (plan_row_cache): every Loop of a row kernel walks the same static extents, at most
  // kCachedPerLane iterations per lane, fully unrolled; a load that several Loops make (the row of
  // softmax, layer_norm) is kept in registers by the first (`c<n>[t]`) and read from there by the
  // others, so the row is read from memory once.
  int cached_per_lane_ = 0;             // iterations per lane (0: no row cache)
  int64_t row_ = 0;                     // the Loops' iteration count
  std::map<std::string, int> cached_;   // load key -> array number
  std::vector<int> filled_by_;          // per array: the Loop that fills it (-1: not yet)
  int loop_index_ = -1;                 // the Loop being emitted
  std::vector<std::string> keys_;       // key() memo
  // A `vec` kernel (emit_vector_body): its vector accesses, and the element of the group that the
  // body copy being emitted computes (-1: element by element, no vector accesses).
  VectorAccesses va_;
  int vec_u_ = -1;
};

constexpr int kCachedPerLane = 32;

// A structural key of v: equal for equal computations in different Loops (loop variables by dim).
const std::string& Emitter::key(Val v) {
  check_val(v);
  if (!keys_[v].empty()) return keys_[v];
  const Instr& in = k_.instrs[v];
  std::string r;
  switch (in.op) {
    case Opc::ConstI: r = "i" + std::to_string((int)in.ty) + ":" + std::to_string(in.i); break;
    case Opc::ConstF: r = "f" + std::to_string((int)in.ty) + ":" + float_lit(in.f, Ty::F64); break;
    case Opc::SizeParam: r = "s" + std::to_string(in.a); break;
    case Opc::OuterVar: r = "o" + std::to_string(in.a); break;
    case Opc::LoopVar: r = "l" + std::to_string(in.a); break;
    case Opc::Acc: case Opc::OuterAcc: r = "a" + std::to_string(v); break;
    case Opc::Load: r = "L" + std::to_string(in.a) + "[" + key(in.b) + "]" + std::to_string((int)in.ty); break;
    case Opc::Math: {
      r = std::string("M") + lower::scalar_op_name(in.sop) + std::to_string((int)in.ty) + "(";
      for (Val x : {in.a, in.b, in.c})
        if (x != lower::kNoVal) r += key(x) + ",";
      r += ")";
      break;
    }
  }
  keys_[v] = r;
  return keys_[v];
}

// Whether this row kernel keeps its rows in registers (the row cache, above), and which loads.
void Emitter::plan_row_cache() {
  if (sh_.threads_per_row == 1 || sh_.device_fn) return;
  std::vector<const Stmt*> loops;
  for (const Stmt& st : k_.body)
    if (st.kind == Stmt::Kind::Loop) loops.push_back(&st);
  if (loops.size() < 2) return;
  int64_t row = 1;
  for (Val e : loops[0]->extents) {
    auto x = eval_uniform(k_, e, nullptr);
    if (!x) return;
    row *= std::max<int64_t>(0, *x);
  }
  for (const Stmt* l : loops) {
    if (l->extents.size() != loops[0]->extents.size()) return;
    for (size_t d = 0; d < l->extents.size(); d++)
      if (key(l->extents[d]) != key(loops[0]->extents[d])) return;
  }
  const int64_t per_lane = (row + sh_.threads_per_row - 1) / sh_.threads_per_row;
  if (row == 0 || per_lane > kCachedPerLane) return;
  std::map<std::string, int> loops_reading;  // load key -> Loops that load it
  for (const Stmt* l : loops) {
    std::set<std::string> seen;
    for (Val v : l->body) {
      const Instr& in = k_.instrs[v];
      if (in.op == Opc::Load && !k_.buffers.at(in.a).written && seen.insert(key(v)).second) loops_reading[key(v)]++;
    }
  }
  for (const auto& [k, n] : loops_reading)
    if (n > 1) cached_.emplace(k, (int)cached_.size());
  // registers: __launch_bounds__(1024) leaves 64 a thread
  const int64_t budget = sh_.block >= 1024 ? 16 : 64;
  if (cached_.empty() || per_lane * (int64_t)cached_.size() > budget) {
    cached_.clear();
    return;
  }
  cached_per_lane_ = (int)per_lane;
  row_ = row;
}

std::string Emitter::get(Val v) {
  check_val(v);
  if (!names_[v].empty()) return names_[v];
  const Instr& in = k_.instrs[v];
  switch (in.op) {
    case Opc::ConstI: return int_lit(in.i, in.ty);
    case Opc::ConstF:
      if (is_float(in.ty)) return float_lit(in.f, in.ty);
      return int_lit(in.ty == Ty::Bool ? in.f != 0 : (int64_t)in.f, in.ty);
    case Opc::SizeParam:
      TC_CHECK(in.a >= 0 && in.a < k_.num_size_params, CompileError, "cuda codegen: %s: size parameter %d of %d",
               k_.name.c_str(), (int)in.a, k_.num_size_params);
      return cast("s" + std::to_string(in.a), Ty::I64, in.ty);
    case Opc::OuterVar:
      TC_CHECK(in.a >= 0 && in.a < (Val)outer_vars_.size(), CompileError, "cuda codegen: %s: outer var %d outside the nest",
               k_.name.c_str(), (int)in.a);
      return cast(outer_vars_[in.a], Ty::I64, in.ty);
    case Opc::LoopVar:
      TC_CHECK(in.a >= 0 && in.a < (Val)loop_vars_.size(), CompileError, "cuda codegen: %s: loop var %d outside a loop",
               k_.name.c_str(), (int)in.a);
      return cast(loop_vars_[in.a], Ty::I64, in.ty);
    default: break;
  }
  TC_FAIL(CompileError, "cuda codegen: %s: value %%%d used outside its scope", k_.name.c_str(), v);
}

std::string Emitter::load_expr(int buffer, const std::string& index) const {
  TC_CHECK(buffer >= 0 && buffer < (int)k_.buffers.size(), CompileError, "cuda codegen: %s: load of buffer %d",
           k_.name.c_str(), buffer);
  return loaded(buffer, "b" + std::to_string(buffer) + "[" + index + "]");
}

// An element `p` of buffer `buffer` as its compute type.
std::string Emitter::loaded(int buffer, const std::string& p) const {
  switch (k_.buffers[buffer].dtype) {
    case DType::Float16: case DType::BFloat16: return "ld(" + p + ")";
    case DType::UInt8: return "((int)" + p + ")";
    case DType::Bool: return "(" + p + " != 0)";
    default: return p;
  }
}

std::string Emitter::math(const Instr& in) {
  const int n = arity(in.sop);
  std::vector<std::string> a;
  std::vector<Ty> tys;
  for (Val x : {in.a, in.b, in.c}) {
    if ((int)a.size() == n) break;
    a.push_back(get(x));
    tys.push_back(ty(x));
  }
  if (in.sop == ScalarOp::cast) return cast(a[0], tys[0], in.ty);
  if (in.sop == ScalarOp::flag_if) return "flag_if(" + a[0] + ", " + a[1] + ", " + a[2] + ", tc_err)";
  if (in.sop == ScalarOp::where)
    return "(" + cast(a[0], tys[0], Ty::Bool) + " ? " + a[1] + " : " + cast(a[2], tys[2], tys[1]) + ")";
  Ty t = tys[0];
  const std::string T = tyname(t);
  const bool fl = is_float(t), bl = t == Ty::Bool;
  auto need_float = [&] {
    TC_CHECK(fl, CompileError, "cuda codegen: %s of a non-float value", lower::scalar_op_name(in.sop));
  };
  if (n == 1) {
    const std::string& x = a[0];
    switch (in.sop) {
      case ScalarOp::neg: return bl ? x : fl ? "(-" + x + ")" : "wsub((" + T + ")0, " + x + ")";
      case ScalarOp::abs: return bl ? x : fl ? "m_fabs(" + x + ")" : "(" + x + " < 0 ? wsub((" + T + ")0, " + x + ") : " + x + ")";
      case ScalarOp::sign:
        return bl ? x : "((" + T + ")(((" + T + ")0 < " + x + ") - (" + x + " < (" + T + ")0)))";
      case ScalarOp::sqrt: need_float(); return "m_sqrt(" + x + ")";
      case ScalarOp::rsqrt: need_float(); return "((" + T + ")1 / m_sqrt(" + x + "))";
      case ScalarOp::exp: need_float(); return "m_exp(" + x + ")";
      case ScalarOp::exp2: need_float(); return "m_exp2(" + x + ")";
      case ScalarOp::log: need_float(); return "m_log(" + x + ")";
      case ScalarOp::log2: need_float(); return "m_log2(" + x + ")";
      case ScalarOp::log1p: need_float(); return "m_log1p(" + x + ")";
      case ScalarOp::expm1: need_float(); return "m_expm1(" + x + ")";
      case ScalarOp::sin: need_float(); return "m_sin(" + x + ")";
      case ScalarOp::cos: need_float(); return "m_cos(" + x + ")";
      case ScalarOp::tan: need_float(); return "m_tan(" + x + ")";
      case ScalarOp::tanh: need_float(); return "m_tanh(" + x + ")";
      case ScalarOp::erf: need_float(); return "m_erf(" + x + ")";
      case ScalarOp::sigmoid: need_float(); return "((" + T + ")1 / ((" + T + ")1 + m_exp(-" + x + ")))";
      case ScalarOp::floor: return fl ? "m_floor(" + x + ")" : x;
      case ScalarOp::ceil: return fl ? "m_ceil(" + x + ")" : x;
      case ScalarOp::round: return fl ? "m_rint(" + x + ")" : x;
      case ScalarOp::trunc: return fl ? "m_trunc(" + x + ")" : x;
      case ScalarOp::reciprocal: need_float(); return "((" + T + ")1 / " + x + ")";
      case ScalarOp::logical_not: return "(!" + cast(x, t, Ty::Bool) + ")";
      case ScalarOp::bitwise_not:
        TC_CHECK(!fl, CompileError, "cuda codegen: bitwise_not of a float value");
        return bl ? "(!" + x + ")" : "((" + T + ")~" + x + ")";
      case ScalarOp::isnan: return fl ? "(" + x + " != " + x + ")" : "false";
      case ScalarOp::round_f16: return "ld(Cv<f16>::f(" + x + "))";
      case ScalarOp::round_bf16: return "ld(Cv<bf16>::f(" + x + "))";
      case ScalarOp::isinf: return fl ? "(m_fabs(" + x + ") == m_inf<" + T + ">())" : "false";
      default: break;
    }
    TC_FAIL(CompileError, "cuda codegen: %s is not a unary primitive", lower::scalar_op_name(in.sop));
  }
  TC_CHECK(n == 2, CompileError, "cuda codegen: %s with %d operands", lower::scalar_op_name(in.sop), n);
  // Operands of different types meet at the result's type (predicates: at the wider operand's).
  if (tys[1] != t) t = in.ty == Ty::Bool ? std::max(tys[0], tys[1]) : in.ty;
  const std::string x = cast(a[0], tys[0], t), y = cast(a[1], tys[1], t);
  const std::string U = tyname(t);
  const bool f2 = is_float(t), b2 = t == Ty::Bool;
  auto bin = [&](const char* o) { return "(" + x + " " + o + " " + y + ")"; };
  auto call = [&](const char* f) { return std::string(f) + "(" + x + ", " + y + ")"; };
  switch (in.sop) {
    case ScalarOp::add: return f2 ? bin("+") : b2 ? bin("||") : call("wadd");
    case ScalarOp::sub: return f2 ? bin("-") : b2 ? bin("!=") : call("wsub");
    case ScalarOp::mul: return f2 ? bin("*") : b2 ? bin("&&") : call("wmul");
    case ScalarOp::div:
      TC_CHECK(f2, CompileError, "cuda codegen: true division of non-float values");
      return bin("/");
    case ScalarOp::div_trunc: return f2 ? "m_trunc(" + bin("/") + ")" : call("div_trunc_i");
    case ScalarOp::div_floor: return f2 ? call("div_floor_f") : call("div_floor_i");
    case ScalarOp::mod: return f2 ? call("rem_f") : call("rem_i");
    case ScalarOp::fmod: return f2 ? call("m_fmod") : call("fmod_i");
    case ScalarOp::pow: {
      if (b2) return "(" + x + " || !" + y + ")";
      if (!f2) return call("pow_i");
      const Instr& e = k_.instrs[in.b];
      if (e.op == Opc::ConstF || e.op == Opc::ConstI) {
        double c = e.op == Opc::ConstF ? e.f : (double)e.i;
        if (c == 2) return "(" + x + " * " + x + ")";
        if (c == 3) return "(" + x + " * " + x + " * " + x + ")";
        if (c == 0.5) return "m_sqrt(" + x + ")";
        if (c == -1) return "((" + U + ")1 / " + x + ")";
      }
      return call("m_pow");
    }
    case ScalarOp::minimum: return f2 ? call("nan_min") : b2 ? bin("&&") : "(" + y + " < " + x + " ? " + y + " : " + x + ")";
    case ScalarOp::maximum: return f2 ? call("nan_max") : b2 ? bin("||") : "(" + x + " < " + y + " ? " + y + " : " + x + ")";
    case ScalarOp::eq: return bin("==");
    case ScalarOp::ne: return bin("!=");
    case ScalarOp::lt: return bin("<");
    case ScalarOp::le: return bin("<=");
    case ScalarOp::gt: return bin(">");
    case ScalarOp::ge: return bin(">=");
    case ScalarOp::logical_and: return "(" + cast(x, t, Ty::Bool) + " && " + cast(y, t, Ty::Bool) + ")";
    case ScalarOp::logical_or: return "(" + cast(x, t, Ty::Bool) + " || " + cast(y, t, Ty::Bool) + ")";
    case ScalarOp::logical_xor: return "(" + cast(x, t, Ty::Bool) + " != " + cast(y, t, Ty::Bool) + ")";
    case ScalarOp::bitwise_and: case ScalarOp::bitwise_or: case ScalarOp::bitwise_xor: {
      TC_CHECK(!f2, CompileError, "cuda codegen: %s of float values", lower::scalar_op_name(in.sop));
      const char* o = in.sop == ScalarOp::bitwise_and ? "&" : in.sop == ScalarOp::bitwise_or ? "|" : "^";
      return "((" + U + ")" + bin(o) + ")";
    }
    default: break;
  }
  TC_FAIL(CompileError, "cuda codegen: %s is not a binary primitive", lower::scalar_op_name(in.sop));
}

void Emitter::emit_instr(Val v) {
  check_val(v);
  const Instr& in = k_.instrs[v];
  std::string e;
  switch (in.op) {
    case Opc::ConstI: case Opc::ConstF: case Opc::SizeParam: case Opc::OuterVar: case Opc::LoopVar:
      return;  // written where used
    case Opc::Acc: case Opc::OuterAcc:
      TC_CHECK(!names_[v].empty(), CompileError, "cuda codegen: %s: reduction result %%%d read before its loop",
               k_.name.c_str(), v);
      return;
    case Opc::Load: {
      auto c = loop_index_ >= 0 ? cached_.find(key(v)) : cached_.end();
      if (c != cached_.end() && filled_by_[c->second] >= 0 && filled_by_[c->second] != loop_index_) {
        names_[v] = "c" + std::to_string(c->second) + "[t]";  // loaded by an earlier Loop of this row
        return;
      }
      if (vec_u_ >= 0 && va_.loads.count(v))  // element u of the group's vector load
        e = cast(loaded(in.a, "L" + std::to_string(v) + ".v[" + std::to_string(vec_u_) + "]"),
                 lower::compute_type(k_.buffers.at(in.a).dtype), in.ty);
      else
        e = cast(load_expr(in.a, cast(get(in.b), ty(in.b), Ty::I64)), lower::compute_type(k_.buffers.at(in.a).dtype),
                 in.ty);
      if (c != cached_.end()) {
        filled_by_[c->second] = loop_index_;
        names_[v] = "v" + std::to_string(v);
        line("const " + std::string(tyname(in.ty)) + " " + names_[v] + " = " + e + ";");
        line("c" + std::to_string(c->second) + "[t] = " + names_[v] + ";");
        return;
      }
      break;
    }
    case Opc::Math: {
      std::vector<Ty> tys;
      for (Val x : {in.a, in.b, in.c})
        if ((int)tys.size() < arity(in.sop)) tys.push_back(ty(x));
      e = cast(math(in), result_type(in.sop, in.ty, tys), in.ty);
      break;
    }
  }
  names_[v] = "v" + std::to_string(v);
  line("const " + std::string(tyname(in.ty)) + " " + names_[v] + " = " + e + ";");
}

void Emitter::emit_instrs(const std::vector<Val>& vals) {
  for (Val v : vals) emit_instr(v);
}

std::string store_value(const std::string& v, Ty from, DType d) {
  switch (d) {
    case DType::Float32: return cast(v, from, Ty::F32);
    case DType::Float64: return cast(v, from, Ty::F64);
    case DType::Float16: return "Cv<f16>::f(" + cast(v, from, Ty::F32) + ")";
    case DType::BFloat16: return "Cv<bf16>::f(" + cast(v, from, Ty::F32) + ")";
    case DType::Int64: return cast(v, from, Ty::I64);
    case DType::Int32: return cast(v, from, Ty::I32);
    case DType::UInt8: return "((u8)" + cast(v, from, is_float(from) ? Ty::I64 : Ty::I32) + ")";
    case DType::Bool: return "((u8)" + cast(v, from, Ty::Bool) + ")";
  }
  return v;
}

void Emitter::emit_stores(const Stmt& s, bool guard, int stmt) {
  if (s.stores.empty()) return;
  if (guard) {
    line("if (lane == 0) {");
    ind_++;
  }
  for (size_t j = 0; j < s.stores.size(); j++) {
    const lower::Store& st = s.stores[j];
    TC_CHECK(st.buffer >= 0 && st.buffer < (int)k_.buffers.size() && k_.buffers[st.buffer].written, CompileError,
             "cuda codegen: %s: store to buffer %d", k_.name.c_str(), st.buffer);
    if (vec_u_ >= 0 && va_.stores.count({stmt, (int)j})) {  // element u of the group's vector store
      line("S" + std::to_string(stmt) + "_" + std::to_string(j) + ".v[" + std::to_string(vec_u_) +
           "] = " + store_value(get(st.value), ty(st.value), k_.buffers[st.buffer].dtype) + ";");
      continue;
    }
    line("b" + std::to_string(st.buffer) + "[" + cast(get(st.index), ty(st.index), Ty::I64) +
         "] = " + store_value(get(st.value), ty(st.value), k_.buffers[st.buffer].dtype) + ";");
  }
  if (guard) {
    ind_--;
    line("}");
  }
}

void Emitter::barrier() {
  if (sh_.threads_per_row == 1) return;
  line(sh_.threads_per_row == 32 ? "__syncwarp();" : "__syncthreads();");
}

std::string init_of(ReduceOp op, Ty t) {
  const std::string T = tyname(t);
  auto lowest = [&] {
    return is_float(t) ? "(-m_inf<" + T + ">())" : t == Ty::Bool ? std::string("false")
           : t == Ty::I32 ? std::string("(-2147483647 - 1)") : std::string("(-9223372036854775807ll - 1)");
  };
  auto highest = [&] {
    return is_float(t) ? "m_inf<" + T + ">()" : t == Ty::Bool ? std::string("true")
           : t == Ty::I32 ? std::string("2147483647") : std::string("9223372036854775807ll");
  };
  switch (op) {
    case ReduceOp::Sum: return cast("0", Ty::I32, t);
    case ReduceOp::Prod: return cast("1", Ty::I32, t);
    case ReduceOp::Max: case ReduceOp::ArgMax: return lowest();
    case ReduceOp::Min: case ReduceOp::ArgMin: return highest();
    case ReduceOp::Any: return "false";
    case ReduceOp::All: return "true";
  }
  return "0";
}

// acc = acc (op) x, for the non-arg reductions.
std::string combine(ReduceOp op, Ty t, const std::string& acc, const std::string& x) {
  const bool fl = is_float(t), bl = t == Ty::Bool;
  switch (op) {
    case ReduceOp::Sum: return fl ? acc + " + " + x : bl ? acc + " || " + x : "wadd(" + acc + ", " + x + ")";
    case ReduceOp::Prod: return fl ? acc + " * " + x : bl ? acc + " && " + x : "wmul(" + acc + ", " + x + ")";
    case ReduceOp::Max:
      return fl ? "nan_max(" + acc + ", " + x + ")" : bl ? acc + " || " + x : "(" + acc + " < " + x + " ? " + x + " : " + acc + ")";
    case ReduceOp::Min:
      return fl ? "nan_min(" + acc + ", " + x + ")" : bl ? acc + " && " + x : "(" + x + " < " + acc + " ? " + x + " : " + acc + ")";
    case ReduceOp::Any: return acc + " || " + x;
    case ReduceOp::All: return acc + " && " + x;
    case ReduceOp::ArgMax: case ReduceOp::ArgMin: break;
  }
  TC_FAIL(CompileError, "cuda codegen: combine of an arg reduction");
}

void Emitter::emit_loop(const Stmt& s, int index) {
  const int R = sh_.threads_per_row;
  struct Acc {
    const lower::Reduction* r;
    Ty t;
    std::string v, i;  // accumulator and (arg reductions) index variable
    bool arg;
  };
  std::vector<Acc> accs;
  for (size_t j = 0; j < s.reductions.size(); j++) {
    const lower::Reduction& r = s.reductions[j];
    check_val(r.result);
    TC_CHECK(k_.instrs[r.result].op == Opc::Acc, CompileError, "cuda codegen: %s: a reduction without its Acc instr",
             k_.name.c_str());
    const bool arg = r.op == ReduceOp::ArgMax || r.op == ReduceOp::ArgMin;
    Ty t = arg ? ty(r.input) : ty(r.result);
    if (r.op == ReduceOp::Any || r.op == ReduceOp::All) t = Ty::Bool;
    Acc a{&r, t, "a" + std::to_string(index) + "_" + std::to_string(j), "", arg};
    line(std::string(tyname(t)) + " " + a.v + " = " + init_of(r.op, t) + ";");
    if (arg) {
      a.i = a.v + "i";
      line("i64 " + a.i + " = -1;");
    }
    accs.push_back(a);
  }
  std::vector<std::string> ext;
  for (Val e : s.extents) ext.push_back(cast(get(e), ty(e), Ty::I64));
  const std::vector<std::string> saved = loop_vars_;
  loop_vars_.clear();
  const std::string L = "l" + std::to_string(index) + "_";
  int opened = 0;
  line("{");
  ind_++;
  if (ext.empty()) {
    line("if (lane == 0) {");  // one iteration
    ind_++;
    opened = 1;
  } else if (R == 1 && !sh_.split) {
    for (size_t d = 0; d < ext.size(); d++) {
      loop_vars_.push_back(L + std::to_string(d));
      line("for (i64 " + loop_vars_[d] + " = 0; " + loop_vars_[d] + " < " + ext[d] + "; " + loop_vars_[d] + "++) {");
      ind_++;
      opened++;
    }
  } else {
    std::string total;
    for (size_t d = 0; d < ext.size(); d++) {
      line("const i64 " + L + "e" + std::to_string(d) + " = " + ext[d] + ";");
      total += (d ? " * " : "") + L + "e" + std::to_string(d);
    }
    if (cached_per_lane_) {  // the row cache: iteration t of this lane is lane + t * R
      line("#pragma unroll");
      line("for (int t = 0; t < " + std::to_string(cached_per_lane_) + "; t++) {");
      ind_++;
      line("const i64 " + L + "j = lane + (i64)t * " + std::to_string(R) + ";");
      opened = 1;
      if (row_ % R != 0) {
        line("if (" + L + "j < " + total + ") {");
        ind_++;
        opened = 2;
      }
    } else if (sh_.split) {  // this thread's slice of the row
      line("#pragma unroll 4");
      line("for (i64 " + L + "j = sl; " + L + "j < " + total + "; " + L + "j += (i64)ys * per) {");
      ind_++;
      opened = 1;
    } else {
      line("for (i64 " + L + "j = lane; " + L + "j < " + total + "; " + L + "j += " + std::to_string(R) + ") {");
      ind_++;
      opened = 1;
    }
    loop_vars_.resize(ext.size());
    if (ext.size() == 1) {
      loop_vars_[0] = L + "j";
    } else {
      line("i64 " + L + "r = " + L + "j;");
      for (size_t d = ext.size(); d-- > 0;) {
        loop_vars_[d] = L + std::to_string(d);
        if (d == 0) {
          line("const i64 " + loop_vars_[d] + " = " + L + "r;");
        } else {
          line("const i64 " + loop_vars_[d] + " = " + L + "r % " + L + "e" + std::to_string(d) + ";");
          line(L + "r /= " + L + "e" + std::to_string(d) + ";");
        }
      }
    }
  }
  std::vector<Val> defined;
  for (Val v : s.body) {
    check_val(v);
    if (names_[v].empty() && k_.instrs[v].op != Opc::Acc) defined.push_back(v);
  }
  loop_index_ = index;
  emit_instrs(s.body);
  loop_index_ = -1;
  for (Acc& a : accs) {
    const lower::Reduction& r = *a.r;
    const std::string x = cast(get(r.input), ty(r.input), a.t);
    if (a.arg) {
      line("if (arg_better(" + x + ", " + cast(get(r.index), ty(r.index), Ty::I64) + ", " + a.v + ", " + a.i + ", " +
           (r.op == ReduceOp::ArgMax ? "true" : "false") + ")) { " + a.v + " = " + x + "; " + a.i + " = " +
           cast(get(r.index), ty(r.index), Ty::I64) + "; }");
    } else {
      line(a.v + " = " + combine(r.op, a.t, a.v, x) + ";");
    }
  }
  emit_stores(s, false);
  for (int i = 0; i < opened; i++) {
    ind_--;
    line("}");
  }
  ind_--;
  line("}");
  for (Val v : defined) names_[v].clear();  // loop-body values end with the loop
  loop_vars_ = saved;
  if (sh_.split) {  // the slice's result to shared memory (emit_split_end combines them)
    for (size_t j = 0; j < accs.size(); j++) {
      const std::string n = std::to_string(index) + "_" + std::to_string(j), T = tyname(accs[j].t);
      shared_ += "  __shared__ " + T + " smp" + n + "[" + std::to_string(sh_.block) + "];\n";
      shared_ += "  static " + T + " part" + n + "[" + std::to_string(kSplitSlots) + "];\n";
      line("smp" + n + "[threadIdx.x] = " + accs[j].v + ";");
    }
    return;
  }
  // Across the lanes of the row: warp shuffles down to lane 0, then (block) shared memory.
  if (R > 1) {
    for (Acc& a : accs) {
      const std::string T = tyname(a.t);
      const std::string step = a.arg ? "warp_arg(" + a.v + ", " + a.i + ", " + (a.r->op == ReduceOp::ArgMax ? "true" : "false") + ");"
                                     : "";
      if (a.arg) {
        line(step);
      } else {
        line("for (int o = 16; o > 0; o >>= 1) { " + T + " t = shfl_down_x(" + a.v + ", o); " + a.v + " = " +
             combine(a.r->op, a.t, a.v, "t") + "; }");
      }
      if (R == 32) {
        line(a.v + " = shfl_idx_x(" + a.v + ", 0);");
        if (a.arg) line(a.i + " = shfl_idx_x(" + a.i + ", 0);");
        continue;
      }
      // block: warp results through shared memory, combined by warp 0, broadcast.
      const std::string sm = "sm" + a.v;
      shared_ += "  __shared__ " + T + " " + sm + "[32];\n";
      if (a.arg) shared_ += "  __shared__ i64 " + sm + "i[32];\n";
      line("if ((threadIdx.x & 31) == 0) { " + sm + "[threadIdx.x >> 5] = " + a.v + ";" +
           (a.arg ? " " + sm + "i[threadIdx.x >> 5] = " + a.i + ";" : "") + " }");
      line("__syncthreads();");
      line("if (threadIdx.x < 32) {");
      ind_++;
      line(a.v + " = threadIdx.x < " + std::to_string(sh_.block / 32) + " ? " + sm + "[threadIdx.x] : " +
           init_of(a.r->op, a.t) + ";");
      if (a.arg) {
        line(a.i + " = threadIdx.x < " + std::to_string(sh_.block / 32) + " ? " + sm + "i[threadIdx.x] : -1;");
        line(step);
        line("if (threadIdx.x == 0) { " + sm + "[0] = " + a.v + "; " + sm + "i[0] = " + a.i + "; }");
      } else {
        line("for (int o = 16; o > 0; o >>= 1) { " + T + " t = shfl_down_x(" + a.v + ", o); " + a.v + " = " +
             combine(a.r->op, a.t, a.v, "t") + "; }");
        line("if (threadIdx.x == 0) " + sm + "[0] = " + a.v + ";");
      }
      ind_--;
      line("}");
      line("__syncthreads();");
      line(a.v + " = " + sm + "[0];");
      if (a.arg) line(a.i + " = " + sm + "i[0];");
      line("__syncthreads();");
    }
  }
  for (Acc& a : accs) {
    const lower::Reduction& r = *a.r;
    std::string res = a.arg ? "(" + a.i + " < 0 ? 0ll : " + a.i + ")" : a.v;
    names_[r.result] = "v" + std::to_string(r.result);
    line("const " + std::string(tyname(ty(r.result))) + " " + names_[r.result] + " = " +
         cast(res, a.arg ? Ty::I64 : a.t, ty(r.result)) + ";");
    if (a.arg && r.value != lower::kNoVal) {
      check_val(r.value);
      TC_CHECK(k_.instrs[r.value].op == Opc::Acc, CompileError, "cuda codegen: %s: an arg reduction's value is not an Acc",
               k_.name.c_str());
      names_[r.value] = "v" + std::to_string(r.value);
      line("const " + std::string(tyname(ty(r.value))) + " " + names_[r.value] + " = " + cast(a.v, a.t, ty(r.value)) + ";");
    }
  }
}

// Across the block: `v` of every thread combined into thread 0's (warp shuffles, then the warps'
// results through shared memory `sm`[32]); the same tree on every launch.
void Emitter::block_combine(const std::string& v, ReduceOp op, Ty t, const std::string& sm) {
  const std::string T = tyname(t);
  line("for (int o = 16; o > 0; o >>= 1) { " + T + " t = shfl_down_x(" + v + ", o); " + v + " = " + combine(op, t, v, "t") +
       "; }");
  if (sh_.block <= 32) return;
  const std::string decl = "  __shared__ " + T + " " + sm + "[32];\n";
  if (shared_.find(decl) == std::string::npos) shared_ += decl;
  line("if ((threadIdx.x & 31) == 0) " + sm + "[threadIdx.x >> 5] = " + v + ";");
  line("__syncthreads();");
  line("if (threadIdx.x < 32) {");
  ind_++;
  line(v + " = threadIdx.x < " + std::to_string(sh_.block / 32) + " ? " + sm + "[threadIdx.x] : " + init_of(op, t) + ";");
  line("for (int o = 16; o > 0; o >>= 1) { " + T + " t = shfl_down_x(" + v + ", o); " + v + " = " + combine(op, t, v, "t") +
       "; }");
  ind_--;
  line("}");
  line("__syncthreads();");
}

// After the outer iterations of a two-level kernel (Kernel::outer_reductions): each block's
// threads' accumulators combined, the block's result written to its slot of a static array; the
// last block to finish (a counter) combines the slots in block order and runs Kernel::final on
// thread 0, then resets the counter for the next launch. Deterministic for a given grid size
// (plan: at most kMaxTwoLevelBlocks blocks). One block (a tiny graph's step): no slots.
void Emitter::emit_two_level_end() {
  const auto& rs = k_.outer_reductions;
  for (size_t j = 0; j < rs.size(); j++)
    block_combine("oa" + std::to_string(j), rs[j].op, ty(rs[j].result), "smoa" + std::to_string(j));
  if (!sh_.device_fn) {
    shared_ += "  __shared__ bool last_block;\n";
    line("static unsigned blocks_done;");
    for (size_t j = 0; j < rs.size(); j++)
      line("static " + std::string(tyname(ty(rs[j].result))) + " part" + std::to_string(j) + "[" +
           std::to_string(kMaxTwoLevelBlocks) + "];");
    line("if (threadIdx.x == 0) {");
    ind_++;
    for (size_t j = 0; j < rs.size(); j++) line("part" + std::to_string(j) + "[blockIdx.x] = oa" + std::to_string(j) + ";");
    line("__threadfence();");
    line("last_block = atomicAdd(&blocks_done, 1u) == gridDim.x - 1;");
    ind_--;
    line("}");
    line("__syncthreads();");
    line("if (!last_block) return;");
    line("__threadfence();");
    for (size_t j = 0; j < rs.size(); j++) {
      const std::string a = "oa" + std::to_string(j), T = tyname(ty(rs[j].result));
      line(a + " = " + init_of(rs[j].op, ty(rs[j].result)) + ";");
      line("for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) " + a + " = " +
           combine(rs[j].op, ty(rs[j].result), a, "((volatile " + T + "*)part" + std::to_string(j) + ")[i]") + ";");
      block_combine(a, rs[j].op, ty(rs[j].result), "smoa" + std::to_string(j));
    }
  }
  line("if (threadIdx.x == 0) {");
  ind_++;
  if (!sh_.device_fn) line("blocks_done = 0;");
  for (size_t j = 0; j < rs.size(); j++) {
    check_val(rs[j].result);
    names_[rs[j].result] = "v" + std::to_string(rs[j].result);
    line("const " + std::string(tyname(ty(rs[j].result))) + " " + names_[rs[j].result] + " = oa" + std::to_string(j) + ";");
  }
  emit_instrs(k_.final.body);
  emit_stores(k_.final, false);
  ind_--;
  line("}");
}

// The body of a `vec` kernel's group of outer iterations f .. f + vec - 1 (same outer index but the
// innermost): a full group loads its vector accesses' elements at once (vld: one access when
// aligned), runs the body once per element on them, and stores at once (vst); a partial group (the
// end of a 1-D index space) runs the body element by element.
void Emitter::emit_vector_body() {
  TC_CHECK(sh_.threads_per_row == 1 && !k_.two_level() && !outer_vars_.empty(), CompileError,
           "cuda codegen: %s: vector accesses in a kernel that is not pointwise", k_.name.c_str());
  const std::string V = std::to_string(sh_.vec), I = sh_.index32 ? "unsigned" : "i64";
  va_ = vector_accesses(k_);
  // the vector accesses' indices at the group's first element, and the body values they use
  std::set<Val> body, need;
  for (const Stmt& st : k_.body) body.insert(st.body.begin(), st.body.end());
  std::vector<Val> todo;
  for (Val v : va_.loads) todo.push_back(k_.instrs[v].b);
  for (auto [i, j] : va_.stores) todo.push_back(k_.body[i].stores[j].index);
  while (!todo.empty()) {
    const Val v = todo.back();
    todo.pop_back();
    if (!body.count(v) || !need.insert(v).second) continue;
    const Instr& in = k_.instrs[v];
    if (in.op == Opc::Load) todo.push_back(in.b);
    if (in.op == Opc::Math)
      for (Val x : {in.a, in.b, in.c})
        if (x != lower::kNoVal) todo.push_back(x);
  }
  line("if (f + (" + I + ")" + V + " <= (" + I + ")n_outer) {");
  ind_++;
  for (const Stmt& st : k_.body)
    for (Val v : st.body)
      if (need.count(v)) emit_instr(v);
  for (Val v : va_.loads) {
    const Instr& in = k_.instrs[v];
    const std::string L = "L" + std::to_string(v);
    line("Vec<" + std::string(storage_type(k_.buffers[in.a].dtype)) + ", " + V + "> " + L + ";");
    line("vld(" + L + ", b" + std::to_string(in.a) + " + " + cast(get(in.b), ty(in.b), Ty::I64) + ");");
  }
  std::vector<std::string> store_at;
  for (auto [i, j] : va_.stores) {
    const lower::Store& st = k_.body[i].stores[j];
    line("Vec<" + std::string(storage_type(k_.buffers[st.buffer].dtype)) + ", " + V + "> S" + std::to_string(i) + "_" +
         std::to_string(j) + ";");
    store_at.push_back(cast(get(st.index), ty(st.index), Ty::I64));
  }
  for (Val v : need) names_[v].clear();  // (the copies define their own)
  const std::string first = outer_vars_.back();
  for (int u = 0; u < sh_.vec; u++) {
    vec_u_ = u;
    emit_body_copy("(" + first + " + " + std::to_string(u) + ")");
  }
  vec_u_ = -1;
  size_t n = 0;
  for (auto [i, j] : va_.stores)
    line("vst(b" + std::to_string(k_.body[i].stores[j].buffer) + " + " + store_at[n++] + ", S" + std::to_string(i) + "_" +
         std::to_string(j) + ");");
  ind_--;
  line("} else {");
  ind_++;
  line("for (int u = 0; u < " + V + "; u++) {");
  ind_++;
  line("if (f + (" + I + ")u >= (" + I + ")n_outer) break;");
  emit_body_copy("(" + first + " + u)");
  ind_--;
  line("}");
  ind_--;
  line("}");
}

// After a split kernel's slices: each block combines its slices of each row of its tile (shared
// memory, slice order) into its slot, for every reduction of every Loop; the last block of the tile
// to finish combines each row's slots in block order (its threads take every per-th block of a
// row, then shared memory) and runs the kernel's Code stmts in order, one thread per row.
void Emitter::emit_split_end(const std::vector<std::string>& ext, const std::string& I) {
  // every Loop's reductions, named as emit_loop's split tail names them
  std::vector<const lower::Reduction*> reds;
  std::vector<std::string> names;
  int loops = 0;
  for (const Stmt& st : k_.body) {
    if (st.kind != Stmt::Kind::Loop) continue;
    for (size_t j = 0; j < st.reductions.size(); j++) {
      reds.push_back(&st.reductions[j]);
      names.push_back(std::to_string(loops) + "_" + std::to_string(j));
    }
    loops++;
  }
  for (const Stmt& st : k_.body)  // (the Code is defined again after the Loops)
    if (st.kind == Stmt::Kind::Code)
      for (Val v : st.body) names_[v].clear();
  std::vector<Ty> tys;
  for (const lower::Reduction* r : reds)
    tys.push_back(r->op == ReduceOp::Any || r->op == ReduceOp::All ? Ty::Bool : ty(r->result));
  const size_t n = tys.size();
  auto sm = [&](size_t j) { return "smp" + names[j]; };
  auto part = [&](size_t j) { return "part" + names[j]; };
  // each row's slices in slice order: `per` of them in shared memory, `k`, k + W, ...
  auto combine_shared = [&](const std::string& dst) {
    for (size_t j = 0; j < n; j++) {
      const std::string a = "sa" + std::to_string(j);
      line(std::string(tyname(tys[j])) + " " + a + " = " + init_of(reds[j]->op, tys[j]) + ";");
      line("for (int k = 0; k < per; k++) " + a + " = " +
           combine(reds[j]->op, tys[j], a, sm(j) + "[k * W + threadIdx.x]") + ";");
      if (!dst.empty()) line(part(j) + "[" + dst + "] = " + a + ";");
    }
  };
  const std::string row = "f0 + (" + I + ")threadIdx.x";  // thread i's row (i < W)
  line("__syncthreads();");
  line("if (threadIdx.x < (unsigned)W && " + row + " < (" + I + ")n_outer) {  // this block's result per row");
  ind_++;
  combine_shared("(blockIdx.x / tiles) * (unsigned)n_outer + " + row);
  ind_--;
  line("}");
  shared_ += "  __shared__ bool last_block;\n";
  line("static unsigned blocks_done[" + std::to_string(kSplitBlocks) + "];  // per tile");
  line("__threadfence();");
  line("__syncthreads();");
  line("if (threadIdx.x == 0) last_block = atomicAdd(&blocks_done[tile], 1u) == ys - 1;");
  line("__syncthreads();");
  line("if (!last_block) return;");
  line("__threadfence();");
  line("if (threadIdx.x < (unsigned)(per * W) && f0 + threadIdx.x % (unsigned)W < (" + I +
       ")n_outer) {  // the blocks' results: k, k + per, ... per row");
  ind_++;
  line("const " + I + " f = f0 + (" + I + ")(threadIdx.x % (unsigned)W);");
  for (size_t j = 0; j < n; j++) {
    const std::string a = "sa" + std::to_string(j), T = tyname(tys[j]);
    const std::string at = part(j) + "[b * (unsigned)n_outer + f]";
    line(T + " " + a + " = " + init_of(reds[j]->op, tys[j]) + ";");
    line("#pragma unroll 8");
    line("for (unsigned b = threadIdx.x / (unsigned)W; b < ys; b += per) " + a + " = " +
         combine(reds[j]->op, tys[j], a,
                 tys[j] == Ty::Bool ? "((volatile bool*)" + part(j) + ")[b * (unsigned)n_outer + f]" : "__ldcg(&" + at + ")") +
         ";");
    line(sm(j) + "[threadIdx.x] = " + a + ";");
  }
  ind_--;
  line("}");
  line("__syncthreads();");
  line("if (threadIdx.x < (unsigned)W && " + row + " < (" + I + ")n_outer) {  // each row's result and its Code after the Loop");
  ind_++;
  combine_shared("");
  line("const " + I + " f = " + row + ";");
  if (!ext.empty()) {
    line(I + " r = f;");
    for (size_t d = ext.size(); d-- > 0;) {
      if (d == 0) {
        line("const i64 o0 = (i64)r;");
      } else {
        line("const i64 " + outer_vars_[d] + " = (i64)(r % (" + I + ")" + ext[d] + ");");
        line("r /= (" + I + ")" + ext[d] + ";");
      }
    }
  }
  for (size_t j = 0; j < n; j++) {
    const lower::Reduction& r = *reds[j];
    names_[r.result] = "v" + std::to_string(r.result);
    line("const " + std::string(tyname(ty(r.result))) + " " + names_[r.result] + " = " +
         cast("sa" + std::to_string(j), tys[j], ty(r.result)) + ";");
  }
  for (const Stmt& st : k_.body) {
    if (st.kind == Stmt::Kind::Loop) continue;
    emit_instrs(st.body);
    emit_stores(st, false);
  }
  ind_--;
  line("}");
  line("if (threadIdx.x == 0) blocks_done[tile] = 0;");
}

// The body once, in its own scope, with the innermost outer index `inner`.
void Emitter::emit_body_copy(const std::string& inner) {
  line("{");
  ind_++;
  const std::string saved = outer_vars_.back();
  outer_vars_.back() = inner;
  for (size_t i = 0; i < k_.body.size(); i++) {
    emit_instrs(k_.body[i].body);
    emit_stores(k_.body[i], false, (int)i);
  }
  for (const Stmt& st : k_.body)
    for (Val v : st.body) names_[v].clear();
  outer_vars_.back() = saved;
  ind_--;
  line("}");
}

std::string Emitter::emit(const std::string& name) {
  const int R = sh_.threads_per_row, B = sh_.block;
  const std::string I = sh_.index32 ? "unsigned" : "i64";
  // Stores another stmt of the same row may read need a barrier between the stmts.
  bool reads_written = false;
  for (const Instr& in : k_.instrs)
    if (in.op == Opc::Load && in.a >= 0 && in.a < (int)k_.buffers.size() && k_.buffers[in.a].written) reads_written = true;
  ind_ = 1;
  plan_row_cache();
  for (Val v : k_.preamble) emit_instr(v);
  for (size_t j = 0; j < k_.outer_reductions.size(); j++) {  // a two-level kernel's accumulators
    const lower::Reduction& r = k_.outer_reductions[j];
    check_val(r.result);
    TC_CHECK(k_.instrs[r.result].op == Opc::OuterAcc && !r.ordered_fma, CompileError,
             "cuda codegen: %s: an outer reduction without its OuterAcc", k_.name.c_str());
    line(std::string(tyname(ty(r.result))) + " oa" + std::to_string(j) + " = " + init_of(r.op, ty(r.result)) + ";");
  }
  std::vector<std::string> ext;
  for (Val e : k_.outer) ext.push_back(cast(get(e), ty(e), Ty::I64));
  const std::string rows_per_block = std::to_string(B / R * sh_.unroll);
  if (sh_.vec > 1) {  // pointwise: groups of `vec` consecutive iterations per thread
    const std::string V = std::to_string(sh_.vec);
    line("for (" + I + " g = (" + I + ")blockIdx.x * " + std::to_string(B) + " + threadIdx.x; g < (" + I + ")((n_outer + " +
         V + " - 1) / " + V + "); g += (" + I + ")gridDim.x * " + std::to_string(B) + ") {");
    ind_++;
    line("const " + I + " f = g * (" + I + ")" + V + ";");
  } else if (sh_.split) {  // this block's (row, slice) pairs, rows fastest: `per` slices of each of its tile's rows
    line("const int W = n_outer < " + std::to_string(kSplitTile) + " ? (int)n_outer : " + std::to_string(kSplitTile) +
         ";  // rows per tile");
    line("const int per = " + std::to_string(B) + " / W;");
    line("const unsigned tiles = (unsigned)((n_outer + W - 1) / W), tile = blockIdx.x % tiles, ys = gridDim.x / tiles;");
    line("const " + I + " f0 = (" + I + ")tile * (" + I + ")W;  // the tile's first row");
    line("if (threadIdx.x < (unsigned)(per * W) && f0 + threadIdx.x % (unsigned)W < (" + I + ")n_outer) {");
    ind_++;
    line("const " + I + " f = f0 + (" + I + ")(threadIdx.x % (unsigned)W);");
    line("const i64 sl = (i64)(blockIdx.x / tiles) * per + threadIdx.x / (unsigned)W;");
  } else if (sh_.unroll > 1) {  // pointwise: `unroll` iterations per step, `block` apart (coalesced)
    line("for (" + I + " base = (" + I + ")blockIdx.x * " + rows_per_block + " + threadIdx.x; base < (" + I +
         ")n_outer; base += (" + I + ")gridDim.x * " + rows_per_block + ") {");
    ind_++;
    line("#pragma unroll");
    line("for (int u = 0; u < " + std::to_string(sh_.unroll) + "; u++) {");
    ind_++;
    line("const " + I + " f = base + (" + I + ")(u * " + std::to_string(B) + ");");
    line("if (f >= (" + I + ")n_outer) break;");
  } else if (sh_.device_fn) {
    TC_CHECK(R == 1, CompileError, "cuda codegen: a tiny graph's step with %d threads per row", R);
    const std::string C = std::to_string(sh_.warp_row);
    if (sh_.warp_row > 0) {  // row `row` of warp_row iterations, the lane's one: f
      line("for (" + I + " row = threadIdx.x >> 5; (threadIdx.x & 31) < " + C + " && row * " + C + " + (threadIdx.x & 31) < (" +
           I + ")n_outer; row += blockDim.x >> 5) {");
      line("  const " + I + " f = row * " + C + " + (threadIdx.x & 31);");
      line("  (void)f;");
    } else {
      line("for (" + I + " f = threadIdx.x; f < (" + I + ")n_outer; f += blockDim.x) {");
    }
    ind_++;
  } else {
    line("for (" + I + " f = (" + I + ")blockIdx.x * " + rows_per_block + " + threadIdx.x / " + std::to_string(R) +
         "; f < (" + I + ")n_outer; f += (" + I + ")gridDim.x * " + rows_per_block + ") {");
    ind_++;
  }
  outer_vars_.assign(ext.size(), "");
  // a warp per row whose innermost outer dim is the row: that index is the lane (no division)
  std::optional<int64_t> last = k_.outer.empty() ? std::nullopt : eval_uniform(k_, k_.outer.back(), nullptr);
  const bool lane_index = sh_.device_fn && sh_.warp_row > 0 && ext.size() >= 2 && last == sh_.warp_row;
  if (!ext.empty()) {
    line(I + " r = " + (lane_index ? "row" : "f") + ";");
    for (size_t d = ext.size(); d-- > 0;) {
      outer_vars_[d] = "o" + std::to_string(d);
      if (lane_index && d == ext.size() - 1) {
        line("const i64 " + outer_vars_[d] + " = (i64)(threadIdx.x & 31);");
      } else if (d == 0) {
        line("const i64 o0 = (i64)r;");
      } else {
        line("const i64 " + outer_vars_[d] + " = (i64)(r % (" + I + ")" + ext[d] + ");");
        line("r /= (" + I + ")" + ext[d] + ";");
      }
    }
  }
  for (const auto& [k, n] : cached_) {
    Ty t = Ty::F32;
    for (Val v = 0; v < (Val)k_.instrs.size(); v++)
      if (k_.instrs[v].op == Opc::Load && key(v) == k) t = k_.instrs[v].ty;
    line(std::string(tyname(t)) + " c" + std::to_string(n) + "[" + std::to_string(cached_per_lane_) + "];");
  }
  filled_by_.assign(cached_.size(), -1);
  int loops = 0;
  if (sh_.vec > 1) emit_vector_body();
  // (a split kernel's Code runs in emit_split_end; here only what its Loops read)
  const std::vector<char> after = sh_.split ? after_reductions(k_) : std::vector<char>();
  const size_t stmts = sh_.vec > 1 ? 0 : k_.body.size();
  for (size_t i = 0; i < stmts; i++) {
    const Stmt& s = k_.body[i];
    if (s.kind == Stmt::Kind::Loop) {
      emit_loop(s, loops++);
    } else if (sh_.split) {
      std::vector<Val> before;
      for (Val v : s.body)
        if (!after.at(v)) before.push_back(v);
      emit_instrs(before);
      continue;
    } else {
      emit_instrs(s.body);
      emit_stores(s, R > 1);
    }
    if (reads_written && !s.stores.empty()) barrier();
  }
  for (size_t j = 0; j < k_.outer_reductions.size(); j++) {  // once per row: on its lane 0
    const lower::Reduction& r = k_.outer_reductions[j];
    const std::string a = "oa" + std::to_string(j);
    line("if (lane == 0) " + a + " = " + combine(r.op, ty(r.result), a, cast(get(r.input), ty(r.input), ty(r.result))) + ";");
  }
  ind_--;
  line("}");
  if (sh_.unroll > 1) {
    ind_--;
    line("}");
  }
  if (k_.two_level()) emit_two_level_end();
  if (sh_.split) emit_split_end(ext, I);
  std::string params;
  for (size_t i = 0; i < k_.buffers.size(); i++) {
    const lower::BufferParam& p = k_.buffers[i];
    params += std::string(i ? ", " : "") + (p.written ? "" : "const ") + storage_type(p.dtype) + "* " +
              (sh_.noalias ? "__restrict__ " : "") + "b" + std::to_string(i);
  }
  for (int i = 0; i < k_.num_size_params; i++) params += std::string(params.empty() ? "" : ", ") + "i64 s" + std::to_string(i);
  params += std::string(params.empty() ? "" : ", ") + "i64 n_outer";
  if (checks_index_values(k_)) params += ", i64* tc_err";
  std::string src = (sh_.device_fn ? "__device__ TC_TINY_STEP void "
                                   : "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(B) + ") ") +
                    name + "(" + params + ") {\n";
  src += shared_;
  src += "  const int lane = " + std::string(R == 1 ? "0" : R == 32 ? "threadIdx.x & 31" : "threadIdx.x") + ";\n";
  src += "  (void)lane;\n";
  return src + out_ + "}\n";
}

}  // namespace

const char* buffer_type(DType d) { return storage_type(d); }

std::string emit_kernel(const Kernel& k, const std::string& name, const KernelShape& shape) {
  return Emitter(k, shape).emit(name);
}

const std::string& codegen_prelude() {
  static const std::string p = R"CUDA(
// An index value v checked on the device (loop IR flag_if): a bad one flags check k.
__device__ __forceinline__ i64 flag_if(i64 v, bool bad, i64 k, i64* err) {
  if (bad) flag_error(err, k, v);
  return v;
}
template <typename M> __device__ __forceinline__ M fmod_i(M a, M b) {
  if (b == (M)0 || b == (M)(-1)) return (M)0;
  return (M)(a % b);
}
// A vector access of a `vec` kernel: one load/store when the address is aligned to its size.
template <typename T, int N> __device__ __forceinline__ void vld(Vec<T, N>& d, const T* p) {
  if (((u64)p & (sizeof(Vec<T, N>) - 1)) == 0) {
    d = *(const Vec<T, N>*)p;
  } else {
#pragma unroll
    for (int i = 0; i < N; i++) d.v[i] = p[i];
  }
}
template <typename T, int N> __device__ __forceinline__ void vst(T* p, const Vec<T, N>& s) {
  if (((u64)p & (sizeof(Vec<T, N>) - 1)) == 0) {
    *(Vec<T, N>*)p = s;
  } else {
#pragma unroll
    for (int i = 0; i < N; i++) p[i] = s.v[i];
  }
}
__device__ __forceinline__ bool shfl_down_x(bool v, int o) { return __shfl_down_sync(0xffffffffu, (int)v, o) != 0; }
template <typename T> __device__ __forceinline__ T shfl_down_x(T v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ bool shfl_idx_x(bool v, int l) { return __shfl_sync(0xffffffffu, (int)v, l) != 0; }
template <typename T> __device__ __forceinline__ T shfl_idx_x(T v, int l) { return __shfl_sync(0xffffffffu, v, l); }
// Whether (v, i) beats the best (a, ai) so far: the first index of the extreme, a NaN beating
// every number (the first NaN wins), an index < 0 meaning "none yet".
template <typename T> __device__ __forceinline__ bool arg_better(T v, i64 i, T a, i64 ai, bool mx) {
  if (i < 0) return false;
  if (ai < 0) return true;
  const bool vn = v != v, an = a != a;
  if (vn || an) return vn && (!an || i < ai);
  if (v == a) return i < ai;
  return mx ? a < v : v < a;
}
template <typename T> __device__ __forceinline__ void warp_arg(T& a, i64& ai, bool mx) {
  for (int o = 16; o > 0; o >>= 1) {
    T v = shfl_down_x(a, o);
    i64 i = shfl_down_x(ai, o);
    if (arg_better(v, i, a, ai, mx)) { a = v; ai = i; }
  }
}
)CUDA";
  return p;
}

}  // namespace tc::backends::cuda
