// capture::install from a C++ host (the embedding API): tc.compile traces, caches and reports.
#include <gtest/gtest.h>

#include <cmath>

#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/vm/runtime.h"

using namespace tc;

TEST(Install, CompilesTracesOnceAndExplains) {
  vm::Runtime rt("test");
  capture::install(rt.state(), backends::graph_compiler());
  rt.run_string(R"(
    local tc = require "tc"
    tc.compiler.reset()
    local function foo(x, y) return tc.sin(x) + tc.cos(y) end
    cf = tc.compile(foo)
    ref = foo
  )");
  Tensor x = call1(Op::ones, {IntList{4}});
  Tensor y = call1(Op::zeros, {IntList{4}});
  for (int i = 0; i < 3; i++) {
    Tensor r = rt.global("cf")(x, y)[0].tensor();
    EXPECT_NEAR(r.data<float>()[0], std::sin(1.0f) + 1.0f, 1e-6);
  }
  vm::Ref stats = rt.run_string("return require('tc').compiler.stats()")[0];
  EXPECT_EQ(stats["traces"].integer(), 1);
  EXPECT_EQ(stats["cache_hits"].integer(), 2);
  const std::string text = capture::explain_report("text");
  EXPECT_NE(text.find("Graph Count: 1"), std::string::npos) << text;
  EXPECT_NE(text.find("Ops 1: sin, cos, add"), std::string::npos) << text;
  EXPECT_NE(capture::explain_report("json").find("\"graph_count\": 1"), std::string::npos);
}

TEST(Install, GraphBreakErrorUnderFullgraph) {
  vm::Runtime rt("test");
  capture::install(rt.state(), backends::graph_compiler());
  try {
    rt.run_string(
        "local tc = require 'tc'\n"
        "local f = tc.compile(function(x) if x:sum() > 0 then return x end return -x end, "
        "{fullgraph = true})\n"
        "f(tc.ones(2))\n",
        "=strict");
    FAIL() << "expected a GraphBreakError";
  } catch (const vm::LuaError& e) {
    EXPECT_EQ(e.kind(), "GraphBreakError");
    EXPECT_NE(std::string(e.what()).find("TC0101"), std::string::npos) << e.what();
  }
}
