// Disassembler with luac 5.4's exact output format (instruction names, operands and comments).
#include "listing.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "opcodes.h"

namespace tc::vm {
namespace {

template <typename... Args>
void add(std::string& out, const char* fmt, Args... args) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, fmt, args...);
  out.append(buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\v': out += "\\v"; break;
      default:
        if (c >= 0x20 && c < 0x7F)
          out += char(c);
        else
          add(out, "\\%03d", int(c));
    }
  }
  return out + "\"";
}

const char* type_letter(const Constant& c) {
  switch (c.tag) {
    case ConstTag::Nil: return "N";
    case ConstTag::False:
    case ConstTag::True: return "B";
    case ConstTag::Float: return "F";
    case ConstTag::Int: return "I";
    case ConstTag::ShortStr:
    case ConstTag::LongStr: return "S";
  }
  return "?";
}

std::string upvalue_name(const Proto& f, int i) {
  if (i < int(f.upvalue_names.size()) && f.upvalue_names[i]) return *f.upvalue_names[i];
  return "-";
}

std::string constant(const Proto& f, int i) {
  if (i < 0 || i >= int(f.k.size())) return "?";
  return format_constant(f.k[i]);
}

const char* plural(int n) { return n == 1 ? "" : "s"; }

void header(std::string& out, const Proto& f) {
  std::string s = f.source ? *f.source : "=?";
  if (!s.empty() && (s[0] == '@' || s[0] == '='))
    s = s.substr(1);
  else if (!s.empty() && s[0] == '\x1b')
    s = "(bstring)";
  else
    s = "(string)";
  int n = int(f.code.size());
  add(out, "\n%s <%s:%d,%d> (%d instruction%s at %p)\n", f.linedefined == 0 ? "main" : "function",
      s.c_str(), f.linedefined, f.lastlinedefined, n, plural(n), static_cast<const void*>(&f));
  int np = f.numparams, ns = f.maxstacksize, nu = int(f.upvalues.size());
  add(out, "%d%s param%s, %d slot%s, %d upvalue%s, ", np, f.is_vararg ? "+" : "", plural(np), ns,
      plural(ns), nu, plural(nu));
  int nl = int(f.locvars.size()), nk = int(f.k.size()), nf = int(f.protos.size());
  add(out, "%d local%s, %d constant%s, %d function%s\n", nl, plural(nl), nk, plural(nk), nf,
      plural(nf));
}

void debug_sections(std::string& out, const Proto& f) {
  const void* self = &f;
  add(out, "constants (%d) for %p:\n", int(f.k.size()), self);
  for (size_t i = 0; i < f.k.size(); i++)
    out += "\t" + std::to_string(i) + "\t" + type_letter(f.k[i]) + "\t" + format_constant(f.k[i]) +
           "\n";
  add(out, "locals (%d) for %p:\n", int(f.locvars.size()), self);
  for (size_t i = 0; i < f.locvars.size(); i++) {
    const LocVar& v = f.locvars[i];
    out += "\t" + std::to_string(i) + "\t" + (v.name ? *v.name : "") + "\t" +
           std::to_string(v.startpc + 1) + "\t" + std::to_string(v.endpc + 1) + "\n";
  }
  add(out, "upvalues (%d) for %p:\n", int(f.upvalues.size()), self);
  for (size_t i = 0; i < f.upvalues.size(); i++)
    out += "\t" + std::to_string(i) + "\t" + upvalue_name(f, int(i)) + "\t" +
           std::to_string(int(f.upvalues[i].instack)) + "\t" +
           std::to_string(int(f.upvalues[i].idx)) + "\n";
}

void function(std::string& out, const Proto& f, bool full) {
  header(out, f);
  std::vector<int> lines = decode_lines(f);
  for (int pc = 0; pc < int(f.code.size()); pc++) {
    add(out, "\t%d\t", pc + 1);
    if (lines[pc] > 0)
      add(out, "[%d]\t", lines[pc]);
    else
      out += "[-]\t";
    out += format_instruction(f, pc) + "\n";
  }
  if (full) debug_sections(out, f);
  for (const Proto& child : f.protos) function(out, child, full);
}

}  // namespace

