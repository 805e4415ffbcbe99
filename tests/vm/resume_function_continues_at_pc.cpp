// Synthesized resume functions continue a function at a pc from its live registers: loops,
// errors with the original file:line and names, open results, <close>, refusals, legal points.
#include <gtest/gtest.h>

#include <lua.hpp>

#include <algorithm>

#include "analysis.h"
#include "proto_helpers.h"
#include "resume.h"
#include "verifier.h"

namespace tc::vm {
namespace {

using testing::compile;
using testing::find_op;

struct State {
  lua_State* L = luaL_newstate();
  State() { luaL_openlibs(L); }
  ~State() { lua_close(L); }
  // Loads the resume function of f at pc as global `resume`; returns the plan.
  ResumePlan load_resume(const Proto& f, int pc) {
    ResumePlan plan = plan_resume(f, pc);
    if (!plan.ok()) return plan;
    load_verified(L, synthesize_resume(f, plan), "=resume");
    lua_setglobal(L, "resume");
    return plan;
  }
  std::string run(const char* code) {
    if (luaL_dostring(L, code) != LUA_OK) {
      std::string err = lua_tostring(L, -1);
      lua_pop(L, 1);
      return "error: " + err;
    }
    std::string out = lua_tostring(L, -1) ? lua_tostring(L, -1) : "?";
    lua_pop(L, 1);
    return out;
  }
};

TEST(ResumeFunctionContinuesAtPc, NumericLoopResumesFromItsHiddenState) {
  Proto f = compile(R"(return function(x, n)
    local acc = 0
    for i = 1, n do acc = acc + x * i end
    return acc
  end)").protos[0];
  State s;
  ResumePlan plan = s.load_resume(f, find_op(f, OpCode::FORLOOP));
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  // x, acc and the loop's index/count/step are live; n and the visible i are not.
  EXPECT_EQ(plan.registers, (std::vector<int>{0, 2, 3, 4, 5}));
  // f(2, 5) after its first iteration: acc = 2, index 1, 4 iterations left, step 1.
  EXPECT_EQ(s.run("return tostring(resume(2, 2, 1, 4, 1))"), "30");
}

TEST(ResumeFunctionContinuesAtPc, ErrorsKeepFileLineAndVariableNames) {
  Proto f = compile("return function(t)\n  local a = t.x\n  local b = a + 1\n  return b\nend\n",
                    "@model.lua").protos[0];
  State s;
  ResumePlan plan = s.load_resume(f, find_op(f, OpCode::ADDI));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(s.run("return resume(nil)"),
            "error: model.lua:3: attempt to perform arithmetic on a nil value (local 'a')");
}

TEST(ResumeFunctionContinuesAtPc, OpenResultsArePassedAsTrailingArguments) {
  Proto f = compile("return function(a, b) local t = {a, b, string.byte('xyz', 1, -1)} return #t, t[5] end").protos[0];
  int pc = find_op(f, OpCode::SETLIST);
  ASSERT_TRUE(reads_open_top(decode(f.code[pc])));
  State s;
  ResumePlan plan = s.load_resume(f, pc);
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  EXPECT_TRUE(plan.open_results);
  // Only the table register is passed; the copies of a and b above it are open values too.
  EXPECT_EQ(plan.registers, (std::vector<int>{2}));
  EXPECT_EQ(s.run("local n, v = resume({}, 1, 2, 7, 8, 9) return n .. ',' .. v"), "5,9");
}

TEST(ResumeFunctionContinuesAtPc, VarargsFollowTheRegisters) {
  Proto f = compile("return function(a, ...) local s = a * 2 return s, select('#', ...), ... end").protos[0];
  State s;
  ResumePlan plan = s.load_resume(f, find_op(f, OpCode::MULK) + 2);
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  EXPECT_TRUE(plan.varargs);
  EXPECT_EQ(s.run("return table.concat({resume(10, 'x', 'y')}, ',')"), "10,2,x,y");
}

TEST(ResumeFunctionContinuesAtPc, CloseVariablesAreClosedOnceByTheResumeFunction) {
  Proto f = compile(R"(return function(c)
    local x <close> = c
    local y = 1
    return y + 1
  end)").protos[0];
  State s;
  ResumePlan plan = s.load_resume(f, find_op(f, OpCode::TBC) + 1);
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  EXPECT_EQ(plan.tbc.size(), 1u);
  EXPECT_EQ(s.run(R"(
    local closed = 0
    local c = setmetatable({}, {__close = function() closed = closed + 1 end})
    local r = resume(c, c)
    return r .. ' closed ' .. closed)"),
            "2 closed 1");
}

TEST(ResumeFunctionContinuesAtPc, LocalsSharedWithClosuresAreRefusedWithAReason) {
  Proto f = compile(R"(return function()
    local v = 1
    local get = function() return v end
    v = 2
    return get()
  end)").protos[0];
  ResumePlan plan = plan_resume(f, find_op(f, OpCode::CLOSURE) + 1);
  EXPECT_FALSE(plan.ok());
  EXPECT_NE(plan.refusal.find("local 'v'"), std::string::npos) << plan.refusal;
  // Read-only sharing is fine.
  Proto g = compile("return function() local v = 1 local get = function() return v end return get() + v end").protos[0];
  EXPECT_TRUE(plan_resume(g, find_op(g, OpCode::CLOSURE) + 1).ok());
}

TEST(ResumeFunctionContinuesAtPc, ResumePointsSkipPairsAndPrologue) {
  Proto f = compile("return function(a, ...) local t = {} if a < 1 then t.x = a + 1 end return t end").protos[0];
  std::vector<int> legal;
  for (const ResumePoint& p : resume_points(f)) legal.push_back(p.pc);
  auto has = [&](int pc) { return std::find(legal.begin(), legal.end(), pc) != legal.end(); };
  EXPECT_FALSE(has(find_op(f, OpCode::VARARGPREP)));
  EXPECT_FALSE(has(find_op(f, OpCode::EXTRAARG)));
  EXPECT_FALSE(has(find_op(f, OpCode::MMBINI)));
  EXPECT_FALSE(has(find_op(f, OpCode::LTI) + 1));  // the JMP of the test
  EXPECT_TRUE(has(find_op(f, OpCode::LTI)));
  EXPECT_TRUE(has(find_op(f, OpCode::ADDI)));
}

TEST(ResumeFunctionContinuesAtPc, LivenessCoversCallRangesAndGenericForState) {
  Proto f = compile(R"(return function(t)
    local s = 0
    for k, v in pairs(t) do s = s + v end
    return s
  end)").protos[0];
  Analysis a = analyze(f);
  int call = find_op(f, OpCode::TFORCALL);
  Ins i = decode(f.code[call]);
  for (int r = i.a; r < i.a + 4; r++) EXPECT_TRUE(a.live[call].test(r)) << "register " << r;
  EXPECT_TRUE(a.tbc[call].test(i.a + 3));
}

}  // namespace
}  // namespace tc::vm

