// Resume planning (live registers, varargs, open results, to-be-closed) and resume synthesis.
#include "resume.h"

#include <deque>

#include "opcodes.h"

namespace tc::vm {
namespace {

bool reaches_vararg(const Proto& f, const Analysis& a, int start) {
  std::vector<bool> seen(f.code.size(), false);
  std::deque<int> work{start};
  seen[start] = true;
  while (!work.empty()) {
    int pc = work.front();
    work.pop_front();
    if (decode(f.code[pc]).op == OpCode::VARARG) return true;
    for (int s : a.succ[pc])
      if (!seen[s]) seen[s] = true, work.push_back(s);
  }
  return false;
}

// RETURN/TAILCALL of the copied code, made to agree with the resume function's arity.
uint32_t fix_return(uint32_t w, bool vararg, int numparams) {
  const Ins i = decode(w);
  const int c = vararg ? numparams + 1 : 0;
  switch (i.op) {
    case OpCode::RETURN:
    case OpCode::TAILCALL: return with_c(w, c);
    case OpCode::RETURN0: return vararg ? make_abc(OpCode::RETURN, 0, 1, c) : w;
    case OpCode::RETURN1: return vararg ? make_abc(OpCode::RETURN, i.a, 2, c) : w;
    default: return w;
  }
}

}  // namespace

ResumePlan plan_resume(const Proto& f, const Analysis& a, int pc) {
  ResumePlan plan;
  plan.pc = pc;
  ResumePoint point = resume_point_at(f, pc);
  if (point.pc < 0) {
    plan.refusal = "pc " + std::to_string(pc + 1) + " is not a legal resume point";
    return plan;
  }
  plan.refusal = capture_conflict(f, a, pc);
  if (!plan.ok()) return plan;
  RegSet regs = a.live[pc] | a.tbc[pc];
  if (point.open_results) {
    plan.open_results = true;
    plan.open_base = point.open_base;
    for (int r = point.open_base; r < 256; r++) regs.reset(r);
  }
  for (int r = 0; r < f.maxstacksize; r++)
    if (regs.test(r)) plan.registers.push_back(r);
  for (int r = 0; r < 256; r++)
    if (a.tbc[pc].test(r)) plan.tbc.push_back(r);
  plan.varargs = f.is_vararg && reaches_vararg(f, a, pc);
  if (plan.varargs && plan.open_results)
    plan.refusal = "open results at pc " + std::to_string(pc + 1) +
                   " in a vararg function that reads its varargs later";
  return plan;
}

ResumePlan plan_resume(const Proto& f, int pc) { return plan_resume(f, analyze(f), pc); }

Proto synthesize_resume(const Proto& f, const ResumePlan& plan) {
  if (!plan.ok()) throw BytecodeError("cannot resume " + describe(f) + ": " + plan.refusal);
  const int n = int(plan.registers.size());
  const int size = int(f.code.size());
  if (plan.pc < 0 || plan.pc >= size) throw BytecodeError("resume pc out of range");
  for (int i = 0; i < n; i++)
    if (plan.registers[i] < i || plan.registers[i] >= f.maxstacksize ||
        (i > 0 && plan.registers[i] <= plan.registers[i - 1]))
      throw BytecodeError("resume registers must be ascending and inside the frame");
  const bool vararg = plan.varargs || plan.open_results;
  const std::vector<int> old_lines = decode_lines(f);
  const int line = old_lines[plan.pc] >= 0 ? old_lines[plan.pc] : f.linedefined;

  std::vector<uint32_t> prologue;
  if (vararg) prologue.push_back(make_abc(OpCode::VARARGPREP, n, 0, 0));
  // Parameter i moves up to registers[i] >= i; going down never overwrites a pending one.
  for (int i = n - 1; i >= 0; i--)
    if (plan.registers[i] != i) prologue.push_back(make_abc(OpCode::MOVE, plan.registers[i], i, 0));
  for (int r : plan.tbc) prologue.push_back(make_abc(OpCode::TBC, r, 0, 0));
  int next = plan.pc;  // where the copied code continues
  std::vector<int> chain_lines;
  if (plan.open_results) {
    // `top` must be set by the instruction right before its consumer (debug hooks reset it on
    // any other), so the consumer chain runs here, right after VARARG rebuilt the open values.
    prologue.push_back(make_abc(OpCode::VARARG, plan.open_base, 0, 0));
    for (bool more = true; more && next < size;) {
      const Ins i = decode(f.code[next]);
      prologue.push_back(fix_return(f.code[next], vararg, n));
      chain_lines.push_back(old_lines[next] >= 0 ? old_lines[next] : line);
      next++;
      if (i.op == OpCode::SETLIST && i.k && next < size) {
        prologue.push_back(f.code[next]);
        chain_lines.push_back(chain_lines.back());
        next++;
      }
      more = sets_open_top(i);
    }
  }
  // Jump into the copy. Lua names variables in error messages ("(local 'x')", "(constant 'y')")
  // by scanning the code before the failing pc, and a JMP makes it distrust everything it
  // jumps over. A FORPREP over an empty loop (1 to 0) jumps just the same but is not seen as a
  // jump, so the copied code keeps its names. It needs 4 scratch registers above the frame.
  const int scratch = f.maxstacksize;
  const bool forprep = scratch + 4 <= 255 && next > 0 && next - 1 <= kMaxBx;
  const int jump_seq = next == 0 ? 0 : forprep ? 4 : 1;  // at pc 0 the copy simply follows
  const int jmp_at = int(prologue.size()) + jump_seq - 1;
  const int shift = jmp_at + 1;
  if (forprep) {
    prologue.push_back(make_asbx(OpCode::LOADI, scratch, 1));
    prologue.push_back(make_asbx(OpCode::LOADI, scratch + 1, 0));
    prologue.push_back(make_asbx(OpCode::LOADI, scratch + 2, 1));
    prologue.push_back(make_abx(OpCode::FORPREP, scratch, shift + next - jmp_at - 2));
  } else if (jump_seq == 1) {
    prologue.push_back(make_sj(OpCode::JMP, next));  // lands on shift + next
  }

  Proto r = f;
  r.numparams = uint8_t(n);
  r.is_vararg = vararg;
  r.code = prologue;
  if (forprep) r.maxstacksize = uint8_t(scratch + 4);
  for (uint32_t w : f.code) {
    // The copy's own VARARGPREP is never run (the prologue has its own); keep it out of the way.
    r.code.push_back(decode(w).op == OpCode::VARARGPREP ? make_sj(OpCode::JMP, 0)
                                                        : fix_return(w, vararg, n));
  }
  std::vector<int> lines(shift, line);
  const int chain_start = jmp_at - (jump_seq - 1) - int(chain_lines.size());
  for (size_t i = 0; i < chain_lines.size(); i++) lines[chain_start + i] = chain_lines[i];
  for (int l : old_lines) lines.push_back(l >= 0 ? l : line);
  if (f.has_lines()) {
    encode_lines(r, lines);
  } else {
    r.lineinfo.clear();
    r.abslineinfo.clear();
  }
  for (LocVar& v : r.locvars) v.startpc += shift, v.endpc += shift;
  return r;
}

}  // namespace tc::vm
