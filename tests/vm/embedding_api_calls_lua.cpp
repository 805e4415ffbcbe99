// The C++ embedding API (tc/vm/runtime.h): run Lua, call Lua functions with tensors made from host
// memory, get tensors and numbers back, call C++ from Lua, Lua errors as C++ exceptions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tc/vm/runtime.h"

using namespace tc::vm;

TEST(Embedding, CallsAGlobalFunctionWithHostTensors) {
  Runtime rt;
  rt.run_string("local tc = require 'tc'\nfunction scale(x, s) return x * s, x:sum():item(), 'ok' end");
  float host[6] = {1, 2, 3, 4, 5, 6};
  tc::Tensor x = from_host(host, {2, 3}, tc::DType::Float32);
  host[0] = 100;  // from_host copied
  Results r = rt.global("scale")(x, 2.0);
  ASSERT_EQ(r.size(), 3u);
  ASSERT_TRUE(r[0].is_tensor());
  tc::Tensor y = r[0].tensor();
  EXPECT_EQ(y.sizes(), (tc::Shape{2, 3}));
  float out[6];
  to_host(y, out, sizeof out);
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[5], 12);
  EXPECT_EQ(r[1].number(), 21);
  EXPECT_EQ(r[2].string(), "ok");
  EXPECT_THROW(to_host(y, out, 4), tc::Error);
}

TEST(Embedding, BorrowedTensorsSeeHostWrites) {
  Runtime rt;
  rt.run_string("function total(x) return x:sum():item() end");
  double buf[3] = {1, 2, 3};
  tc::Tensor b = borrow_host(buf, {3}, tc::DType::Float64);
  EXPECT_EQ(rt.global("total")(b)[0].number(), 6);
  buf[2] = 10;
  EXPECT_EQ(rt.global("total")(b)[0].number(), 13);
  // Lua writes go to the host buffer too.
  rt.run_string("function zero_first(x) x[1] = 0 end");
  rt.global("zero_first")(b);
  EXPECT_EQ(buf[0], 0);
}

TEST(Embedding, RunsAFileReturningATableOfFunctions) {
  std::string path = std::filesystem::temp_directory_path() / ("tc_embed_" + std::to_string(getpid()) + ".lua");
  {
    std::ofstream f(path);
    f << "local tc = require 'tc'\nlocal n = ...\nlocal M = {n = n}\n"
         "function M.forward(x) return x:matmul(x:t()), #x end\nreturn M\n";
  }
  Runtime rt;
  Ref m = rt.run_file(path, {int64_t(7)})[0];
  std::remove(path.c_str());
  EXPECT_EQ(m["n"].integer(), 7);
  EXPECT_TRUE(m["forward"].is_function());
  int64_t ids[4] = {1, 2, 3, 4};
  tc::Tensor x = from_host(ids, {2, 2}, tc::DType::Int64);
  Results r = m["forward"](x);
  EXPECT_EQ(r[1].integer(), 2);
  tc::Value v = r[0].value();
  ASSERT_TRUE(v.is_tensor());
  int64_t out[4];
  to_host(v.tensor(), out, sizeof out);
  EXPECT_EQ(out[0], 5);   // 1*1 + 2*2
  EXPECT_EQ(out[3], 25);  // 3*3 + 4*4
  EXPECT_TRUE(m["missing"].is_nil());
}

TEST(Embedding, GlobalsAndValues) {
  Runtime rt;
  EXPECT_EQ(rt.global("string.format")("%d-%s", int64_t(5), "x")[0].string(), "5-x");
  rt.set_global("answer", int64_t(42));
  EXPECT_EQ(rt.run_string("return answer + 1")[0].integer(), 43);
  Results r = rt.run_string("return {1, 2, 3}, {1.5, 2}, true, nil");
  EXPECT_EQ(r[0].value().ints(), (tc::IntList{1, 2, 3}));
  EXPECT_EQ(r[1].value().floats(), (tc::FloatList{1.5, 2}));
  EXPECT_TRUE(r[2].boolean());
  EXPECT_TRUE(r[3].is_nil());
  EXPECT_EQ(r[0].type_name(), "table");
  EXPECT_THROW(r[0].tensor(), tc::Error);
  EXPECT_THROW(r[2].number(), tc::Error);
  // A Ref can be passed back to Lua.
  rt.run_string("function len(t) return #t end");
  EXPECT_EQ(rt.global("len")(r[0])[0].integer(), 3);
}

TEST(Embedding, CppFunctionsCallableFromLua) {
  Runtime rt;
  rt.register_function("host_add", [](const Values& a) -> Values {
    return {a.at(0).to_double() + a.at(1).to_double(), std::string("sum")};
  });
  rt.register_function("host_numel", [](const Values& a) -> Values {
    return {a.at(0).tensor().numel()};
  });
  Results r = rt.run_string("local s, w = host_add(1, 2.5)\nreturn s, w, host_numel(require('tc').ones(2, 3))");
  EXPECT_EQ(r[0].number(), 3.5);
  EXPECT_EQ(r[1].string(), "sum");
  EXPECT_EQ(r[2].integer(), 6);
}

