// Fuzzing the reader: truncated and bit-flipped dumps give clean BytecodeErrors, never crashes;
// whatever still parses can be printed, verified and analysed without crashing either.
#include <gtest/gtest.h>

#include <random>

#include "analysis.h"
#include "corpus_files.h"
#include "dump.h"
#include "listing.h"
#include "proto.h"
#include "verifier.h"

namespace tc::vm {
namespace {

// Parse, then exercise everything downstream on what parsed. Returns true if it parsed.
bool survive(const std::string& bytes) {
  Proto p;
  try {
    p = read_chunk(bytes);
  } catch (const BytecodeError&) {
    return false;
  }
  (void)listing(p);
  std::vector<VerifyIssue> issues = verify(p);
  if (issues.empty()) {
    Analysis a = analyze(p);
    (void)resume_points(p);
    (void)a;
  }
  return true;
}

std::vector<std::string> small_corpus() {
  std::vector<std::string> out;
  for (const std::string& file : testing::lua_files(std::string(TC_SOURCE_DIR) + "/tests/vm/corpus"))
    out.push_back(load_and_dump_file(file.c_str()));
  return out;
}

TEST(ReaderSurvivesCorruptedChunks, EveryTruncationIsACleanError) {
  for (const std::string& bytes : small_corpus()) {
    ASSERT_TRUE(survive(bytes));
    for (size_t n = 0; n < bytes.size(); n++) {
      try {
        read_chunk(bytes.substr(0, n));
        FAIL() << "a chunk truncated to " << n << " bytes was accepted";
      } catch (const BytecodeError& e) {
        ASSERT_NE(std::string(e.what()).find("bad binary chunk"), std::string::npos);
      }
    }
  }
}

// A fixed amount of work, not a time limit: the same 3000 mutated chunks on every machine and
// under sanitizers (about 2400 of them parse and go through listing, verifier and analysis).
TEST(ReaderSurvivesCorruptedChunks, BitFlipsNeverCrash) {
  std::mt19937 rng(20240521);  // deterministic
  const int kRoundsPerChunk = 750;
  int parsed = 0, rejected = 0;
  for (const std::string& original : small_corpus()) {
    for (int round = 0; round < kRoundsPerChunk; round++) {
      std::string bytes = original;
      int flips = 1 + int(rng() % 3);
      for (int i = 0; i < flips; i++) bytes[rng() % bytes.size()] ^= char(1u << (rng() % 8));
      (survive(bytes) ? parsed : rejected)++;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(parsed, 0) << "no mutated chunk parsed: the verifier and analyses were not exercised";
}

TEST(ReaderSurvivesCorruptedChunks, HeaderErrorsNameTheProblem) {
  std::string bytes = small_corpus()[0];
  auto message = [](std::string b) {
    try {
      read_chunk(b);
    } catch (const BytecodeError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string v = bytes;
  v[4] = 0x53;
  EXPECT_NE(message(v).find("version mismatch"), std::string::npos);
  std::string sig = bytes;
  sig[1] = 'X';
  EXPECT_NE(message(sig).find("not a binary chunk"), std::string::npos);
  std::string num = bytes;
  num[23] ^= 1;
  EXPECT_NE(message(num).find("float format mismatch"), std::string::npos);
  EXPECT_NE(message(bytes + "x").find("trailing bytes"), std::string::npos);
  std::string huge = bytes.substr(0, 33) + std::string("\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x80", 11);
  EXPECT_NE(message(huge).find("bad binary chunk"), std::string::npos);
}

}  // namespace
}  // namespace tc::vm
