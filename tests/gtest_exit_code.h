// The exit code of a GoogleTest program of tests/: RUN_ALL_TESTS()'s, except 77 when no test
// passed and some were skipped (GTEST_SKIP: no GPU, no NVRTC), which ctest reports as Skipped
// (SKIP_RETURN_CODE in tests/CMakeLists.txt) instead of Passed. A failure still exits 1.
#pragma once

#include <gtest/gtest.h>

inline int gtest_exit_code(int run_all_tests) {
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (run_all_tests == 0 && u.successful_test_count() == 0 && u.skipped_test_count() > 0) return 77;
  return run_all_tests;
}
