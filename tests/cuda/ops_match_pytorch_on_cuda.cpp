// The conformance harness on the GPU: every case of tests/fixtures/*.json (PyTorch's values) runs
// with its tensors moved to cuda:0 (creation ops get device="cuda") and must match like on the
// CPU; results must come back on the device. Skips without a usable GPU.
#include <gtest/gtest.h>

#include "../fixture_cases.h"
#include "tc/cuda.h"

using namespace tc;

namespace {

class OpsMatchPytorchOnCuda : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

TEST_P(OpsMatchPytorchOnCuda, AllCasesOfGroup) {
  std::ifstream f(GetParam());
  auto j = fixture::json::parse(f);
  int passed = 0, failed = 0;
  int64_t native0 = cuda::native_op_count(), fallback0 = cuda::fallback_op_count();
  for (auto& c : j["cases"]) {
    std::string err = fixture::run_case(c, Device{DeviceType::CUDA, 0}, true);
    if (err.empty()) {
      passed++;
    } else {
      failed++;
      ADD_FAILURE() << c["name"].get<std::string>() << ": " << err.substr(0, 2000);
    }
  }
  printf("%s on %s: %d passed, %d failed; ops native %lld, host fallback %lld\n", GetParam().c_str(),
         cuda::device_name().c_str(), passed, failed, (long long)(cuda::native_op_count() - native0),
         (long long)(cuda::fallback_op_count() - fallback0));
  EXPECT_GT(passed, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpsMatchPytorchOnCuda, testing::ValuesIn(fixture::fixture_files()),
                         [](const auto& info) { return std::filesystem::path(info.param).stem().string(); });

}  // namespace
