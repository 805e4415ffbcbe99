// Every legal resume pc of every split-corpus function resumes to the same results, errors and
// side effects as an uninterrupted run (tc::vm::split_check over tests/vm/split/*.lua).
#include <gtest/gtest.h>

#include <lua.hpp>

#include <iostream>
#include <sstream>

#include "corpus_files.h"
#include "tc/vm/bytecode.h"

namespace tc::vm {
namespace {

int count_functions(const std::string& report) {
  int n = 0;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("case ", 0) == 0) n++;
  return n;
}

TEST(SplitCheckPassesOnCorpus, EveryFileAllPointsPass) {
  auto files = testing::lua_files(std::string(TC_SOURCE_DIR) + "/tests/vm/split");
  ASSERT_FALSE(files.empty());
  int functions = 0;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    lua_State* L = luaL_newstate();
    luaL_openlibs(L);
    std::ostringstream out;
    int rc = split_check(L, file.c_str(), out);
    lua_close(L);
    functions += count_functions(out.str());
    std::cout << file << "\n" << out.str();
    EXPECT_EQ(rc, 0) << out.str();
    EXPECT_NE(out.str().find(" passed, 0 failed\n"), std::string::npos);
  }
  EXPECT_GE(functions, 60) << "the split corpus should exercise at least 60 functions";
}

}  // namespace
}  // namespace tc::vm
