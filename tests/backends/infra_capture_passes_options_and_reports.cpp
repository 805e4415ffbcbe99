// The boundary between capture and a backend: tc.compile's options reach Backend::compile whole,
// unknown names are errors at the user's line, and what the backend reports (kernels, times,
// fallback nodes, perf hints) comes out of tc.compiler.stats(), explain and TC_LOGS=perf_hints.
#include <gtest/gtest.h>

#include "infra_fake_backend.h"
#include "partitioned.h"
#include "tc/capture.h"
#include "tc/vm/runtime.h"

using namespace tc;
using tc::backends::testing::FakeBackend;

namespace {

// capture with one backend, "fake" (sin and add only; option "unroll"), compiled by partitions
capture::GraphCompiler fake_compiler(const FakeBackend& fake) {
  capture::GraphCompiler c;
  c.compile = [&fake](const capture::Graph& g, const std::string& name, const capture::CompileOptions& o) {
    EXPECT_EQ(name, "fake");
    return backends::compile_partitioned(fake, backends::find("eager"), g, o);
  };
  c.backends = {{"fake", fake.option_names()}};
  c.modes = backends::modes();
  return c;
}

}  // namespace

TEST(CaptureBoundary, OptionsReachTheBackendAndReportsComeBack) {
  FakeBackend fake({Op::sin, Op::add}, {"unroll"});
  vm::Runtime rt("test");
  capture::install(rt.state(), fake_compiler(fake));
  testing::internal::CaptureStderr();
  vm::Ref stats = rt.run_string(R"(
    local tc = require "tc"
    tc.compiler.reset()
    tc.config.log = "perf_hints"
    local f = tc.compile(function(x) return tc.relu(tc.sin(x)) + 1 end,
                         {backend = "fake", mode = "max-autotune", dynamic = false, options = {unroll = 4}})
    local y = f(tc.ones(3))
    assert(math.abs(y[1]:item() - (math.sin(1) + 1)) < 1e-6)
    f(tc.ones(3))
    tc.config.log = ""
    return tc.compiler.stats()
  )")[0];
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_EQ(fake.options.size(), 2u);  // [sin] and [add]; relu ran on eager
  EXPECT_EQ(fake.options[0].mode, "max-autotune");
  EXPECT_EQ(fake.options[0].dynamic, 0);
  EXPECT_FALSE(fake.options[0].fullgraph);
  ASSERT_EQ(fake.options[0].options.size(), 1u);
  EXPECT_EQ(fake.options[0].options[0].first, "unroll");
  ASSERT_NE(fake.options[0].option("unroll"), nullptr);
  EXPECT_EQ(fake.options[0].option("unroll")->to_int(), 4);
  EXPECT_EQ(stats["backend_compiles"].integer(), 1);
  EXPECT_EQ(stats["fallback_nodes"].integer(), 1);
  EXPECT_EQ(stats["kernels"].integer(), 2);
  EXPECT_EQ(stats["distinct_kernels"].integer(), 2);
  EXPECT_DOUBLE_EQ(stats["lower_ms"].number(), 3.0);
  // one perf hint, for relu, naming the function
  EXPECT_NE(log.find("[tc perf_hints]"), std::string::npos) << log;
  EXPECT_NE(log.find("does not support relu"), std::string::npos) << log;
  EXPECT_EQ(log.find("[tc perf_hints]"), log.rfind("[tc perf_hints]")) << log;
  const std::string text = capture::explain_report("text");
  EXPECT_NE(text.find("Graph 1: 2 kernels, 2 distinct (0 from cache), 1 fallback nodes"), std::string::npos)
      << text;
  EXPECT_NE(text.find("lower 3.000 ms"), std::string::npos) << text;
  const std::string json = capture::explain_report("json");
  EXPECT_NE(json.find("\"fallback_nodes\": 1"), std::string::npos) << json;
}

TEST(CaptureBoundary, ExplainFromLuaReportsKernelsPerGraph) {
  FakeBackend fake({Op::sin, Op::add, Op::relu});
  vm::Runtime rt("test");
  capture::install(rt.state(), fake_compiler(fake));
  vm::Ref r = rt.run_string(R"(
    local tc = require "tc"
    local report = tc.compiler.explain(function(x) return tc.relu(tc.sin(x)) + 1 end, {backend = "fake"})(tc.ones(2))
    return report
  )")[0];
  EXPECT_EQ(r["kernels_per_graph"][1]["kernels"].integer(), 3);
  EXPECT_EQ(r["kernels_per_graph"][1]["fallback_nodes"].integer(), 0);
  EXPECT_DOUBLE_EQ(r["compile_times"][1]["lower_ms"].number(), 1.5);
}

TEST(CaptureBoundary, UnknownNamesAreErrorsAtTheUsersLine) {
  FakeBackend fake({Op::sin}, {"unroll"});
  vm::Runtime rt("test");
  capture::install(rt.state(), fake_compiler(fake));
  const std::pair<const char*, const char*> cases[] = {
      {"{backend = 'cpu'}", "user.lua:2: tc.compile(): unknown backend \"cpu\" (backends: fake, or a"},
      {"{backend = 'fake', mode = 'fastest'}", "user.lua:2: tc.compile(): unknown mode \"fastest\" (modes: default, "},
      {"{backend = 'fake', options = {unrol = 2}}",
       "user.lua:2: tc.compile(): backend \"fake\" has no option 'unrol' (its options: unroll)"},
      {"{backend = 'fake', options = {unroll = {}}}",
       "user.lua:2: tc.compile(): option 'unroll' must be a boolean, number or string, got table"},
      {"{backend = 'fake', optimize = true}", "user.lua:2: tc.compile() got an unexpected option 'optimize'"},
  };
  for (auto [opts, want] : cases) {
    try {
      rt.run_string(std::string("local tc = require 'tc'\nlocal f = tc.compile(function(x) return x end, ") + opts + ")\n",
                    "=user.lua");
      ADD_FAILURE() << opts << ": no error";
    } catch (const vm::LuaError& e) {
      EXPECT_EQ(e.kind(), "ValueError") << opts;
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << opts << ": " << e.what();
    }
  }
  // tc.config's defaults are checked too, at the tc.compile that uses them
  try {
    rt.run_string("local tc = require 'tc'\ntc.config.backend = 'fast'\nlocal f = tc.compile(function(x) return x end)\n",
                  "=user.lua");
    ADD_FAILURE() << "tc.config.backend = 'fast': no error";
  } catch (const vm::LuaError& e) {
    EXPECT_NE(std::string(e.what()).find("user.lua:3: tc.compile(): unknown backend \"fast\""), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fake.options.empty());
}
