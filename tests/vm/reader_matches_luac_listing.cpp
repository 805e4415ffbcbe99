// The reader and printer reproduce `luac5.4 -l -l` listings exactly, and the corpus uses every opcode.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "corpus_files.h"
#include "dump.h"
#include "opcodes.h"
#include "proto.h"
#include "tc/vm/bytecode.h"

namespace tc::vm {
namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::string without_addresses(const std::string& s) {
  static const std::regex address("0x[0-9a-f]+");
  return std::regex_replace(s, address, "ADDR");
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void collect_opcodes(const Proto& f, std::set<int>& seen) {
  for (uint32_t w : f.code) seen.insert(w & 0x7F);
  for (const Proto& child : f.protos) collect_opcodes(child, seen);
}

TEST(ReaderMatchesLuacListing, EveryCorpusFileIsPrintedExactlyAsLuacPrintsIt) {
  for (const std::string& file : testing::corpus()) {
    SCOPED_TRACE(file);
    std::string expected = without_addresses(run("luac5.4 -l -l -p '" + file + "'"));
    ASSERT_FALSE(expected.empty()) << "luac5.4 printed nothing";
    std::ostringstream mine;
    ASSERT_EQ(print_bytecode(file.c_str(), mine), 0);
    std::vector<std::string> want = split_lines(expected), got = split_lines(without_addresses(mine.str()));
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); i++) ASSERT_EQ(want[i], got[i]) << "line " << i + 1;
  }
}

TEST(ReaderMatchesLuacListing, CorpusCoversAll83Opcodes) {
  std::set<int> seen;
  for (const std::string& file : testing::corpus()) collect_opcodes(read_chunk(load_and_dump_file(file.c_str())), seen);
  for (int op = 0; op < kNumOpcodes; op++)
    EXPECT_TRUE(seen.count(op)) << "no corpus file uses " << op_info(OpCode(op)).name;
}

TEST(ReaderMatchesLuacListing, AbsoluteLinesAgreeWithLuacForLongFunctions) {
  // 300 instructions on lines far apart: forces abslineinfo entries (delta >= 128, 128-run rule).
  std::string path = testing::private_temp_path("lines.lua");
  {
    std::ofstream out(path);
    out << "local x = 0\n";
    for (int i = 0; i < 300; i++) out << "x = x + " << i << (i % 7 == 0 ? std::string(200, '\n') : "\n");
    out << "return x\n";
  }
  std::ostringstream mine;
  ASSERT_EQ(print_bytecode(path.c_str(), mine), 0);
  EXPECT_EQ(without_addresses(run("luac5.4 -l -l -p '" + path + "'")), without_addresses(mine.str()));
}

TEST(ReaderMatchesLuacListing, MissingFileIsAClearError) {
  std::ostringstream out;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(print_bytecode("/nonexistent/file.lua", out), 1);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
}

}  // namespace
}  // namespace tc::vm
