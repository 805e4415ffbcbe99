// The symbolic interpreter: one handler per Lua 5.4 opcode, in opcode order (as lvm.c does).
// Every opcode appears once; a situation the tracer does not model is a graph break with a
// reason from breaks.def, never a crash. Values are Vars (tracer.h); calls, indexing,
// metamethods and builtins live in tracer_calls.cpp, the end of a trace in tracer_end.cpp.
#include "tracer.h"

#include <cmath>

namespace tc::capture {

using vm::Ins;
using vm::OpCode;

// lua_arith operator of an arithmetic opcode (-1 for others).
int arith_op(OpCode op) {
  switch (op) {
    case OpCode::ADDI:
    case OpCode::ADDK:
    case OpCode::ADD:
      return LUA_OPADD;
    case OpCode::SUBK:
    case OpCode::SUB:
      return LUA_OPSUB;
    case OpCode::MULK:
    case OpCode::MUL:
      return LUA_OPMUL;
    case OpCode::MODK:
    case OpCode::MOD:
      return LUA_OPMOD;
    case OpCode::POWK:
    case OpCode::POW:
      return LUA_OPPOW;
    case OpCode::DIVK:
    case OpCode::DIV:
      return LUA_OPDIV;
    case OpCode::IDIVK:
    case OpCode::IDIV:
      return LUA_OPIDIV;
    case OpCode::BANDK:
    case OpCode::BAND:
      return LUA_OPBAND;
    case OpCode::BORK:
    case OpCode::BOR:
      return LUA_OPBOR;
    case OpCode::BXORK:
    case OpCode::BXOR:
      return LUA_OPBXOR;
    case OpCode::SHRI:
    case OpCode::SHR:
      return LUA_OPSHR;
    case OpCode::SHLI:
    case OpCode::SHL:
      return LUA_OPSHL;
    case OpCode::UNM:
      return LUA_OPUNM;
    case OpCode::BNOT:
      return LUA_OPBNOT;
    default:
      return -1;
  }
}

namespace {
// Lua 5.4's forprep for integer loops: the iteration count, or -1 when the loop is skipped.
int64_t for_count(int64_t init, int64_t limit, int64_t step) {
  if (step > 0 ? init > limit : init < limit) return -1;
  uint64_t count = step > 0 ? uint64_t(limit) - uint64_t(init) : uint64_t(init) - uint64_t(limit);
  if (step > 0) {
    if (step != 1) count /= uint64_t(step);
  } else {
    count /= uint64_t(-(step + 1)) + 1u;
  }
  return int64_t(count);
}
}  // namespace

Var& Tracer::reg(Frame& f, int r) {
  if (r >= int(f.R.size())) f.R.resize(r + 1);
  if (r < int(f.cell_of.size()) && f.cell_of[r] >= 0) return cells_[f.cell_of[r]];
  return f.R[r];
}

Var Tracer::konst(const Frame& f, int k) const {
  const vm::Constant& c = f.p->k[k];
  switch (c.tag) {
    case vm::ConstTag::Nil:
      return Var::nil();
    case vm::ConstTag::False:
      return Var::boolean(false);
    case vm::ConstTag::True:
      return Var::boolean(true);
    case vm::ConstTag::Int:
      return Var::integer(c.i);
    case vm::ConstTag::Float:
      return Var::number(c.f);
    case vm::ConstTag::ShortStr:
    case vm::ConstTag::LongStr:
      return Var::string(c.s);
  }
  return Var::nil();
}

void Tracer::step() {
  Frame& f = frames_.back();
  f.cur = f.pc;
  const TraceBudget& b = opt_.budget;
  if (++steps_ > b.instructions)
    throw BreakSignal{BreakCode::TraceTooLong, std::to_string(b.instructions) + " instructions"};
  if (steps_ == b.pure_lua && e_.graph.inputs.empty() && e_.graph.num_ops() == 0)
    throw NoTensorWork{steps_};
  if (int(frames_.size()) > b.depth)
    throw BreakSignal{BreakCode::CallTooDeep, std::to_string(b.depth) + " frames"};
  if (iterations_ > b.iterations)
    throw BreakSignal{BreakCode::LoopTooLong, std::to_string(b.iterations) + " iterations"};
  if (frames_.size() == 1 && f.pc == opt_.forced_break_pc)
    throw BreakSignal{BreakCode::UnsupportedBytecode, "forced"};
  if (int(e_.guards.guards.size()) > b.guards || (steps_ & 1023) == 0) check_cost();
  TC_ASSERT(f.pc >= 0 && f.pc < int(f.p->code.size()), "tracer pc out of range");
  const Ins i = vm::decode(f.p->code[f.pc]);
  const size_t depth = frames_.size();
  exec(f, i);
  // a backward jump in the same frame is one more iteration of a loop (for, while, repeat, goto)
  if (frames_.size() == depth && frames_.back().pc <= frames_.back().cur) iterations_++;
}

void Tracer::exec(Frame& f, const Ins& i) {
  const int pc = f.pc++;  // like lvm.c, pc points at the next instruction while this one runs
  auto RK = [&](int c) { return i.k ? konst(f, c) : reg(f, c); };
  auto jump_next = [&] {  // the JMP after a test
    const Ins j = vm::decode(f.p->code[f.pc]);
    f.pc += 1 + j.sj;
  };
  auto cond_jump = [&](bool cond) {
    if (cond != i.k)
      f.pc++;
    else
      jump_next();
  };
  auto arith2 = [&](const Var& a, const Var& b) {
    // The MMBIN* that follows runs only when the operation needs a metamethod, with operands and
    // event of its own, as the source wrote them: `t - 3` is ADDI t -3 then MMBINI t 3 __sub,
    // `5.2 + t` is ADDK t 5.2 then MMBINK t 5.2 __add with k set (the constant first). Numbers and
    // tensors keep the instruction's (the same value); anything else takes the MMBIN's.
    const Ins mm = vm::decode(f.p->code[f.pc++]);
    Var out;
    if (a.k == Var::K::Tensor || b.k == Var::K::Tensor || a.unspec || b.unspec ||
        (a.is_number() && b.is_number())) {
      if (arith(arith_op(i.op), a, b, &out, i.a)) reg(f, i.a) = out;
      return;
    }
    constexpr int kFirstArithEvent = 6;  // TM_ADD in Lua's TMS; TM_ADD.. follow LUA_OPADD..
    const Var x = reg(f, mm.a);
    const Var y = mm.op == OpCode::MMBIN ? reg(f, mm.b)
                  : mm.op == OpCode::MMBINI ? Var::integer(mm.sb())
                                            : konst(f, mm.b);
    const bool flip = mm.op != OpCode::MMBIN && mm.k;
    if (arith(mm.c - kFirstArithEvent, flip ? y : x, flip ? x : y, &out, i.a)) reg(f, i.a) = out;
  };
  switch (i.op) {
    case OpCode::MOVE:
      reg(f, i.a) = reg(f, i.b);
      break;
    case OpCode::LOADI:
      reg(f, i.a) = Var::integer(i.sbx);
      break;
    case OpCode::LOADF:
      reg(f, i.a) = Var::number(double(i.sbx));
      break;
    case OpCode::LOADK:
      reg(f, i.a) = konst(f, i.bx);
      break;
    case OpCode::LOADKX:
      reg(f, i.a) = konst(f, vm::decode(f.p->code[f.pc++]).ax);
      break;
    case OpCode::LOADFALSE:
      reg(f, i.a) = Var::boolean(false);
      break;
    case OpCode::LFALSESKIP:
      reg(f, i.a) = Var::boolean(false);
      f.pc++;
      break;
    case OpCode::LOADTRUE:
      reg(f, i.a) = Var::boolean(true);
      break;
    case OpCode::LOADNIL:
      for (int r = i.a; r <= i.a + i.b; r++) reg(f, r) = Var::nil();
      break;
    case OpCode::GETUPVAL:
      reg(f, i.a) = upval(f, i.b);
      break;
    case OpCode::SETUPVAL:
      set_upval(f, i.b, reg(f, i.a));
      break;
    case OpCode::GETTABUP: {
      Var out;
      if (index(upval(f, i.b), konst(f, i.c), &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::GETTABLE: {
      Var out;
      if (index(reg(f, i.b), reg(f, i.c), &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::GETI: {
      Var out;
      if (index(reg(f, i.b), Var::integer(i.c), &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::GETFIELD: {
      Var out;
      if (index(reg(f, i.b), konst(f, i.c), &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::SETTABUP:
      newindex(upval(f, i.a), konst(f, i.b), RK(i.c));
      break;
    case OpCode::SETTABLE:
      newindex(reg(f, i.a), reg(f, i.b), RK(i.c));
      break;
    case OpCode::SETI:
      newindex(reg(f, i.a), Var::integer(i.b), RK(i.c));
      break;
    case OpCode::SETFIELD:
      newindex(reg(f, i.a), konst(f, i.b), RK(i.c));
      break;
    case OpCode::NEWTABLE: {
      Var t = new_table();
      tables_[t.id].order_unknown = false;
      tables_[t.id].nrec = i.b > 0 ? 1 << (i.b - 1) : 0;
      tables_[t.id].narr = i.c + (i.k ? vm::decode(f.p->code[f.pc]).ax * (vm::kMaxC + 1) : 0);
      reg(f, i.a) = t;
      f.pc++;  // EXTRAARG
      break;
    }
    case OpCode::SELF: {
      Var obj = reg(f, i.b);
      Var key = i.k ? konst(f, i.c) : reg(f, i.c);
      reg(f, i.a + 1) = obj;
      Var out;
      if (index(obj, key, &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::ADDI:
      arith2(reg(f, i.b), Var::integer(i.sc()));
      break;
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
      arith2(reg(f, i.b), konst(f, i.c));
      break;
    case OpCode::SHRI:
      arith2(reg(f, i.b), Var::integer(i.sc()));
      break;
    case OpCode::SHLI:
      arith2(Var::integer(i.sc()), reg(f, i.b));
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
      arith2(reg(f, i.b), reg(f, i.c));
      break;
    case OpCode::MMBIN:
    case OpCode::MMBINI:
    case OpCode::MMBINK:
      // Skipped by the arithmetic handlers above; reaching one means a jump into it.
      throw BreakSignal{BreakCode::UnsupportedBytecode, "jump to a metamethod instruction"};
    case OpCode::UNM:
    case OpCode::BNOT: {
      Var out, a = reg(f, i.b);
      if (arith(arith_op(i.op), a, a, &out, i.a)) reg(f, i.a) = out;
      break;
    }
    case OpCode::NOT:
      reg(f, i.a) = Var::boolean(!reg(f, i.b).truthy());
      break;
    case OpCode::LEN:
      reg(f, i.a) = len(reg(f, i.b));
      break;
    case OpCode::CONCAT: {
      std::vector<Var> parts;
      for (int r = i.a; r < i.a + i.b; r++) parts.push_back(reg(f, r));
      reg(f, i.a) = concat(parts);
      break;
    }
    case OpCode::CLOSE:
      if (close_tbc(f, i.a)) break;  // its <close> variables first, last opened first
      // the block ends: its captured registers leave their cells (closures keep the cells)
      for (int r = i.a; r < int(f.cell_of.size()); r++)
        if (f.cell_of[r] >= 0) {
          f.R[r] = cells_[f.cell_of[r]];
          f.cell_of[r] = -1;
        }
      break;
    case OpCode::TBC: {
      // a <close> variable (tc.no_grad()'s guard ...): nil and false are ignored, as Lua does;
      // its __close runs inlined where the block ends (CLOSE, RETURN). A break while it is
      // open breaks at this instruction instead (Tracer::run), so no resume function starts
      // inside its scope.
      const Var v = reg(f, i.a);
      if (v.k == Var::K::Nil || (v.k == Var::K::Bool && !v.b)) break;
      if (close_handler(v).k == Var::K::Nil)
        throw BreakSignal{BreakCode::ToBeClosed, "a value without __close (Lua raises)"};
      f.tbc.push_back({i.a, f.cur, false});
      break;
    }
    case OpCode::JMP:
      f.pc += i.sj;
      break;
    case OpCode::EQ:
    case OpCode::LT:
    case OpCode::LE:
      cond_jump(compare(i.op, reg(f, i.a), reg(f, i.b)));
      break;
    case OpCode::EQK:
      cond_jump(compare(OpCode::EQ, reg(f, i.a), konst(f, i.b)));
      break;
    case OpCode::EQI:
    case OpCode::LTI:
    case OpCode::LEI:
    case OpCode::GTI:
    case OpCode::GEI: {
      Var imm = i.c ? Var::number(i.sb()) : Var::integer(i.sb());  // C: the immediate was a float
      bool r;
      switch (i.op) {
        case OpCode::EQI:
          r = compare(OpCode::EQ, reg(f, i.a), imm);
          break;
        case OpCode::LTI:
          r = compare(OpCode::LT, reg(f, i.a), imm);
          break;
        case OpCode::LEI:
          r = compare(OpCode::LE, reg(f, i.a), imm);
          break;
        case OpCode::GTI:
          r = compare(OpCode::LT, imm, reg(f, i.a));
          break;
        default:
          r = compare(OpCode::LE, imm, reg(f, i.a));
          break;
      }
      cond_jump(r);
      break;
    }
    case OpCode::TEST:
      cond_jump(reg(f, i.a).truthy());
      break;
    case OpCode::TESTSET: {
      Var b = reg(f, i.b);
      if (b.truthy() != i.k) {
        f.pc++;
      } else {
        reg(f, i.a) = b;
        jump_next();
      }
      break;
    }
    case OpCode::CALL:
    case OpCode::TAILCALL: {
      // A tail call is traced as a call with all results; the RETURN A 0 after it returns them.
      const int end = i.b ? i.a + i.b : f.top;
      std::vector<Var> args;
      args.reserve(std::max(0, end - i.a - 1));
      for (int r = i.a + 1; r < end; r++) args.push_back(reg(f, r));
      Var fn = reg(f, i.a);
      const int want = i.op == OpCode::TAILCALL ? -1 : i.c - 1;
      call(fn, std::move(args), i.a, want, false);
      break;
    }
    case OpCode::RETURN: {
      if (close_tbc(f, 0)) break;  // the results stay in their registers meanwhile
      const int end = i.b ? i.a + i.b - 1 : f.top;
      std::vector<Var> res;
      res.reserve(std::max(0, end - i.a));
      for (int r = i.a; r < end; r++) res.push_back(reg(f, r));
      deliver(std::move(res));
      break;
    }
    case OpCode::RETURN0:
      deliver({});
      break;
    case OpCode::RETURN1:
      deliver({reg(f, i.a)});
      break;
    case OpCode::FORLOOP: {
      for (int r = i.a; r < i.a + 3; r++) reg(f, r) = spec(reg(f, r));  // the loop's state
      Var& idx = reg(f, i.a);
      if (idx.k == Var::K::Int) {
        Var& count = reg(f, i.a + 1);
        if (count.i > 0) {
          count.i--;
          idx.i += reg(f, i.a + 2).i;
          reg(f, i.a + 3) = idx;
          f.pc -= i.bx;
        }
      } else {
        const double step = reg(f, i.a + 2).f, limit = reg(f, i.a + 1).f;
        const double next = idx.f + step;
        if (step > 0 ? next <= limit : limit <= next) {
          idx.f = next;
          reg(f, i.a + 3) = idx;
          f.pc -= i.bx;
        }
      }
      break;
    }
    case OpCode::FORPREP: {
      Var init = spec(reg(f, i.a)), limit = spec(reg(f, i.a + 1)), step = spec(reg(f, i.a + 2));
      if (!init.is_number() || !limit.is_number() || !step.is_number() || step.num() == 0)
        throw BreakSignal{BreakCode::UnsupportedBytecode,
                          "numeric for loop over values that are not constants"};
      if (init.k == Var::K::Int && step.k == Var::K::Int) {
        int64_t lim;
        if (limit.k == Var::K::Int) {
          lim = limit.i;
        } else {
          if (std::isnan(limit.f)) {
            f.pc += i.bx + 1;
            break;
          }
          double fl = step.i > 0 ? std::floor(limit.f) : std::ceil(limit.f);
          if (fl >= 9.2e18)
            lim = INT64_MAX;
          else if (fl <= -9.2e18)
            lim = INT64_MIN;
          else
            lim = int64_t(fl);
        }
        int64_t count = for_count(init.i, lim, step.i);
        if (count < 0) {
          f.pc += i.bx + 1;
          break;
        }
        reg(f, i.a + 1) = Var::integer(count);
        reg(f, i.a + 3) = init;
      } else {
        const double in = init.num(), lim = limit.num(), st = step.num();
        if (st > 0 ? lim < in : in < lim) {
          f.pc += i.bx + 1;
          break;
        }
        reg(f, i.a) = Var::number(in);
        reg(f, i.a + 1) = Var::number(lim);
        reg(f, i.a + 2) = Var::number(st);
        reg(f, i.a + 3) = Var::number(in);
      }
      break;
    }
    case OpCode::TFORPREP:
      if (reg(f, i.a + 3).truthy())
        throw BreakSignal{BreakCode::ToBeClosed, "generic for with a closing value"};
      f.pc += i.bx;
      break;
    case OpCode::TFORCALL: {
      std::vector<Var> args{reg(f, i.a + 1), reg(f, i.a + 2)};
      call(reg(f, i.a), std::move(args), i.a + 4, i.c, false);
      break;
    }
    case OpCode::TFORLOOP:
      if (reg(f, i.a + 4).k != Var::K::Nil) {
        reg(f, i.a + 2) = reg(f, i.a + 4);
        f.pc -= i.bx;
      }
      break;
    case OpCode::SETLIST: {
      const int n = i.b ? i.b : f.top - i.a - 1;  // SETLIST's B is the count
      int last = i.c;
      if (i.k) last += vm::decode(f.p->code[f.pc++]).ax * (vm::kMaxC + 1);
      const Var t = reg(f, i.a);
      for (int j = 1; j <= n; j++) newindex(t, Var::integer(last + j), reg(f, i.a + j));
      break;
    }
    case OpCode::CLOSURE: {
      const vm::Proto* p = &f.p->protos[i.bx];
      SymClosure c{p, {}};
      for (const vm::UpvalDesc& u : p->upvalues) {
        if (u.instack) {
          if (int(f.cell_of.size()) <= u.idx) f.cell_of.resize(u.idx + 1, -1);
          if (f.cell_of[u.idx] < 0) {
            cells_.push_back(reg(f, u.idx));
            f.cell_of[u.idx] = int(cells_.size()) - 1;
          }
          c.cells.push_back(f.cell_of[u.idx]);
        } else if (f.fn.k == Var::K::Closure) {
          c.cells.push_back(closures_[f.fn.id].cells[u.idx]);
        } else {
          cells_.push_back(upval(f, u.idx));  // a real upvalue: read-only inside (see set_upval)
          c.cells.push_back(-int(cells_.size()));  // negative: a copy that may not be written
          real_cells_[c.cells.back()] = {f.fn, u.idx};
        }
      }
      closures_.push_back(std::move(c));
      Var v;
      v.k = Var::K::Closure;
      v.id = int(closures_.size()) - 1;
      reg(f, i.a) = v;
      break;
    }
    case OpCode::VARARG: {
      const int n = i.c ? i.c - 1 : int(f.va.size());
      for (int j = 0; j < n; j++) reg(f, i.a + j) = j < int(f.va.size()) ? f.va[j] : Var::nil();
      if (!i.c) f.top = i.a + n;
      break;
    }
    case OpCode::VARARGPREP:
      break;  // frames get their varargs when pushed
    case OpCode::EXTRAARG:
      throw BreakSignal{BreakCode::UnsupportedBytecode, "jump to EXTRAARG"};
  }
  (void)pc;
}

}  // namespace tc::capture
