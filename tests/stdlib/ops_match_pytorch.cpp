// Every op against PyTorch: runs the cases of tests/fixtures/*.json (written by the gen_*.py
// generators with PyTorch 1.13) through bind+call on the CPU and compares shapes, dtypes and
// values (the runner is tests/fixture_cases.h, shared with the CUDA conformance test).
#include <gtest/gtest.h>

#include "../fixture_cases.h"

using namespace tc;

namespace {

class OpsMatchPytorch : public testing::TestWithParam<std::string> {};

TEST_P(OpsMatchPytorch, AllCasesOfGroup) {
  std::ifstream f(GetParam());
  fixture::json j = fixture::json::parse(f);
  int passed = 0, failed = 0;
  for (auto& c : j["cases"]) {
    std::string err = fixture::run_case(c, Device{}, true);
    if (err.empty()) {
      passed++;
    } else {
      failed++;
      ADD_FAILURE() << c["name"].get<std::string>() << ": " << err;
    }
  }
  printf("%s: %d passed, %d failed\n", GetParam().c_str(), passed, failed);
  EXPECT_GT(passed, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpsMatchPytorch, testing::ValuesIn(fixture::fixture_files()),
                         [](const auto& info) { return std::filesystem::path(info.param).stem().string(); });

}  // namespace
