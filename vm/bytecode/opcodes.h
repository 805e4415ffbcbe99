// Lua 5.4 opcodes: enum, per-opcode properties and instruction decode/encode (from opcodes.def).
#pragma once

#include <cassert>
#include <cstdint>

namespace tc::vm {

enum class OpCode : uint8_t {
#define OP(name, fmt, a, b, c, seta, t, it, ot, mm, follow, jump) name,
#include "opcodes.def"
#undef OP
};
inline constexpr int kNumOpcodes = 83;

enum class Format : uint8_t { iABC, iABx, iAsBx, iAx, isJ };
// Operand kinds of the A, B and C columns (see opcodes.def).
enum class Operand : uint8_t { R_, K_, KS, KN, KI, RK, RS, U_, P_, I_, __ };
enum class Follow : uint8_t { NONE, MMBIN, MMBINI, MMBINK, JMP, EXTRAARG, EXTRAARG_IF_K, TFORLOOP };
enum class Jump : uint8_t { NONE, SJ, SKIP, BACK, FWD, FORPREP };

struct OpInfo {
  const char* name;
  Format fmt;
  Operand a, b, c;
  bool sets_a, test, uses_top, sets_top, mm;
  Follow follow;
  Jump jump;
};

const OpInfo& op_info(OpCode op);

// Field limits of the 5.4 instruction formats.
inline constexpr int kMaxA = 255, kMaxB = 255, kMaxC = 255;
inline constexpr int kMaxBx = (1 << 17) - 1, kOffsetBx = kMaxBx >> 1;   // sBx = Bx - 65535
inline constexpr int kMaxAx = (1 << 25) - 1, kOffsetSJ = kMaxAx >> 1;   // sJ = raw - 16777215
inline constexpr int kOffsetSC = 127;                                   // sB/sC = raw - 127

// One decoded instruction. Every field is decoded whatever the format; the format says which
// ones mean something.
struct Ins {
  OpCode op;
  int a, b, c;
  bool k;
  int bx, sbx, ax, sj;
  int sb() const { return b - kOffsetSC; }
  int sc() const { return c - kOffsetSC; }
  const OpInfo& info() const { return op_info(op); }
};

inline bool valid_opcode(uint32_t word) { return (word & 0x7F) < kNumOpcodes; }

inline Ins decode(uint32_t w) {
  Ins i;
  i.op = static_cast<OpCode>(w & 0x7F);
  i.a = (w >> 7) & 0xFF;
  i.k = (w >> 15) & 1;
  i.b = (w >> 16) & 0xFF;
  i.c = (w >> 24) & 0xFF;
  i.bx = (w >> 15) & 0x1FFFF;
  i.sbx = i.bx - kOffsetBx;
  i.ax = (w >> 7) & 0x1FFFFFF;
  i.sj = i.ax - kOffsetSJ;
  return i;
}

inline uint32_t make_abc(OpCode op, int a, int b, int c, bool k = false) {
  assert(a >= 0 && a <= kMaxA && b >= 0 && b <= kMaxB && c >= 0 && c <= kMaxC &&
         "make_abc: operand out of range");
  return uint32_t(op) | uint32_t(a) << 7 | uint32_t(k) << 15 | uint32_t(b) << 16 |
         uint32_t(c) << 24;
}
inline uint32_t make_abx(OpCode op, int a, int bx) {
  assert(a >= 0 && a <= kMaxA && bx >= 0 && bx <= kMaxBx && "make_abx: operand out of range");
  return uint32_t(op) | uint32_t(a) << 7 | uint32_t(bx) << 15;
}
inline uint32_t make_asbx(OpCode op, int a, int sbx) { return make_abx(op, a, sbx + kOffsetBx); }
inline uint32_t make_ax(OpCode op, int ax) {
  assert(ax >= 0 && ax <= kMaxAx && "make_ax: operand out of range");
  return uint32_t(op) | uint32_t(ax) << 7;
}
inline uint32_t make_sj(OpCode op, int sj) { return make_ax(op, sj + kOffsetSJ); }

// Instruction word with one field replaced.
inline uint32_t with_c(uint32_t w, int c) { return (w & ~(0xFFu << 24)) | uint32_t(c) << 24; }
inline uint32_t with_k(uint32_t w, bool k) { return (w & ~(1u << 15)) | uint32_t(k) << 15; }

inline bool is_return(OpCode op) {
  return op == OpCode::RETURN || op == OpCode::RETURN0 || op == OpCode::RETURN1 ||
         op == OpCode::TAILCALL;
}
// True when this instruction consumes the open results left in `top` by the one before it.
inline bool reads_open_top(const Ins& i) {
  return i.info().uses_top && i.op != OpCode::VARARGPREP && i.b == 0;
}
// True when this instruction leaves an open number of results ending at `top`.
inline bool sets_open_top(const Ins& i) {
  return (i.op == OpCode::CALL || i.op == OpCode::VARARG) && i.c == 0;
}

// Metamethod event names by TM index, as luac prints them ("__add").
const char* event_name(int tm);

}  // namespace tc::vm
