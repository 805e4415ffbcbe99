// Every legal resume pc of every split-corpus function resumes to the same results, errors and
// side effects as an uninterrupted run (tc::vm::split_check over tests/vm/split/*.lua).
#include <gtest/gtest.h>

#include <lua.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "corpus_files.h"
#include "tc/vm/bytecode.h"

namespace tc::vm {
namespace {

// Functions ("function <file:line>") with at least one pc split and passed.
void passed_functions(const std::string& report, std::set<std::string>& out) {
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    size_t name = line.find("function <"), end = line.find(">:");
    if (line.rfind("case ", 0) != 0 || name == std::string::npos || end == std::string::npos) continue;
    if (line.find(" 0 passed") != std::string::npos) continue;
    out.insert(line.substr(name, end + 1 - name));
  }
}

// Runs every corpus file; with `gc_stress`, the collector runs a step at nearly every allocation,
// so a value a split leaves where the collector counts registers as dead is lost every time
// instead of once in a while.
void check_corpus(bool gc_stress) {
  auto files = testing::lua_files(std::string(TC_SOURCE_DIR) + "/tests/vm/split");
  ASSERT_FALSE(files.empty());
  std::set<std::string> functions;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    lua_State* L = luaL_newstate();
    luaL_openlibs(L);
    if (gc_stress) lua_gc(L, LUA_GCINC, 1, 1000, 0);  // pause 1%, step multiplier 1000
    std::ostringstream out;
    int rc = split_check(L, file.c_str(), out);
    lua_close(L);
    passed_functions(out.str(), functions);
    std::cout << file << "\n" << out.str();
    EXPECT_EQ(rc, 0) << out.str();
    EXPECT_NE(out.str().find(" passed, 0 failed\n"), std::string::npos);
  }
  EXPECT_GE(functions.size(), 60u) << "the split corpus should exercise at least 60 functions";
}

TEST(SplitCheckPassesOnCorpus, EveryFileAllPointsPass) { check_corpus(false); }

TEST(SplitCheckPassesOnCorpus, EveryFileAllPointsPassWhileTheCollectorRunsConstantly) {
  check_corpus(true);
}

}  // namespace
}  // namespace tc::vm

namespace tc::vm {
namespace {

std::string check_source(const std::string& name, const std::string& source, int* rc) {
  std::string path = ::testing::TempDir() + name;
  {
    std::ofstream out(path);
    out << source;
  }
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  std::ostringstream out;
  *rc = split_check(L, path.c_str(), out);
  lua_close(L);
  return out.str();
}

TEST(SplitCheckPassesOnCorpus, DifferencesBetweenRunsAreReportedAsFailures) {
  // math.random draws differ between the uninterrupted and the split runs: every split fails.
  int rc = 0;
  std::string report = check_source("tc_split_random.lua",
                                    "local function f() local x = math.random() return x end\n"
                                    "return {{f}}\n",
                                    &rc);
  EXPECT_EQ(rc, 1) << report;
  EXPECT_EQ(report.find(" 0 failed\n"), std::string::npos) << report;
  EXPECT_NE(report.find("expected"), std::string::npos) << report;
}

TEST(SplitCheckPassesOnCorpus, BadCasesFileIsAClearFailure) {
  int rc = 0;
  std::string report = check_source("tc_split_bad.lua", "return 42\n", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(report.find("must return a table of cases"), std::string::npos) << report;
  EXPECT_NE(report.find("0 passed, 1 failed"), std::string::npos) << report;
}

}  // namespace
}  // namespace tc::vm
