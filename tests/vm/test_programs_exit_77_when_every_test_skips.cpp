// The GoogleTest programs of tests/ exit 77 when every test that ran was skipped (GTEST_SKIP, no
// GPU), which ctest shows as Skipped (SKIP_RETURN_CODE), not Passed; 0 when one passed; 1 when one
// failed. This program runs itself on one filter per case and reads its exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace {

TEST(SkipExit, SkipsOnPurpose) { GTEST_SKIP() << "skipped on purpose"; }

TEST(SkipExit, FailsWhenAsked) {
  if (std::getenv("TC_SKIP_EXIT_FAIL")) FAIL() << "failed on purpose";
}

int exit_status(const std::string& env, const std::string& filter) {
  std::string cmd = env + " /proc/" + std::to_string(getpid()) + "/exe --gtest_filter=" + filter + " >/dev/null 2>&1";
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(SkipExit, StatusSaysSkippedPassedOrFailed) {
  EXPECT_EQ(exit_status("", "SkipExit.SkipsOnPurpose"), 77);
  EXPECT_EQ(exit_status("", "SkipExit.SkipsOnPurpose:SkipExit.FailsWhenAsked"), 0);
  EXPECT_EQ(exit_status("TC_SKIP_EXIT_FAIL=1", "SkipExit.SkipsOnPurpose:SkipExit.FailsWhenAsked"), 1);
}

}  // namespace
