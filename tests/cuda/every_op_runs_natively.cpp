// Every conformance case (tests/fixtures/*.json) runs on CUDA without the host fallback: the
// dispatcher's fallback counter must not move for any case, except the cases that expect an error
// (those may let the CPU kernel diagnose it) and the per-op exceptions listed in kAllowed (each
// with its reason). With a GPU the cases really run; without one, in compile-only mode (NVRTC
// alone), which takes the same dispatch decisions, so CI checks this on machines without a GPU.
// Compile-only runs leave out pointwise.json: its ~700 programs take minutes to compile (the
// nvrtc_compiles_all_kernels test compiles them already) and the pointwise group has no
// fallback case; GPU runs check it too.
#include <gtest/gtest.h>

#include <set>

#include "../fixture_cases.h"
#include "tc/cuda.h"

using namespace tc;

namespace {

// Ops allowed to take the host fallback in some fixture case, and why. Keep it empty.
const std::set<std::string> kAllowed = {};

bool nvrtc_ok() {
  cuda::set_compile_only(true);
  bool ok = true;
  try {
    call1(Op::neg, {Tensor::empty({4}, DType::Float32, Device{DeviceType::CUDA, 0})});
  } catch (const Error& e) {
    ok = e.kind() != ErrorKind::DeviceError;
  }
  cuda::set_compile_only(false);
  return ok;
}

class EveryOpRunsNatively : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    gpu_ = cuda::is_available();
    if (!gpu_ && !nvrtc_ok()) GTEST_SKIP() << "neither a GPU nor NVRTC";
    if (!gpu_) cuda::set_compile_only(true);
  }
  void TearDown() override { cuda::set_compile_only(false); }
  bool gpu_ = false;
};

TEST_P(EveryOpRunsNatively, NoCaseTakesTheHostFallback) {
  if (!gpu_ && GetParam().ends_with("/pointwise.json")) GTEST_SKIP() << "compile-only: see the file comment";
  std::ifstream f(GetParam());
  auto j = fixture::json::parse(f);
  int cases = 0;
  std::vector<std::string> fell_back;
  for (auto& c : j["cases"]) {
    int64_t before = cuda::fallback_op_count();
    fixture::run_case(c, Device{DeviceType::CUDA, 0}, false);
    cases++;
    if (cuda::fallback_op_count() == before || c.contains("error")) continue;
    std::string op = c["op"];
    if (!kAllowed.count(op)) fell_back.push_back(op + ": " + c["name"].get<std::string>());
  }
  printf("%s (%s): %d cases, %zu took the host fallback\n", GetParam().c_str(), gpu_ ? "GPU" : "compile-only", cases,
         fell_back.size());
  for (auto& s : fell_back) ADD_FAILURE() << "host fallback in " << s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EveryOpRunsNatively, testing::ValuesIn(fixture::fixture_files()),
                         [](const auto& info) { return std::filesystem::path(info.param).stem().string(); });

}  // namespace
