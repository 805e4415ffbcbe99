// The verifier every chunk tc emits must pass before lua_load (Lua 5.4 does not check bytecode).
#pragma once

#include <string>
#include <vector>

#include "proto.h"

struct lua_State;

namespace tc::vm {

// The rules, each with what it protects.
#define TC_VERIFY_RULES(X)                                                                       \
  X(Sizes, "header fields: numparams <= maxstacksize, is_vararg 0/1, code not empty, <= 255 upvalues") \
  X(Register, "register operands and ranges inside the frame (maxstacksize)")                    \
  X(Constant, "constant indices in range and of the kind the opcode needs")                      \
  X(StringKey, "GETFIELD/SETFIELD/GETTABUP/SETTABUP/SELF keys are short-string constants")       \
  X(Upvalue, "upvalue indices in range, nested upvalue descriptors valid")                       \
  X(NestedProto, "CLOSURE indices in range")                                                     \
  X(Pair, "required pairs: test+JMP, arithmetic+MMBIN*, EXTRAARG, TFORPREP->TFORCALL+TFORLOOP") \
  X(JumpTarget, "jumps land inside the code, never on MMBIN*/EXTRAARG nor on VARARGPREP")        \
  X(FallsOffEnd, "control never runs past the last instruction")                                 \
  X(Vararg, "VARARGPREP/VARARG/RETURN C fields agree with is_vararg and numparams")              \
  X(Close, "returns close what is open: k set when upvalues or to-be-closed variables may be open") \
  X(OpenTop, "an instruction reading `top` directly follows one that set it")                    \
  X(LineInfo, "lineinfo/abslineinfo sizes and the runtime's absolute-line lookup rule")          \
  X(DebugInfo, "upvalue-name count 0 or one per upvalue, local ranges inside the code")

enum class VerifyRule {
#define X(name, what) name,
  TC_VERIFY_RULES(X)
#undef X
};
const char* rule_name(VerifyRule r);

struct VerifyIssue {
  VerifyRule rule;
  std::string message;  // "function <f.lua:3> pc 7: ..."
};

struct VerifyOptions {
  // Let JMP/GETUPVAL/SETUPVAL sit between an open-results producer and its consumer (they keep
  // `top`). Only for the split-check harness' prefix functions, which run without debug hooks.
  bool allow_top_gap = false;
};

// Checks f and every nested proto; empty when the chunk is safe to load.
std::vector<VerifyIssue> verify(const Proto& f, const VerifyOptions& options = {});

// Verifies, writes and lua_loads f (pushing the function); throws BytecodeError naming the first
// broken rules instead of loading a chunk that fails.
void load_verified(lua_State* L, const Proto& f, const char* chunkname,
                   const VerifyOptions& options = {});

}  // namespace tc::vm
