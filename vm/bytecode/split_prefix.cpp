// Builds split-check prefix protos: the target's code with the instruction at the resume pc
// replaced by a jump to an epilogue that calls handoff(resume closure, live registers...).
#include "split_prefix.h"

#include "opcodes.h"

namespace tc::vm {
namespace {

const char* const kSplitNames[kSplitUpvalues] = {"(split finish)", "(split handoff)", "(split pack)",
                                                 "(split save)", "(split noop)"};

// Appends the split upvalues to f; they come from the enclosing proto's split upvalues at `from`.
int append_split_upvalues(Proto& f, int from) {
  int base = int(f.upvalues.size());
  for (int j = 0; j < kSplitUpvalues; j++) {
    f.upvalues.push_back({false, uint8_t(from + j), 0});
    if (!f.upvalue_names.empty()) f.upvalue_names.push_back(std::string(kSplitNames[j]));
  }
  return base;
}

struct Emitter {
  std::vector<uint32_t>& code;
  std::vector<int>& lines;
  int line;
  int emit(uint32_t w) {
    code.push_back(w);
    lines.push_back(line);
    return int(code.size()) - 1;
  }
};

std::string make_prefix(Proto& t, int up, const ResumePlan& plan, const Proto& resume, int nup) {
  const int p = plan.pc;
  const int n = int(plan.registers.size());
  const int S = t.maxstacksize;
  const int frame = S + 3 + n + (plan.open_results || plan.varargs ? 1 : 0);
  if (frame > 255) return "the prefix needs more than 255 registers";
  if (plan.open_results && plan.open_base == 0) return "open results start at register 0";
  std::vector<int> lines = decode_lines(t);
  const int line = lines[p] >= 0 ? lines[p] : t.linedefined;
  for (int& l : lines) l = l >= 0 ? l : line;
  std::vector<uint32_t>& code = t.code;
  Emitter e{code, lines, line};
  auto jump_from = [&](int at, int to) { code[at] = make_sj(OpCode::JMP, to - (at + 1)); };

  // TFORPREP runs the instruction it jumps to as its TFORCALL without dispatching it; when that
  // TFORCALL is replaced, TFORPREP becomes JMP -> (TBC A+3; JMP -> dest), its two effects.
  auto redirect_tforprep = [&](int call) {  // returns the stub JMPs, to be aimed by the caller
    std::vector<int> stubs;
    for (int q = 0; q < call; q++) {
      const Ins prep = decode(code[q]);
      if (prep.op != OpCode::TFORPREP || q + 1 + prep.bx != call) continue;
      jump_from(q, int(code.size()));
      e.emit(make_abc(OpCode::TBC, prep.a + 3, 0, 0));
      stubs.push_back(e.emit(0));
    }
    return stubs;
  };
  const Ins at = decode(code[p]);
  if (at.op == OpCode::TFORCALL) {
    for (int stub : redirect_tforprep(p)) jump_from(stub, p);
  }
  if (at.op == OpCode::TFORLOOP) {
    // TFORCALL always runs its TFORLOOP; redirect the call to a copy whose loop jumps (or falls)
    // into the epilogue. Re-running TFORLOOP in the resume function is idempotent.
    std::vector<int> stubs = redirect_tforprep(p - 1);
    int trampoline = e.emit(0);
    int call = e.emit(code[p - 1]);
    e.emit(make_abx(OpCode::TFORLOOP, at.a, 3));  // back to the trampoline
    jump_from(p - 1, call);
    for (int stub : stubs) jump_from(stub, call);
    jump_from(trampoline, int(code.size()));
  } else {
    jump_from(p, int(code.size()));
    const Follow follow = at.info().follow;
    const bool paired = follow == Follow::MMBIN || follow == Follow::MMBINI ||
                        follow == Follow::MMBINK || follow == Follow::EXTRAARG ||
                        (follow == Follow::EXTRAARG_IF_K && at.k);
    if (paired && p + 1 < int(lines.size())) code[p + 1] = make_sj(OpCode::JMP, 0);  // now unreachable
  }
  const int packed = S + 3 + n;
  if (plan.open_results) {
    const int x = plan.open_base - 1;  // R[x] is live: park it while pack(open values) runs there
    e.emit(make_abc(OpCode::SETUPVAL, x, up + kSplitSave, 0));
    e.emit(make_abc(OpCode::GETUPVAL, x, up + kSplitPack, 0));
    e.emit(make_abc(OpCode::CALL, x, 0, 2));
    e.emit(make_abc(OpCode::MOVE, packed, x, 0));
    e.emit(make_abc(OpCode::GETUPVAL, x, up + kSplitSave, 0));
    // The packed table waits in the upvalue while CLOSURE below runs: a GC step there treats
    // the registers above the closure's as dead and clears them (lvm.c's checkGC sets top).
    e.emit(make_abc(OpCode::SETUPVAL, packed, up + kSplitSave, 0));
  }
  e.emit(make_abc(OpCode::GETUPVAL, S, up + kSplitFinish, 0));
  e.emit(make_abc(OpCode::GETUPVAL, S + 1, up + kSplitHandoff, 0));
  e.emit(make_abx(OpCode::CLOSURE, S + 2, int(t.protos.size())));
  for (int i = 0; i < n; i++) e.emit(make_abc(OpCode::MOVE, S + 3 + i, plan.registers[i], 0));
  if (plan.open_results) e.emit(make_abc(OpCode::GETUPVAL, packed, up + kSplitSave, 0));
  if (plan.varargs) {
    e.emit(make_abc(OpCode::VARARG, S + 3 + n, 0, 0));
    e.emit(make_abc(OpCode::CALL, S + 1, 0, 0));
  } else {
    const int nargs = 1 + n + (plan.open_results ? 1 : 0);
    e.emit(make_abc(OpCode::CALL, S + 1, nargs + 1, 0));
  }
  // handoff returned (ok, results...) up to top. Disarm the to-be-closed slots (the resume
  // function closed them) without touching top, then finish(ok, ...) returns or raises.
  for (int r : plan.tbc) e.emit(make_abc(OpCode::GETUPVAL, r, up + kSplitNoop, 0));
  e.emit(make_abc(OpCode::CALL, S, 0, 0));
  e.emit(make_abc(OpCode::RETURN, S, 0, t.is_vararg ? t.numparams + 1 : 0, true));

  Proto nested = resume;
  nested.upvalues.clear();
  nested.upvalue_names.clear();
  for (int i = 0; i < nup; i++) {
    nested.upvalues.push_back({false, uint8_t(i), resume.upvalues[i].kind});
    if (!resume.upvalue_names.empty()) nested.upvalue_names.push_back(resume.upvalue_names[i]);
  }
  t.protos.push_back(std::move(nested));
  t.maxstacksize = uint8_t(frame);
  if (t.has_lines()) encode_lines(t, lines);
  return "";
}

}  // namespace

SplitRoot build_split_root(const Proto& root, const std::vector<int>& path, const ResumePlan& plan,
                           const Proto& resume) {
  SplitRoot out{root, ""};
  Proto* f = &out.root;
  int from = 0;
  for (size_t depth = 0;; depth++) {
    if (f->upvalues.size() + kSplitUpvalues > 255) {
      out.refusal = "too many upvalues for the split upvalues";
      return out;
    }
    const int nup = int(f->upvalues.size());
    from = append_split_upvalues(*f, from);
    if (depth == path.size()) {
      out.refusal = make_prefix(*f, from, plan, resume, nup);
      return out;
    }
    f = &f->protos[path[depth]];
  }
}

}  // namespace tc::vm