std::string format_constant(const Constant& c) {
  std::string out;
  switch (c.tag) {
    case ConstTag::Nil: return "nil";
    case ConstTag::False: return "false";
    case ConstTag::True: return "true";
    case ConstTag::Int: add(out, "%" PRId64, c.i); return out;
    case ConstTag::Float:
      add(out, "%.14g", c.f);
      if (out.find_first_not_of("-0123456789") == std::string::npos) out += ".0";
      return out;
    case ConstTag::ShortStr:
    case ConstTag::LongStr: return quoted(c.s);
  }
  return "?";
}

// The one switch over every opcode for printing: operands then luac's "\t; " comment. This is
// the printer's per-opcode table; it has no default so a new opcode must be added here.
std::string format_instruction(const Proto& f, int pc) {
  const Ins i = decode(f.code[pc]);
  const int a = i.a, b = i.b, c = i.c, bx = i.bx, sbx = i.sbx;
  const int extra = pc + 1 < int(f.code.size()) ? decode(f.code[pc + 1]).ax : 0;
  const char* isk = i.k ? "k" : "";
  std::string out;
  add(out, "%-9s\t", i.info().name);
  auto comment = [&](const std::string& s) { out += "\t; " + s; };
  switch (i.op) {
    case OpCode::MOVE: add(out, "%d %d", a, b); break;
    case OpCode::LOADI:
    case OpCode::LOADF: add(out, "%d %d", a, sbx); break;
    case OpCode::LOADK: add(out, "%d %d", a, bx); comment(constant(f, bx)); break;
    case OpCode::LOADKX: add(out, "%d", a); comment(constant(f, extra)); break;
    case OpCode::LOADFALSE:
    case OpCode::LFALSESKIP:
    case OpCode::LOADTRUE: add(out, "%d", a); break;
    case OpCode::LOADNIL: add(out, "%d %d", a, b); comment(std::to_string(b + 1) + " out"); break;
    case OpCode::GETUPVAL:
    case OpCode::SETUPVAL: add(out, "%d %d", a, b); comment(upvalue_name(f, b)); break;
    case OpCode::GETTABUP:
      add(out, "%d %d %d", a, b, c);
      comment(upvalue_name(f, b) + " " + constant(f, c));
      break;
    case OpCode::GETTABLE:
    case OpCode::GETI: add(out, "%d %d %d", a, b, c); break;
    case OpCode::GETFIELD: add(out, "%d %d %d", a, b, c); comment(constant(f, c)); break;
    case OpCode::SETTABUP:
      add(out, "%d %d %d%s", a, b, c, isk);
      comment(upvalue_name(f, a) + " " + constant(f, b) + (i.k ? " " + constant(f, c) : ""));
      break;
    case OpCode::SETTABLE:
    case OpCode::SETI:
    case OpCode::SELF:
      add(out, "%d %d %d%s", a, b, c, isk);
      if (i.k) comment(constant(f, c));
      break;
    case OpCode::SETFIELD:
      add(out, "%d %d %d%s", a, b, c, isk);
      comment(constant(f, b) + (i.k ? " " + constant(f, c) : ""));
      break;
    case OpCode::NEWTABLE:
      add(out, "%d %d %d", a, b, c);
      comment(std::to_string(c + extra * (kMaxC + 1LL)));
      break;
    case OpCode::ADDI:
    case OpCode::SHRI:
    case OpCode::SHLI: add(out, "%d %d %d", a, b, i.sc()); break;
    case OpCode::ADDK:
    case OpCode::SUBK:
    case OpCode::MULK:
    case OpCode::MODK:
    case OpCode::POWK:
    case OpCode::DIVK:
    case OpCode::IDIVK:
    case OpCode::BANDK:
    case OpCode::BORK:
    case OpCode::BXORK: add(out, "%d %d %d", a, b, c); comment(constant(f, c)); break;
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
      add(out, "%d %d %d", a, b, c);
      break;
    case OpCode::MMBIN: add(out, "%d %d %d", a, b, c); comment(event_name(c)); break;
    case OpCode::MMBINI:
      add(out, "%d %d %d %d", a, i.sb(), c, int(i.k));
      comment(std::string(event_name(c)) + (i.k ? " flip" : ""));
      break;
    case OpCode::MMBINK:
      add(out, "%d %d %d %d", a, b, c, int(i.k));
      comment(std::string(event_name(c)) + " " + constant(f, b) + (i.k ? " flip" : ""));
      break;
    case OpCode::UNM:
    case OpCode::BNOT:
    case OpCode::NOT:
    case OpCode::LEN:
    case OpCode::CONCAT: add(out, "%d %d", a, b); break;
    case OpCode::CLOSE:
    case OpCode::TBC:
    case OpCode::RETURN1:
    case OpCode::VARARGPREP: add(out, "%d", a); break;
    case OpCode::JMP: add(out, "%d", i.sj); comment("to " + std::to_string(i.sj + pc + 2)); break;
    case OpCode::EQ:
    case OpCode::LT:
    case OpCode::LE: add(out, "%d %d %d", a, b, int(i.k)); break;
    case OpCode::EQK: add(out, "%d %d %d", a, b, int(i.k)); comment(constant(f, b)); break;
    case OpCode::EQI:
    case OpCode::LTI:
    case OpCode::LEI:
    case OpCode::GTI:
    case OpCode::GEI: add(out, "%d %d %d", a, i.sb(), int(i.k)); break;
    case OpCode::TEST: add(out, "%d %d", a, int(i.k)); break;
    case OpCode::TESTSET: add(out, "%d %d %d", a, b, int(i.k)); break;
    case OpCode::CALL:
      add(out, "%d %d %d", a, b, c);
      comment((b == 0 ? std::string("all in ") : std::to_string(b - 1) + " in ") +
              (c == 0 ? std::string("all out") : std::to_string(c - 1) + " out"));
      break;
    case OpCode::TAILCALL:
      add(out, "%d %d %d%s", a, b, c, isk);
      comment(std::to_string(b - 1) + " in");
      break;
    case OpCode::RETURN:
      add(out, "%d %d %d%s", a, b, c, isk);
      comment(b == 0 ? std::string("all out") : std::to_string(b - 1) + " out");
      break;
    case OpCode::RETURN0: break;
    case OpCode::FORLOOP:
    case OpCode::TFORLOOP:
      add(out, "%d %d", a, bx);
      comment("to " + std::to_string(pc - bx + 2));
      break;
    case OpCode::FORPREP:
      add(out, "%d %d", a, bx);
      comment("exit to " + std::to_string(pc + bx + 3));
      break;
    case OpCode::TFORPREP:
      add(out, "%d %d", a, bx);
      comment("to " + std::to_string(pc + bx + 2));
      break;
    case OpCode::TFORCALL: add(out, "%d %d", a, c); break;
    case OpCode::SETLIST:
      add(out, "%d %d %d", a, b, c);
      if (i.k) comment(std::to_string(c + extra * (kMaxC + 1LL)));
      break;
    case OpCode::CLOSURE: {
      add(out, "%d %d", a, bx);
      const void* child = bx < int(f.protos.size()) ? &f.protos[bx] : nullptr;
      std::string p;
      add(p, "%p", child);
      comment(p);
      break;
    }
    case OpCode::VARARG:
      add(out, "%d %d", a, c);
      comment(c == 0 ? std::string("all out") : std::to_string(c - 1) + " out");
      break;
    case OpCode::EXTRAARG: add(out, "%d", i.ax); break;
  }
  return out;
}

std::string listing(const Proto& f, bool full) {
  std::string out;
  function(out, f, full);
  return out;
}

}  // namespace tc::vm
