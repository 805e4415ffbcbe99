// Reading then writing a lua_dump chunk gives the same bytes, stripped or not, and Lua loads it.
#include <gtest/gtest.h>

#include <lua.hpp>

#include "corpus_files.h"
#include "dump.h"
#include "proto.h"

namespace tc::vm {
namespace {

TEST(DumpReadWriteIsIdentity, CorpusRoundTripsByteForByte) {
  for (const std::string& file : testing::corpus()) {
    SCOPED_TRACE(file);
    std::string bytes = load_and_dump_file(file.c_str());
    EXPECT_EQ(write_chunk(read_chunk(bytes)), bytes);
  }
}

TEST(DumpReadWriteIsIdentity, StrippedDumpsRoundTripAndLoad) {
  lua_State* L = luaL_newstate();
  for (const std::string& file : testing::corpus()) {
    SCOPED_TRACE(file);
    ASSERT_EQ(luaL_loadfile(L, file.c_str()), LUA_OK);
    std::string bytes = dump_function(L, true);
    lua_pop(L, 1);
    std::string again = write_chunk(read_chunk(bytes));
    EXPECT_EQ(again, bytes);
    load_binary(L, again, "=stripped");
    lua_pop(L, 1);
  }
  lua_close(L);
}

TEST(DumpReadWriteIsIdentity, ReEncodedLinesEqualTheCompilersOwn) {
  for (const std::string& file : testing::corpus()) {
    SCOPED_TRACE(file);
    Proto f = read_chunk(load_and_dump_file(file.c_str()));
    Proto g = f;
    encode_lines(g, decode_lines(f));
    EXPECT_EQ(g.lineinfo, f.lineinfo);
    ASSERT_EQ(g.abslineinfo.size(), f.abslineinfo.size());
  }
}

}  // namespace
}  // namespace tc::vm
