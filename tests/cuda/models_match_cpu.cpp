// Every model of scripts/models runs on device="cuda" and matches its CPU run: each model is built
// twice from the same seed (parameters drawn on the device itself: the Philox stream is the same)
// with tc.set_default_device("cpu") and then "cuda", run in eval mode without grad, and the CUDA
// output is compared with the CPU output (|a - b| <= 1e-3 * max(1, max |a|)), once with the
// convolutions on cuDNN (when present) and once on the im2col + cuBLAS fallback
// (TC_CUDNN_DISABLE=1). Drives Lua through the embedding API. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tc/cuda.h"
#include "tc/vm/runtime.h"

using namespace tc;

namespace {

const char* kScript = R"LUA(
local tc = require "tc"
specs = dofile("tests/model_specs.lua")
function run(name, device)
  tc.set_default_device(device)
  tc.manual_seed(0)
  local s = specs[name]
  local model = s[1]()
  model:eval()
  local x = s[2]()
  local _ <close> = tc.no_grad()
  local y = model(x)
  tc.set_default_device("cpu")
  local dev = tostring(y.device)
  return y:cpu(), dev
end
function compare(a, b)
  local scale = math.max(1, a:abs():max():item())
  return (a - b):abs():max():item() / scale
end
)LUA";

class ModelsMatchCpu : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
};

TEST_P(ModelsMatchCpu, Forward) {
  vm::Runtime rt;
  rt.run_string(kScript, "=models_match_cpu");
  vm::Results cpu = rt.global("run")(GetParam(), std::string("cpu"));
  int64_t native0 = cuda::native_op_count(), fallback0 = cuda::fallback_op_count();
  vm::Results gpu = rt.global("run")(GetParam(), std::string("cuda"));
  std::string impl = cuda::last_conv_impl();
  int64_t native = cuda::native_op_count() - native0, fallback = cuda::fallback_op_count() - fallback0;
  setenv("TC_CUDNN_DISABLE", "1", 1);
  vm::Results gpu2 = rt.global("run")(GetParam(), std::string("cuda"));
  std::string impl2 = cuda::last_conv_impl();
  unsetenv("TC_CUDNN_DISABLE");
  double err2 = rt.global("compare")(cpu[0], gpu2[0])[0].number();
  EXPECT_NE(gpu[1].string().find("cuda"), std::string::npos) << "output on " << gpu[1].string();
  Tensor a = cpu[0].tensor(), b = gpu[0].tensor();
  ASSERT_EQ(a.sizes(), b.sizes());
  double err = rt.global("compare")(cpu[0], gpu[0])[0].number();
  printf("%s: cuda vs cpu max relative error %.3g (last conv: %s), %.3g with TC_CUDNN_DISABLE=1 (last conv: %s); ops "
         "native %lld, host fallback %lld\n",
         GetParam().c_str(), err, impl.c_str(), err2, impl2.c_str(), (long long)native, (long long)fallback);
  EXPECT_LE(err, 1e-3);
  EXPECT_LE(err2, 1e-3);
  EXPECT_NE(impl2, "cudnn");
}

INSTANTIATE_TEST_SUITE_P(Models, ModelsMatchCpu,
                         testing::Values("seed_64_layers", "my_module", "resnet18", "resnet50", "densenet121",
                                         "inception_v3", "gpt2"));

}  // namespace