TEST(Embedding, CppErrorsBecomeLuaErrorsOfTheirKind) {
  Runtime rt;
  rt.register_function("host_fail", [](const Values&) -> Values {
    TC_FAIL(ShapeError, "host says the shapes are wrong");
  });
  Results r = rt.run_string(
      "local ok, e = pcall(host_fail)\nreturn ok, e.kind, tostring(e)", "=check");
  EXPECT_FALSE(r[0].boolean());
  EXPECT_EQ(r[1].string(), "ShapeError");
  EXPECT_EQ(r[2].string(), "check:1: host says the shapes are wrong");
  try {
    rt.run_string("\nhost_fail()", "=direct");
    FAIL() << "expected a LuaError";
  } catch (const LuaError& e) {
    EXPECT_EQ(e.kind(), "ShapeError");
    EXPECT_STREQ(e.what(), "direct:2: host says the shapes are wrong");
  }
}

TEST(Embedding, LuaErrorsAreExceptionsWithMessageAndTraceback) {
  Runtime rt;
  try {
    rt.run_string("local tc = require 'tc'\nlocal function f()\n  return tc.ones(2, 3):matmul(tc.ones(2, 3))\nend\nf()",
                  "=model");
    FAIL() << "expected a LuaError";
  } catch (const LuaError& e) {
    EXPECT_STREQ(e.what(), "model:3: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");
    EXPECT_EQ(e.kind(), "ShapeError");
    EXPECT_NE(e.traceback().find("stack traceback:"), std::string::npos);
    EXPECT_NE(e.traceback().find("model:5: in main chunk"), std::string::npos) << e.traceback();
  }
  try {
    rt.run_string("error('plain')", "=p");
    FAIL();
  } catch (const LuaError& e) {
    EXPECT_STREQ(e.what(), "p:1: plain");
    EXPECT_EQ(e.kind(), "");
  }
  EXPECT_THROW(rt.run_string("this is not lua"), LuaError);
  EXPECT_THROW(rt.run_file("/nonexistent/file.lua"), LuaError);
  EXPECT_THROW(rt.global("no_such_function")(), LuaError);
  // The runtime stays usable after errors.
  EXPECT_EQ(rt.run_string("return 1 + 1")[0].integer(), 2);
}

TEST(Embedding, RefsKeepTheStateAlive) {
  Ref f = [] {
    Runtime rt;
    return rt.run_string("return function(x) return x * 3 end")[0];
  }();
  EXPECT_EQ(f(int64_t(2))[0].integer(), 6);
}

TEST(Embedding, ExampleProgramRuns) {
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  std::filesystem::path example = exe.parent_path().parent_path() / "embed_example";  // build/tests/.. = build
  ASSERT_TRUE(std::filesystem::exists(example)) << example << " is missing: build the embed_example target";
  std::string cmd = example.string() + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

// A Runtime alone has no compiler (tc/vm/compiler.h installs it): tc.compile returns the function
// unchanged and says so on stderr, once, naming the host and what to call.
TEST(Embedding, CompileWithoutTheCompilerSaysSoOnce) {
  Runtime rt("myhost");
  testing::internal::CaptureStderr();
  rt.run_string(
      "local tc = require 'tc'\nlocal f = function(x) return x + 1 end\n"
      "assert(tc.compile(f) == f)\nassert(tc.compile(f, {fullgraph = true}) == f)\n"
      "assert(tc.compiler.stats().backend_compiles == 0)");
  const std::string err = testing::internal::GetCapturedStderr();
  const size_t at = err.find("tc: this program (myhost) embeds tc without its compiler");
  EXPECT_NE(at, std::string::npos) << err;
  EXPECT_NE(err.find("tc::vm::install_compiler"), std::string::npos) << err;
  EXPECT_EQ(err.find("tc: this program", at + 1), std::string::npos) << "said twice: " << err;
}

// tc.export and tc.aot.load in such a program name what to call, not "run with tcrun" (stock
// lua5.4's advice).
TEST(Embedding, ExportWithoutTheCompilerNamesInstallCompiler) {
  Runtime rt("myhost");
  Results r = rt.run_string(
      "local tc = require 'tc'\n"
      "local ok, e = pcall(tc.export, function(x) return x + 1 end, {tc.ones(2)})\n"
      "local ok2, e2 = pcall(tc.aot.load, 'missing.tcpkg')\n"
      "return ok, e.kind, e.message, ok2, e2.message");
  EXPECT_FALSE(r[0].boolean());
  EXPECT_EQ(r[1].string(), "CompileError");
  const std::string msg = r[2].string();
  EXPECT_NE(msg.find("this program (myhost) embeds tc without"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tc::vm::install_compiler"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("tcrun"), std::string::npos) << msg;
  EXPECT_FALSE(r[3].boolean());
  EXPECT_NE(r[4].string().find("tc::vm::install_compiler"), std::string::npos) << r[4].string();
}
