// The main of the GoogleTest programs of tests/ that have none of their own: GoogleTest's, with
// the exit code of gtest_exit_code.h (77 when every test that ran was skipped).
#include "gtest_exit_code.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return gtest_exit_code(RUN_ALL_TESTS());
}
