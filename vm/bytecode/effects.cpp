// Register effects and successors of each Lua 5.4 opcode. This is the analysis' per-opcode switch
// (a commented exception to small functions): no default, so a new opcode must be handled here.
#include "effects.h"

namespace tc::vm {

RegSet to_set(const RegRange& r, int frame_size) {
  RegSet s;
  int last = r.count == kOpenCount ? frame_size : r.first + r.count;
  for (int i = r.first; i < last && i < 256; i++) s.set(i);
  return s;
}

Effects effects(const Proto& f, int pc) {
  const Ins i = decode(f.code[pc]);
  const int a = i.a, b = i.b, c = i.c;
  Effects e;
  switch (i.op) {
    case OpCode::MOVE: e.read(b); e.write(a); break;
    case OpCode::LOADI:
    case OpCode::LOADF:
    case OpCode::LOADK:
    case OpCode::LOADKX:
    case OpCode::LOADFALSE:
    case OpCode::LFALSESKIP:
    case OpCode::LOADTRUE:
    case OpCode::GETUPVAL:
    case OpCode::GETTABUP:
    case OpCode::NEWTABLE:
    case OpCode::CLOSURE:
      e.write(a);
      break;
    case OpCode::LOADNIL: e.write(a, b + 1); break;
    case OpCode::SETUPVAL: e.read(a); break;
    case OpCode::GETTABLE: e.read(b); e.read(c); e.write(a); break;
    case OpCode::GETI:
    case OpCode::GETFIELD: e.read(b); e.write(a); break;
    case OpCode::SETTABUP: if (!i.k) e.read(c); break;
    case OpCode::SETTABLE:
      e.read(a); e.read(b);
      if (!i.k) e.read(c);
      break;
    case OpCode::SETI:
    case OpCode::SETFIELD:
      e.read(a);
      if (!i.k) e.read(c);
      break;
    case OpCode::SELF:
      e.read(b);
      if (!i.k) e.read(c);
      e.write(a, 2);
      break;
    case OpCode::ADDI:
    case OpCode::ADDK:
    case OpCode::SUBK:
    case OpCode::MULK:
    case OpCode::MODK:
    case OpCode::POWK:
    case OpCode::DIVK:
    case OpCode::IDIVK:
    case OpCode::BANDK:
    case OpCode::BORK:
    case OpCode::BXORK:
    case OpCode::SHRI:
    case OpCode::SHLI:
    case OpCode::UNM:
    case OpCode::BNOT:
    case OpCode::NOT:
    case OpCode::LEN:
      e.read(b); e.write(a);
      break;
    case OpCode::ADD:
    case OpCode::SUB:
    case OpCode::MUL:
    case OpCode::MOD:
    case OpCode::POW:
    case OpCode::DIV:
    case OpCode::IDIV:
    case OpCode::BAND:
    case OpCode::BOR:
    case OpCode::BXOR:
    case OpCode::SHL:
    case OpCode::SHR:
      e.read(b); e.read(c); e.write(a);
      break;
    case OpCode::MMBIN:
    case OpCode::MMBINI:
    case OpCode::MMBINK:
      // Operands of the failed fast path; the result goes to the arithmetic instruction's A.
      e.read(a);
      if (i.op == OpCode::MMBIN) e.read(b);
      if (pc > 0) e.write(decode(f.code[pc - 1]).a);
      break;
    case OpCode::CONCAT: e.read(a, b); e.write(a); break;
    case OpCode::CLOSE: break;  // reads the to-be-closed registers: see Analysis::tbc
    case OpCode::TBC: e.read(a); break;
    case OpCode::JMP: break;
    case OpCode::EQ:
    case OpCode::LT:
    case OpCode::LE: e.read(a); e.read(b); break;
    case OpCode::EQK:
    case OpCode::EQI:
    case OpCode::LTI:
    case OpCode::LEI:
    case OpCode::GTI:
    case OpCode::GEI:
    case OpCode::TEST:
      e.read(a);
      break;
    case OpCode::TESTSET: e.read(b); e.write(a); e.may_write = true; break;
    case OpCode::CALL:
      e.read(a, b == 0 ? kOpenCount : b);
      e.write(a, c == 0 ? kOpenCount : c - 1);
      break;
    case OpCode::TAILCALL: e.read(a, b == 0 ? kOpenCount : b); break;
    case OpCode::RETURN: e.read(a, b == 0 ? kOpenCount : b - 1); break;
    case OpCode::RETURN0: break;
    case OpCode::RETURN1: e.read(a); break;
    case OpCode::FORLOOP: e.read(a, 3); e.write(a, 2); e.write(a + 3); break;
    case OpCode::FORPREP: e.read(a, 3); e.write(a, 4); break;
    case OpCode::TFORPREP: e.read(a + 3); break;
    case OpCode::TFORCALL: e.read(a, 3); e.write(a + 4, c); break;
    case OpCode::TFORLOOP: e.read(a + 4); e.write(a + 2); e.may_write = true; break;
    case OpCode::SETLIST: e.read(a, b == 0 ? kOpenCount : b + 1); break;
    case OpCode::VARARG: e.write(a, c == 0 ? kOpenCount : c - 1); break;
    case OpCode::VARARGPREP: break;
    case OpCode::EXTRAARG: break;
  }
  if (i.op == OpCode::CLOSURE && i.bx < int(f.protos.size()))
    for (const UpvalDesc& u : f.protos[i.bx].upvalues)
      if (u.instack) e.captures.set(u.idx);
  return e;
}

bool is_empty_loop_jump(const Proto& f, int pc) {
  if (pc < 3) return false;
  const int a = decode(f.code[pc]).a;
  return f.code[pc - 3] == make_asbx(OpCode::LOADI, a, 1) &&
         f.code[pc - 2] == make_asbx(OpCode::LOADI, a + 1, 0) &&
         f.code[pc - 1] == make_asbx(OpCode::LOADI, a + 2, 1);
}

Successors successors(const Proto& f, int pc) {
  const Ins i = decode(f.code[pc]);
  const OpInfo& info = i.info();
  Successors s;
  if (is_return(i.op) || i.op == OpCode::EXTRAARG) return s;
  switch (info.jump) {
    case Jump::SJ: s.add(pc + 1 + i.sj); return s;
    case Jump::SKIP: s.add(pc + 2); return s;
    case Jump::FWD: s.add(pc + 1 + i.bx); return s;
    case Jump::BACK: s.add(pc + 1); s.add(pc + 1 - i.bx); return s;
    case Jump::FORPREP:
      if (!is_empty_loop_jump(f, pc)) s.add(pc + 1);
      s.add(pc + 2 + i.bx);
      return s;
    case Jump::NONE: break;
  }
  if (info.test) {  // the next instruction is the JMP taken when the test succeeds
    s.add(pc + 1);
    s.add(pc + 2);
    return s;
  }
  switch (info.follow) {
    case Follow::MMBIN:
    case Follow::MMBINI:
    case Follow::MMBINK: s.add(pc + 1); s.add(pc + 2); return s;  // fast path skips the MMBIN
    case Follow::EXTRAARG: s.add(pc + 2); return s;
    case Follow::EXTRAARG_IF_K: s.add(i.k ? pc + 2 : pc + 1); return s;
    case Follow::JMP:
    case Follow::TFORLOOP:
    case Follow::NONE: break;
  }
  s.add(pc + 1);
  return s;
}

}  // namespace tc::vm
