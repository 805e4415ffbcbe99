// The opcode property table, expanded from opcodes.def, and the metamethod event names.
#include "opcodes.h"

#include <cassert>

namespace tc::vm {
namespace {

constexpr OpInfo kOps[] = {
#define OP(name, fmt, a, b, c, seta, t, it, ot, mm, follow, jump)                           \
  {#name,          Format::fmt,  Operand::a, Operand::b,     Operand::c, seta != 0, t != 0, \
   it != 0,        ot != 0,      mm != 0,    Follow::follow, Jump::jump},
#include "opcodes.def"
#undef OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOpcodes, "opcodes.def must have 83 rows");

constexpr const char* kEvents[] = {
    "__index", "__newindex", "__gc",  "__mode", "__len", "__eq",  "__add",    "__sub", "__mul",
    "__mod",   "__pow",      "__div", "__idiv", "__band", "__bor", "__bxor",  "__shl", "__shr",
    "__unm",   "__bnot",     "__lt",  "__le",   "__concat", "__call", "__close"};

}  // namespace

const OpInfo& op_info(OpCode op) {
  assert(int(op) < kNumOpcodes && "opcode out of range: decode only validated words");
  return kOps[int(op)];
}

const char* event_name(int tm) {
  if (tm < 0 || tm >= int(sizeof(kEvents) / sizeof(kEvents[0]))) return "?";
  return kEvents[tm];
}

}  // namespace tc::vm
