// The graph IR (building, fx-style listing, eager backend run) and the guard program (evaluated
// on a Lua stack, failure messages naming the source path).
#include <gtest/gtest.h>

#include <cmath>
#include <lua.hpp>

#include "guards.h"
#include "lua_binding.h"
#include "tc/backends.h"
#include "tc/capture/graph.h"

using namespace tc;
using namespace tc::capture;

namespace {

Graph sin_plus_cos() {
  Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({2, 3}, {3, 1}, DType::Float32));
  Ref y = g.add_input("y", "arg[2]", Tensor::fake({2, 3}, {3, 1}, DType::Float32));
  Ref s = g.add_op(Op::sin, {NodeArg::ref(x)}, call(Op::sin, {g.fake(x)}))[0];
  Ref c = g.add_op(Op::cos, {NodeArg::ref(y)}, call(Op::cos, {g.fake(y)}))[0];
  Ref a =
      g.add_op(Op::add, {NodeArg::ref(s), NodeArg::ref(c), NodeArg::constant_of(Value(int64_t(1)))},
               call(Op::add, bind(Op::add, {g.fake(s), g.fake(c)}, {})))[0];
  g.outputs.push_back(a);
  return g;
}

TEST(Graph, PrintsTabularLikeFx) {
  Graph g = sin_plus_cos();
  const std::string t = g.print_tabular();
  EXPECT_EQ(t,
            "opcode         name    target  args\n"
            "-------------  ------  ------  -------------------\n"
            "placeholder    x       arg[1]  ()\n"
            "placeholder    y       arg[2]  ()\n"
            "call_function  sin     sin     (x,)\n"
            "call_function  cos     cos     (y,)\n"
            "call_function  add     add     (sin, cos, alpha=1)\n"
            "output         output  output  ((add,),)\n");
  EXPECT_EQ(g.num_ops(), 3);
  EXPECT_EQ(g.op_names(), (std::vector<std::string>{"sin", "cos", "add"}));
  EXPECT_NE(g.print_code().find("%add : float32[2, 3] = add(sin, cos, alpha=1)"), std::string::npos)
      << g.print_code();
}

TEST(Graph, DynamicDimsPrintSymbolically) {
  Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({5, 3}, {3, 1}, DType::Float32));
  g.dynamic_dims.push_back({0, 0});
  EXPECT_EQ(g.meta_string(x), "float32[s0, 3]");
}

TEST(EagerBackend, RunsTheGraphOpByOp) {
  Graph g = sin_plus_cos();
  CompiledGraph run = backends::compile_graph(g, "eager").run;
  Tensor x = call1(Op::ones, {IntList{2, 3}});
  Tensor y = call1(Op::zeros, {IntList{2, 3}});
  std::vector<Tensor> out = run(borrow({x, y}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NEAR(out[0].data<float>()[0], std::sin(1.0f) + 1.0f, 1e-6);
  EXPECT_THROW(backends::find("nope"), Error);
}

TEST(Guards, CheckReadsSourcesAndNamesTheFailure) {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  GuardProgram p;
  int arg = p.source(SrcKind::Arg, -1, 1);
  // K[1] = "n", K[2] = 3
  lua_newtable(L);
  lua_pushstring(L, "n");
  lua_rawseti(L, -2, 1);
  lua_pushinteger(L, 3);
  lua_rawseti(L, -2, 2);
  p.k_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int field = p.source(SrcKind::Field, arg, 1, "n");
  Guard t{GuardKind::Type, arg};
  t.type = LUA_TTABLE;
  t.expected = "a table";
  Guard e{GuardKind::Equals, field};
  e.k = 2;
  e.vtype = LUA_TNUMBER;
  e.is_int = true;
  e.ival = 3;
  e.expected = "3";
  p.guards = {t, e};
  EXPECT_EQ(p.describe(field), "arg[1].n");

  lua_pushnil(L);  // the function slot
  luaL_dostring(L, "return {n = 3}");
  int base = lua_gettop(L);
  EXPECT_TRUE(p.check(L, 1, 2, 1));
  lua_settop(L, base);
  lua_pushinteger(L, 4);
  lua_setfield(L, 2, "n");
  EXPECT_FALSE(p.check(L, 1, 2, 1));
  EXPECT_EQ(p.failure(L, base), "arg[1].n: expected 3, got 4");
  lua_settop(L, base);
  lua_pushnumber(L, 3.0);
  lua_setfield(L, 2, "n");
  EXPECT_FALSE(p.check(L, 1, 2, 1)) << "3.0 is not the integer 3";
  lua_close(L);
}

}  // namespace
