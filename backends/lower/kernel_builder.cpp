// The kernel builder: hash-consed, constant-folded SSA values placed in the scope they depend on.
#include <cstring>

#include "lower_internal.h"
#include "tc/error.h"

namespace tc::lower {

KernelBuilder::KernelBuilder(LoweredGraph& lg, std::vector<SymInt> outer) : lg_(lg) {
  for (size_t d = 0; d < outer.size(); d++) k_.outer.push_back(size(outer[d]));
  for (size_t d = 0; d < outer.size(); d++) outer_vars_.push_back(add({Opc::OuterVar, Ty::I64, ScalarOp::add, int(d)}, 1));
}

Val KernelBuilder::add(Instr in, int level) {
  uint64_t fbits;
  std::memcpy(&fbits, &in.f, 8);
  std::vector<int64_t> key = {int64_t(in.op), int64_t(in.ty), int64_t(in.sop), in.a, in.b, in.c, in.i,
                              int64_t(fbits)};
  TC_LOWER_CHECK(level != 2 || !loops_.empty(), "loop value outside a loop");
  std::map<std::vector<int64_t>, Val>& cse = level == 0 ? cse0_ : level == 1 ? cse1_ : level == 3 ? cse3_ : loops_.back().cse;
  auto it = cse.find(key);
  if (it != cse.end()) return it->second;
  Val v = Val(k_.instrs.size());
  k_.instrs.push_back(in);
  level_.push_back(level);
  cse[key] = v;
  (level == 0 ? k_.preamble : level == 1 ? code_.body : level == 3 ? k_.final.body : loops_.back().stmt.body).push_back(v);
  return v;
}

Val KernelBuilder::ci(int64_t v, Ty t) {
  Instr in{Opc::ConstI, t};
  in.i = t == Ty::Bool ? v != 0 : v;
  return add(in, 0);
}

Val KernelBuilder::cf(double v, Ty t) {
  Instr in{Opc::ConstF, t};
  in.f = v;
  return add(in, 0);
}

Val KernelBuilder::size(const SymInt& s) {
  if (s.is_const()) return ci(s.const_value());
  int p = 0;
  while (p < int(sizes_.size()) && !(sizes_[p] == s)) p++;
  if (p == int(sizes_.size())) sizes_.push_back(s);
  k_.num_size_params = int(sizes_.size());
  return add({Opc::SizeParam, Ty::I64, ScalarOp::add, p}, 0);
}

Val KernelBuilder::loop_var(int d) { return add({Opc::LoopVar, Ty::I64, ScalarOp::add, d}, 2); }

bool KernelBuilder::is_const(Val v, int64_t* out) const {
  const Instr& in = k_.instrs[v];
  if (in.op != Opc::ConstI) return false;
  if (out) *out = in.i;
  return true;
}

static bool is_float(Ty t) { return t == Ty::F32 || t == Ty::F64; }

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

Val KernelBuilder::math(ScalarOp op, Val a, Val b, Val c) {
  Ty t = ty(a);
  switch (op) {
    case ScalarOp::eq: case ScalarOp::ne: case ScalarOp::lt: case ScalarOp::le: case ScalarOp::gt:
    case ScalarOp::ge: case ScalarOp::isnan: case ScalarOp::isinf: case ScalarOp::logical_not:
    case ScalarOp::logical_and: case ScalarOp::logical_or: case ScalarOp::logical_xor:
      t = Ty::Bool;
      break;
    case ScalarOp::where:
      TC_LOWER_CHECK(ty(a) == Ty::Bool && ty(b) == ty(c), "where: operand types");
      t = ty(b);
      break;
    case ScalarOp::cast:
      TC_LOWER_CHECK(false, "use KernelBuilder::cast");
      break;
    case ScalarOp::flag_if:
      TC_LOWER_CHECK(t == Ty::I64 && ty(b) == Ty::Bool && is_const(c, nullptr), "flag_if: operand types");
      return add({Opc::Math, t, op, a, b, c}, std::max(level_[a], level_[b]));
    default:
      break;
  }
  if (b != kNoVal && op != ScalarOp::where) TC_LOWER_CHECK(ty(a) == ty(b), "binary scalar op on different types");
  // Integer index arithmetic folds.
  int64_t x = 0, y = 0;
  bool ca = is_const(a, &x), cb = b != kNoVal && is_const(b, &y);
  if (!is_float(t) && t != Ty::Bool && b != kNoVal && c == kNoVal) {
    if (ca && cb) {
      switch (op) {
        case ScalarOp::add: return ci(x + y, t);
        case ScalarOp::sub: return ci(x - y, t);
        case ScalarOp::mul: return ci(x * y, t);
        case ScalarOp::div_floor: if (y != 0) return ci(floor_div(x, y), t); break;
        case ScalarOp::mod: if (y != 0) return ci(x - floor_div(x, y) * y, t); break;
        case ScalarOp::minimum: return ci(std::min(x, y), t);
        case ScalarOp::maximum: return ci(std::max(x, y), t);
        default: break;
      }
    }
    if ((op == ScalarOp::add || op == ScalarOp::sub) && cb && y == 0) return a;
    if (op == ScalarOp::add && ca && x == 0) return b;
    if (op == ScalarOp::mul && cb && y == 1) return a;
    if (op == ScalarOp::mul && ca && x == 1) return b;
    if (op == ScalarOp::mul && ((cb && y == 0) || (ca && x == 0))) return ci(0, t);
    if ((op == ScalarOp::div_floor || op == ScalarOp::div_trunc) && cb && y == 1) return a;
    if (op == ScalarOp::mod && cb && y == 1) return ci(0, t);
  }
  if (op == ScalarOp::where && ca) return x ? b : c;
  int level = level_[a];
  if (b != kNoVal) level = std::max(level, level_[b]);
  if (c != kNoVal) level = std::max(level, level_[c]);
  if (level == 3)
    for (Val x : {a, b, c})
      TC_LOWER_CHECK(x == kNoVal || level_[x] == 0 || level_[x] == 3, "a value of an outer iteration in the final code");
  Instr in{Opc::Math, t, op, a, b, c};
  return add(in, level);
}

Val KernelBuilder::cast(Val a, Ty t) {
  if (ty(a) == t) return a;
  const Instr& in = k_.instrs[a];
  if (in.op == Opc::ConstI) return is_float(t) ? cf(double(in.i), t) : ci(in.i, t);
  if (in.op == Opc::ConstF && is_float(t)) return cf(t == Ty::F32 ? double(float(in.f)) : in.f, t);
  if (in.op == Opc::ConstF && t == Ty::Bool) return ci(in.f != 0, t);
  return add({Opc::Math, t, ScalarOp::cast, a}, level_[a]);
}

static int param(std::vector<int>& buffers, Kernel& k, const LoweredGraph& lg, int buffer, bool written) {
  int p = 0;
  while (p < int(buffers.size()) && buffers[p] != buffer) p++;
  if (p == int(buffers.size())) {
    buffers.push_back(buffer);
    k.buffers.push_back({lg.buffers[buffer].dtype, false});
  }
  k.buffers[p].written = k.buffers[p].written || written;
  return p;
}

Val KernelBuilder::load(int buffer, Val index) {
  int p = param(buffers_, k_, lg_, buffer, false);
  Instr in{Opc::Load, compute_type(lg_.buffers[buffer].dtype), ScalarOp::add, p, index};
  TC_LOWER_CHECK(!final_mode_ || level_[index] == 0 || level_[index] == 3, "a load in the final code at an outer index");
  return add(in, std::max(final_mode_ ? 3 : 1, level_[index]));
}

void KernelBuilder::store(int buffer, Val index, Val value) {
  int p = param(buffers_, k_, lg_, buffer, true);
  value = cast(value, compute_type(lg_.buffers[buffer].dtype));
  int level = std::max(level_[index], level_[value]);
  (level == 2 ? loops_.back().stmt.stores : level == 3 ? k_.final.stores : code_.stores).push_back({p, index, value});
}

void KernelBuilder::open_loop(const std::vector<SymInt>& extents) {
  OpenLoop l;
  l.stmt.kind = Stmt::Kind::Loop;
  for (const SymInt& e : extents) l.stmt.extents.push_back(size(e));
  loops_.push_back(std::move(l));
}

Val KernelBuilder::reduce(ReduceOp op, Val input, Val index, Val* value, bool ordered_fma) {
  TC_LOWER_CHECK(!loops_.empty(), "reduce outside a loop");
  TC_LOWER_CHECK(!ordered_fma || (op == ReduceOp::Sum && k_.instrs[input].op == Opc::Math &&
                                  k_.instrs[input].sop == ScalarOp::mul),
                 "an ordered fma reduction of something other than a product");
  Stmt& s = loops_.back().stmt;
  Reduction r{op, input, index};
  r.ordered_fma = ordered_fma;
  int ri = int(s.reductions.size());
  auto acc = [&](Ty t, int which) {
    Val v = Val(k_.instrs.size());
    Instr in{Opc::Acc, t, ScalarOp::add, ri, which};
    k_.instrs.push_back(in);
    level_.push_back(1);
    return v;
  };
  bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  bool logical = op == ReduceOp::Any || op == ReduceOp::All;
  r.result = acc(arg ? Ty::I64 : logical ? Ty::Bool : ty(input), 0);
  if (arg && value) r.value = acc(ty(input), 1);
  if (value) *value = r.value;
  s.reductions.push_back(r);
  return r.result;
}

Val KernelBuilder::reduce_outer(ReduceOp op, Val input) {
  TC_LOWER_CHECK(level_[input] <= 1 && op != ReduceOp::ArgMax && op != ReduceOp::ArgMin,
                 "an outer reduction of a loop value or an arg reduction");
  Reduction r{op, input};
  Val v = Val(k_.instrs.size());
  Instr in{Opc::OuterAcc, op == ReduceOp::Any || op == ReduceOp::All ? Ty::Bool : ty(input), ScalarOp::add,
           Val(k_.outer_reductions.size())};
  k_.instrs.push_back(in);
  level_.push_back(3);
  r.result = v;
  k_.outer_reductions.push_back(r);
  return v;
}

void KernelBuilder::flush_code() {
  if (code_.body.empty() && code_.stores.empty()) return;
  k_.body.push_back(std::move(code_));
  code_ = Stmt{};
}

void KernelBuilder::close_loop() {
  TC_LOWER_CHECK(!loops_.empty(), "close_loop without a loop");
  Stmt s = std::move(loops_.back().stmt);
  loops_.pop_back();
  flush_code();
  k_.body.push_back(std::move(s));
}

Kernel KernelBuilder::finish(std::vector<int>* buffers, std::vector<SymInt>* sizes) {
  TC_LOWER_CHECK(loops_.empty(), "finish with an open loop");
  flush_code();
  // Drop values nothing uses (constants folded away, trial emissions' leftovers).
  std::vector<bool> used(k_.instrs.size(), false);
  std::vector<Val> work(k_.outer.begin(), k_.outer.end());
  auto roots = [&](const Stmt& s) {
    work.insert(work.end(), s.extents.begin(), s.extents.end());
    for (const Reduction& r : s.reductions) work.insert(work.end(), {r.input, r.index});
    for (const Store& st : s.stores) work.insert(work.end(), {st.index, st.value});
  };
  for (const Stmt& s : k_.body) roots(s);
  for (const Reduction& r : k_.outer_reductions) work.push_back(r.input);
  roots(k_.final);
  while (!work.empty()) {
    Val v = work.back();
    work.pop_back();
    if (v == kNoVal || used[v]) continue;
    used[v] = true;
    const Instr& in = k_.instrs[v];
    if (in.op == Opc::Math) work.insert(work.end(), {in.a, in.b, in.c});
    if (in.op == Opc::Load) work.push_back(in.b);
  }
  auto keep = [&](std::vector<Val>& xs) { std::erase_if(xs, [&](Val v) { return !used[v]; }); };
  keep(k_.preamble);
  for (Stmt& s : k_.body) keep(s.body);
  keep(k_.final.body);
  std::erase_if(k_.body, [](const Stmt& s) { return s.kind == Stmt::Kind::Code && s.body.empty() && s.stores.empty(); });
  k_.source_nodes = source_nodes;
  *buffers = buffers_;
  *sizes = sizes_;
  return std::move(k_);
}

}  // namespace tc::lower