namespace tc::vm {
namespace {

TEST(ResumeFunctionContinuesAtPc, LoadkxWithItsExtraArgIsResumable) {
  // More than 2^17 constants: the last string is loaded with LOADKX + EXTRAARG.
  std::string src = "return function(x)\n  local t = {";
  for (int i = 0; i < 131080; i++) src += "\"s" + std::to_string(i) + "\",";
  src += "}\n  local a = \"late constant\"\n  return a .. x, #t\nend\n";
  Proto f = testing::compile(src).protos[0];
  int pc = -1;  // the last LOADKX: "late constant" (the constructor's tail uses LOADKX too)
  for (int i = 0; testing::find_op(f, OpCode::LOADKX, i) >= 0; i++) pc = testing::find_op(f, OpCode::LOADKX, i);
  ASSERT_GE(pc, 0);
  EXPECT_EQ(resume_point_at(f, pc + 1).pc, -1) << "EXTRAARG is never a resume point";
  ResumePlan plan = plan_resume(f, pc);
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  EXPECT_EQ(plan.registers, (std::vector<int>{0, 1}));  // x and t
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  load_verified(L, synthesize_resume(f, plan), "=resume");
  lua_pushstring(L, "!");
  lua_newtable(L);
  ASSERT_EQ(lua_pcall(L, 2, 2, 0), LUA_OK) << lua_tostring(L, -1);
  EXPECT_STREQ(lua_tostring(L, -2), "late constant!");
  EXPECT_EQ(lua_tointeger(L, -1), 0);
  lua_close(L);
}

}  // namespace
}  // namespace tc::vm
