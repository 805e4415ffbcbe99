// Verifier: structural checks of Proto trees against the rules in verifier.h.
#include "verifier.h"

#include "analysis.h"
#include "dump.h"
#include "opcodes.h"

namespace tc::vm {
namespace {

class Checker {
 public:
  Checker(const Proto& f, const VerifyOptions& o, std::vector<VerifyIssue>& out)
      : f_(f), options_(o), out_(out), n_(int(f.code.size())) {}
  void run();

 private:
  void issue(VerifyRule rule, int pc, const std::string& what) {
    std::string where = describe(f_) + (pc >= 0 ? " pc " + std::to_string(pc + 1) : "");
    out_.push_back({rule, where + ": " + what});
  }
  bool reg_ok(int r) const { return r >= 0 && r < f_.maxstacksize; }
  void operand(int pc, Operand kind, int value, bool k, const char* field);
  void instruction(int pc);
  void pairs(int pc);
  void jumps(int pc);
  void vararg_and_close(const Analysis& a);
  void open_top(const Analysis& a);
  void lines();
  void debug_info();

  const Proto& f_;
  const VerifyOptions& options_;
  std::vector<VerifyIssue>& out_;
  int n_;
};

void Checker::operand(int pc, Operand kind, int value, bool k, const char* field) {
  auto constant = [&](bool ok_kind, const char* need) {
    if (value >= int(f_.k.size()))
      issue(VerifyRule::Constant, pc, std::string(field) + " constant " + std::to_string(value) + " out of range");
    else if (!ok_kind)
      issue(kind == Operand::KS || kind == Operand::RS ? VerifyRule::StringKey : VerifyRule::Constant,
            pc, std::string(field) + " must be " + need);
  };
  const Constant* c = value < int(f_.k.size()) ? &f_.k[value] : nullptr;
  const bool short_str = c && c->tag == ConstTag::ShortStr && c->s.size() <= 40;
  switch (kind) {
    case Operand::R_:
      if (!reg_ok(value)) issue(VerifyRule::Register, pc, std::string(field) + " register " + std::to_string(value) + " outside the frame");
      break;
    case Operand::K_: constant(true, "a constant"); break;
    case Operand::KS: constant(short_str, "a short-string constant"); break;
    case Operand::KN: constant(c && c->is_number(), "a number constant"); break;
    case Operand::KI: constant(c && c->tag == ConstTag::Int, "an integer constant"); break;
    case Operand::RK:
      if (k) constant(true, "a constant");
      else operand(pc, Operand::R_, value, false, field);
      break;
    case Operand::RS:  // SELF's key: lcode.c emits any string constant, long ones included
      if (k) constant(c && c->is_string(), "a string constant");
      else operand(pc, Operand::R_, value, false, field);
      break;
    case Operand::U_:
      if (value >= int(f_.upvalues.size())) issue(VerifyRule::Upvalue, pc, std::string(field) + " upvalue " + std::to_string(value) + " out of range");
      break;
    case Operand::P_:
      if (value >= int(f_.protos.size())) issue(VerifyRule::NestedProto, pc, "nested function " + std::to_string(value) + " out of range");
      break;
    case Operand::I_:
    case Operand::__: break;
  }
}

void Checker::instruction(int pc) {
  const Ins i = decode(f_.code[pc]);
  const OpInfo& info = i.info();
  const bool wide = info.fmt == Format::iABx || info.fmt == Format::iAsBx;
  operand(pc, info.a, i.a, false, "A");
  operand(pc, info.b, wide ? i.bx : i.b, false, "B");
  operand(pc, info.c, i.c, i.k, "C");
  Effects e = effects(f_, pc);
  auto range = [&](const RegRange& r) {
    int last = r.count == kOpenCount ? r.first : r.first + r.count;  // open ranges start in frame
    if (r.first < 0 || last > f_.maxstacksize)
      issue(VerifyRule::Register, pc, "register range " + std::to_string(r.first) + ".." + std::to_string(last - 1) + " outside the frame of " + std::to_string(f_.maxstacksize));
  };
  for (int k = 0; k < e.nreads; k++) range(e.reads[k]);
  for (int k = 0; k < e.nwrites; k++) range(e.writes[k]);
  if (i.op == OpCode::TFORCALL && !reg_ok(i.a + 6)) issue(VerifyRule::Register, pc, "TFORCALL needs registers up to A+6");
  if (i.op == OpCode::FORPREP || i.op == OpCode::FORLOOP) range({i.a, 4});
  if (info.mm && (i.c < 6 || i.c > 17)) issue(VerifyRule::Pair, pc, "metamethod event " + std::to_string(i.c) + " is not a binary operator");
  if (i.op == OpCode::LOADKX && pc + 1 < n_) operand(pc, Operand::K_, decode(f_.code[pc + 1]).ax, false, "EXTRAARG");
}

void Checker::pairs(int pc) {
  const Ins i = decode(f_.code[pc]);
  const bool has_next = pc + 1 < n_;
  const Ins next = has_next ? decode(f_.code[pc + 1]) : Ins{};
  auto need = [&](OpCode op, const char* what) {
    if (!has_next || next.op != op) issue(VerifyRule::Pair, pc, std::string(i.info().name) + " must be followed by " + what);
  };
  switch (i.info().follow) {
    case Follow::MMBIN: need(OpCode::MMBIN, "MMBIN"); break;
    case Follow::MMBINI: need(OpCode::MMBINI, "MMBINI"); break;
    case Follow::MMBINK: need(OpCode::MMBINK, "MMBINK"); break;
    case Follow::JMP: need(OpCode::JMP, "JMP"); break;
    case Follow::EXTRAARG: need(OpCode::EXTRAARG, "EXTRAARG"); break;
    case Follow::EXTRAARG_IF_K: if (i.k) need(OpCode::EXTRAARG, "EXTRAARG (k set)"); break;
    case Follow::TFORLOOP:
      need(OpCode::TFORLOOP, "TFORLOOP");
      if (has_next && next.a != i.a) issue(VerifyRule::Pair, pc, "TFORCALL and TFORLOOP registers differ");
      break;
    case Follow::NONE: break;
  }
  if (i.op == OpCode::TFORPREP) {  // the VM runs its target as TFORCALL without looking
    const int call = pc + 1 + i.bx;
    if (call >= n_ || decode(f_.code[call]).op != OpCode::TFORCALL || decode(f_.code[call]).a != i.a)
      issue(VerifyRule::Pair, pc, "TFORPREP must jump to a TFORCALL of the same registers");
  }
  if (i.info().mm || i.op == OpCode::EXTRAARG) {
    const Ins prev = pc > 0 ? decode(f_.code[pc - 1]) : Ins{};
    Follow want = i.op == OpCode::MMBIN ? Follow::MMBIN : i.op == OpCode::MMBINI ? Follow::MMBINI
                : i.op == OpCode::MMBINK ? Follow::MMBINK : Follow::EXTRAARG;
    bool ok = pc > 0 && (prev.info().follow == want ||
                         (want == Follow::EXTRAARG && prev.info().follow == Follow::EXTRAARG_IF_K && prev.k));
    if (!ok) issue(VerifyRule::Pair, pc, std::string(i.info().name) + " without the instruction it belongs to");
  }
}

void Checker::jumps(int pc) {
  Successors s = successors(f_, pc);
  for (int k = 0; k < s.n; k++) {
    int t = s.pc[k];
    if (t == n_ && decode(f_.code[pc]).info().jump == Jump::NONE) {
      issue(VerifyRule::FallsOffEnd, pc, "control runs past the last instruction");
      continue;
    }
    if (t < 0 || t >= n_) {
      issue(VerifyRule::JumpTarget, pc, "jump to pc " + std::to_string(t + 1) + " outside the code");
      continue;
    }
    const bool fallthrough = t == pc + 1 || t == pc + 2;
    const Ins target = decode(f_.code[t]);
    if (!fallthrough && (target.info().mm || target.op == OpCode::EXTRAARG))
      issue(VerifyRule::JumpTarget, pc, std::string("jump into the middle of a pair (") + target.info().name + ")");
    if (t == 0 && f_.is_vararg) issue(VerifyRule::JumpTarget, pc, "jump back to VARARGPREP");
  }
}

void Checker::vararg_and_close(const Analysis& a) {
  if (f_.is_vararg) {
    const Ins first = decode(f_.code[0]);
    if (first.op != OpCode::VARARGPREP || first.a != f_.numparams)
      issue(VerifyRule::Vararg, 0, "a vararg function must start with VARARGPREP numparams");
  }
  for (int pc = 0; pc < n_; pc++) {
    const Ins i = decode(f_.code[pc]);
    if (i.op == OpCode::VARARGPREP && (pc != 0 || !f_.is_vararg)) issue(VerifyRule::Vararg, pc, "VARARGPREP only as the first instruction of a vararg function");
    if (i.op == OpCode::VARARG && !f_.is_vararg && a.reachable[pc]) issue(VerifyRule::Vararg, pc, "VARARG in a function that is not vararg");
    if (i.op == OpCode::RETURN || i.op == OpCode::TAILCALL) {
      int want = f_.is_vararg ? f_.numparams + 1 : 0;
      if (i.c != want) issue(VerifyRule::Vararg, pc, std::string(i.info().name) + " C must be " + std::to_string(want));
    }
    if ((i.op == OpCode::RETURN0 || i.op == OpCode::RETURN1) && f_.is_vararg) issue(VerifyRule::Vararg, pc, "RETURN0/RETURN1 in a vararg function");
    if (!is_return(i.op) || !a.reachable[pc]) continue;
    const bool open = (a.tbc[pc] | a.captured[pc]).any();
    if (open && !((i.op == OpCode::RETURN || i.op == OpCode::TAILCALL) && i.k))
      issue(VerifyRule::Close, pc, "returns without closing open upvalues or to-be-closed variables");
    if (i.op == OpCode::TAILCALL && a.tbc[pc].any()) issue(VerifyRule::Close, pc, "TAILCALL with to-be-closed variables pending");
  }
}

void Checker::open_top(const Analysis& a) {
  // Greatest fixpoint of "top holds open results when pc is about to run".
  std::vector<char> in(n_, 1);
  auto out = [&](int pc) {
    const Ins i = decode(f_.code[pc]);
    if (sets_open_top(i)) return true;
    const bool keeps = i.op == OpCode::JMP || i.op == OpCode::GETUPVAL || i.op == OpCode::SETUPVAL;
    return options_.allow_top_gap && keeps && in[pc];
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int pc = 0; pc < n_; pc++) {
      bool v = !a.pred[pc].empty();
      for (int p : a.pred[pc]) v = v && out(p);
      if (pc == 0) v = false;
      if (char(v) != in[pc]) in[pc] = v, changed = true;
    }
  }
  for (int pc = 0; pc < n_; pc++) {
    if (!reads_open_top(decode(f_.code[pc])) || !a.reachable[pc]) continue;
    bool ok = in[pc] && (options_.allow_top_gap || (pc > 0 && sets_open_top(decode(f_.code[pc - 1]))));
    if (!ok) issue(VerifyRule::OpenTop, pc, "reads `top` that the previous instruction did not set");
  }
}

void Checker::lines() {
  if (f_.lineinfo.empty()) {
    if (!f_.abslineinfo.empty()) issue(VerifyRule::LineInfo, -1, "abslineinfo without lineinfo");
    return;
  }
  if (int(f_.lineinfo.size()) != n_) return issue(VerifyRule::LineInfo, -1, "lineinfo size differs from code size");
  const auto& abs = f_.abslineinfo;
  size_t next = 0;
  for (int pc = 0; pc < n_; pc++) {
    bool has_abs = next < abs.size() && abs[next].pc == pc;
    if (has_abs) next++;
    if (has_abs != (f_.lineinfo[pc] == kAbsLineInfo))
      issue(VerifyRule::LineInfo, pc, "lineinfo marker and abslineinfo entries disagree");
    if (abs.empty() || pc < abs[0].pc) continue;
    int est = pc / kMaxInstrWithoutAbs - 1;
    if (est >= 0 && (est >= int(abs.size()) || abs[est].pc > pc))
      issue(VerifyRule::LineInfo, pc, "more than 128 instructions without an absolute line entry");
  }
  if (next != abs.size()) issue(VerifyRule::LineInfo, -1, "abslineinfo entries out of order or past the code");
}

void Checker::debug_info() {
  if (!f_.upvalue_names.empty() && f_.upvalue_names.size() != f_.upvalues.size())
    issue(VerifyRule::DebugInfo, -1, "upvalue-name count differs from the upvalue count");
  for (const LocVar& v : f_.locvars)
    if (v.startpc < 0 || v.startpc > v.endpc || v.endpc > n_) issue(VerifyRule::DebugInfo, -1, "local variable range outside the code");
}

void Checker::run() {
  if (f_.numparams > f_.maxstacksize || f_.is_vararg > 1 || n_ == 0 || f_.upvalues.size() > 255)
    return issue(VerifyRule::Sizes, -1, "bad header fields (numparams, is_vararg, code size or upvalue count)");
  for (const Proto& child : f_.protos)
    for (const UpvalDesc& u : child.upvalues)
      if (u.instack ? !reg_ok(u.idx) : u.idx >= f_.upvalues.size())
        issue(VerifyRule::Upvalue, -1, "nested function " + describe(child) + " captures a missing " + (u.instack ? "register" : "upvalue"));
  const size_t before = out_.size();
  for (int pc = 0; pc < n_; pc++) {
    instruction(pc);
    pairs(pc);
    jumps(pc);
  }
  lines();
  debug_info();
  if (out_.size() != before) return;  // the dataflow below needs in-range operands
  Analysis a = analyze(f_);
  vararg_and_close(a);
  open_top(a);
}

void verify_tree(const Proto& f, const VerifyOptions& options, std::vector<VerifyIssue>& out) {
  Checker(f, options, out).run();
  for (const Proto& child : f.protos) verify_tree(child, options, out);
}

}  // namespace

const char* rule_name(VerifyRule r) {
  switch (r) {
#define X(name, what) case VerifyRule::name: return #name;
    TC_VERIFY_RULES(X)
#undef X
  }
  return "?";
}

std::vector<VerifyIssue> verify(const Proto& f, const VerifyOptions& options) {
  std::vector<VerifyIssue> out;
  verify_tree(f, options, out);
  return out;
}

void load_verified(lua_State* L, const Proto& f, const char* chunkname, const VerifyOptions& options) {
  std::vector<VerifyIssue> issues = verify(f, options);
  if (!issues.empty()) {
    std::string msg = "refusing to load a chunk that fails verification:";
    for (size_t i = 0; i < issues.size() && i < 5; i++)
      msg += std::string("\n  [") + rule_name(issues[i].rule) + "] " + issues[i].message;
    throw BytecodeError(msg);
  }
  load_binary(L, write_chunk(f), chunkname);
}

}  // namespace tc::vm
