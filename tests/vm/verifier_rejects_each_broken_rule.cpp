// The verifier accepts every chunk Lua compiles and rejects, rule by rule, chunks that break one.
#include <gtest/gtest.h>

#include <lua.hpp>

#include "corpus_files.h"
#include "proto_helpers.h"
#include "verifier.h"

namespace tc::vm {
namespace {

using testing::compile;
using testing::find_op;

bool breaks(const Proto& p, VerifyRule rule) {
  for (const VerifyIssue& i : verify(p))
    if (i.rule == rule) return true;
  return false;
}

std::string rules_of(const Proto& p) {
  std::string out;
  for (const VerifyIssue& i : verify(p)) out += std::string(rule_name(i.rule)) + ": " + i.message + "\n";
  return out;
}

// A function exercising most instruction kinds, nested as protos[0] of the chunk.
const char* kSample = R"(
local up = 1
local function f(t, a, ...)
  local x = t.name + 1.5
  local y = a + x
  for i = 1, 3 do y = y + i end
  for k, v in pairs(t) do y = y .. k end
  local g = function() return up + y end
  if a < 3 then y = nil end
  return g(), ...
end
return f
)";

Proto sample() { return compile(kSample).protos[0]; }

TEST(VerifierRejectsEachBrokenRule, EverythingLuaCompilesIsAccepted) {
  for (const std::string& file : testing::corpus()) {
    SCOPED_TRACE(file);
    Proto p = read_chunk(load_and_dump_file(file.c_str()));
    EXPECT_EQ(rules_of(p), "");
  }
  EXPECT_EQ(rules_of(compile(kSample)), "");
}

TEST(VerifierRejectsEachBrokenRule, Sizes) {
  Proto p = sample();
  p.numparams = p.maxstacksize + 1;
  EXPECT_TRUE(breaks(p, VerifyRule::Sizes));
}

TEST(VerifierRejectsEachBrokenRule, Register) {
  Proto p = sample();
  int pc = find_op(p, OpCode::MOVE);
  ASSERT_GE(pc, 0);
  p.code[pc] = make_abc(OpCode::MOVE, 0, p.maxstacksize, 0);
  EXPECT_TRUE(breaks(p, VerifyRule::Register)) << rules_of(p);
  Proto q = sample();
  pc = find_op(q, OpCode::CALL);
  Ins call = decode(q.code[pc]);
  q.code[pc] = make_abc(OpCode::CALL, call.a, 200, call.c);  // arguments past the frame
  EXPECT_TRUE(breaks(q, VerifyRule::Register));
}

TEST(VerifierRejectsEachBrokenRule, Constant) {
  Proto p = sample();
  int pc = find_op(p, OpCode::ADDK);
  ASSERT_GE(pc, 0);
  Ins i = decode(p.code[pc]);
  p.code[pc] = make_abc(OpCode::ADDK, i.a, i.b, int(p.k.size()));
  EXPECT_TRUE(breaks(p, VerifyRule::Constant));
  Proto q = sample();
  q.k[i.c].tag = ConstTag::ShortStr;  // ADDK of a string constant
  EXPECT_TRUE(breaks(q, VerifyRule::Constant));
}

TEST(VerifierRejectsEachBrokenRule, StringKey) {
  Proto p = sample();
  int pc = find_op(p, OpCode::GETFIELD);
  int number = find_op(p, OpCode::ADDK);
  ASSERT_GE(pc, 0);
  Ins get = decode(p.code[pc]);
  p.code[pc] = make_abc(OpCode::GETFIELD, get.a, get.b, decode(p.code[number]).c);
  EXPECT_TRUE(breaks(p, VerifyRule::StringKey)) << rules_of(p);
}

TEST(VerifierRejectsEachBrokenRule, Upvalue) {
  Proto p = compile(kSample);
  Proto& f = p.protos[0];
  f.protos[0].upvalues[0].idx = 200;  // the closure captures a register past f's frame
  EXPECT_TRUE(breaks(p, VerifyRule::Upvalue));
  Proto q = sample();
  int pc = find_op(q.protos[0], OpCode::GETUPVAL);
  q.protos[0].code[pc] = make_abc(OpCode::GETUPVAL, 0, 9, 0);
  EXPECT_TRUE(breaks(q, VerifyRule::Upvalue));
}

TEST(VerifierRejectsEachBrokenRule, NestedProto) {
  Proto p = sample();
  int pc = find_op(p, OpCode::CLOSURE);
  p.code[pc] = make_abx(OpCode::CLOSURE, decode(p.code[pc]).a, 7);
  EXPECT_TRUE(breaks(p, VerifyRule::NestedProto));
}

TEST(VerifierRejectsEachBrokenRule, Pair) {
  Proto p = sample();
  int pc = find_op(p, OpCode::ADD);
  p.code[pc + 1] = make_abc(OpCode::MOVE, 0, 0, 0);  // ADD without its MMBIN
  EXPECT_TRUE(breaks(p, VerifyRule::Pair));
  Proto q = sample();
  pc = find_op(q, OpCode::TFORPREP);
  Ins prep = decode(q.code[pc]);
  q.code[pc] = make_abx(OpCode::TFORPREP, prep.a, prep.bx - 1);  // lands before its TFORCALL
  EXPECT_TRUE(breaks(q, VerifyRule::Pair));
  Proto r = sample();
  pc = find_op(r, OpCode::LTI);
  r.code[pc + 1] = make_abc(OpCode::MOVE, 0, 0, 0);  // test without its JMP
  EXPECT_TRUE(breaks(r, VerifyRule::Pair));
}

TEST(VerifierRejectsEachBrokenRule, JumpTarget) {
  Proto p = sample();
  int pc = find_op(p, OpCode::JMP);
  p.code[pc] = make_sj(OpCode::JMP, 1000);
  EXPECT_TRUE(breaks(p, VerifyRule::JumpTarget));
  Proto q = sample();
  int mm = find_op(q, OpCode::MMBIN);
  pc = find_op(q, OpCode::JMP);
  q.code[pc] = make_sj(OpCode::JMP, mm - pc - 1);  // into an arithmetic/MMBIN pair
  EXPECT_TRUE(breaks(q, VerifyRule::JumpTarget));
}

TEST(VerifierRejectsEachBrokenRule, FallsOffEnd) {
  Proto p = sample();
  p.code.back() = make_abc(OpCode::MOVE, 0, 0, 0);
  EXPECT_TRUE(breaks(p, VerifyRule::FallsOffEnd));
}

TEST(VerifierRejectsEachBrokenRule, Vararg) {
  Proto p = sample();
  int pc = find_op(p, OpCode::RETURN);
  p.code[pc] = with_c(p.code[pc], 0);  // vararg function returning as if it had no varargs
  EXPECT_TRUE(breaks(p, VerifyRule::Vararg));
  Proto q = sample();
  q.is_vararg = 0;  // VARARGPREP and VARARG in a fixed-arity function
  EXPECT_TRUE(breaks(q, VerifyRule::Vararg));
}

TEST(VerifierRejectsEachBrokenRule, Close) {
  Proto p = sample();  // g captures y: returns must close upvalues
  for (int pc = 0; pc < int(p.code.size()); pc++)
    if (decode(p.code[pc]).op == OpCode::RETURN) p.code[pc] = with_k(p.code[pc], false);
  EXPECT_TRUE(breaks(p, VerifyRule::Close)) << rules_of(p);
}

TEST(VerifierRejectsEachBrokenRule, OpenTop) {
  Proto p = sample();
  int pc = find_op(p, OpCode::CALL);
  Ins call = decode(p.code[pc]);
  p.code[pc] = make_abc(OpCode::CALL, call.a, 0, call.c);  // reads a `top` nobody set
  EXPECT_TRUE(breaks(p, VerifyRule::OpenTop)) << rules_of(p);
}

TEST(VerifierRejectsEachBrokenRule, LineInfo) {
  Proto p = sample();
  p.lineinfo.pop_back();
  EXPECT_TRUE(breaks(p, VerifyRule::LineInfo));
  Proto q = sample();
  q.lineinfo[3] = kAbsLineInfo;  // marker without an abslineinfo entry
  EXPECT_TRUE(breaks(q, VerifyRule::LineInfo));
  // 300 instructions and a single absolute entry: the runtime's lookup would under-run.
  std::string src = "local x = 0\n";
  for (int i = 0; i < 300; i++) src += "x = x + " + std::to_string(i) + "\n";
  Proto r = compile(src);
  ASSERT_GE(r.abslineinfo.size(), 2u);
  int keep = r.abslineinfo.back().pc;
  for (const AbsLineInfo& a : r.abslineinfo)
    if (a.pc != keep) r.lineinfo[a.pc] = 1;
  r.abslineinfo = {r.abslineinfo.back()};
  EXPECT_TRUE(breaks(r, VerifyRule::LineInfo));
}

TEST(VerifierRejectsEachBrokenRule, DebugInfo) {
  Proto p = sample();
  p.upvalue_names.push_back(std::string("extra"));
  EXPECT_TRUE(breaks(p, VerifyRule::DebugInfo));
  Proto q = sample();
  q.locvars[0].endpc = int(q.code.size()) + 5;
  EXPECT_TRUE(breaks(q, VerifyRule::DebugInfo));
}

TEST(VerifierRejectsEachBrokenRule, FailingChunkIsNeverLoaded) {
  lua_State* L = luaL_newstate();
  Proto p = sample();
  p.code.back() = make_abc(OpCode::MOVE, 0, 0, 0);
  try {
    load_verified(L, p, "=bad");
    FAIL() << "a chunk failing verification was loaded";
  } catch (const BytecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("[FallsOffEnd]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lua_gettop(L), 0);
  load_verified(L, sample(), "=good");
  EXPECT_EQ(lua_type(L, -1), LUA_TFUNCTION);
  lua_close(L);
}

}  // namespace
}  // namespace tc::vm
