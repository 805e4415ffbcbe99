// CPU-only check of CUDA code generation: in compile-only mode every op of every fixture case
// runs through the CUDA dispatch path with "cuda" tensors in host memory; each kernel program it
// needs is generated and compiled by NVRTC for sm_90 (nothing is launched). A generated source
// that NVRTC rejects fails here, on machines without a GPU. Skips only without NVRTC.
#include <gtest/gtest.h>

#include "../fixture_cases.h"
#include "tc/cuda.h"

using namespace tc;

namespace {

class NvrtcCompilesAllKernels : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_nvrtc_ok()) GTEST_SKIP() << "NVRTC cannot be loaded";
    cuda::set_compile_only(true);
  }
  void TearDown() override { cuda::set_compile_only(false); }
  static bool cuda_nvrtc_ok() {
    // Compile-only mode needs NVRTC alone: try a trivial program.
    cuda::set_compile_only(true);
    bool ok = true;
    try {
      Tensor x = Tensor::empty({4}, DType::Float32, Device{DeviceType::CUDA, 0});
      call1(Op::neg, {x});
    } catch (const Error& e) {
      ok = e.kind() != ErrorKind::DeviceError;
      if (!ok) printf("skip: %s\n", e.what());
    }
    cuda::set_compile_only(false);
    return ok;
  }
};

TEST_P(NvrtcCompilesAllKernels, EveryCaseOfGroup) {
  std::ifstream f(GetParam());
  auto j = fixture::json::parse(f);
  int ran = 0, raised = 0;
  int64_t before = cuda::programs_compiled();
  for (auto& c : j["cases"]) {
    std::string kind;
    std::string err = fixture::run_case(c, Device{DeviceType::CUDA, 0}, false, &kind);
    if (kind == "CompileError") ADD_FAILURE() << c["name"].get<std::string>() << ": " << err.substr(0, 4000);
    if (err.empty()) ran++;
    else raised++;
  }
  printf("%s: %d cases ran, %d raised (values are not checked here), %lld NVRTC programs compiled\n",
         GetParam().c_str(), ran, raised, (long long)(cuda::programs_compiled() - before));
  EXPECT_GT(ran, 0);
}

// The fused attention kernels (stdlib/cuda/attention.cpp: tensor cores for head dims that are
// multiples of 8 up to 64, CUDA cores for all) for the head dims models use, GPT-2's 64 among
// them: in compile-only mode both kernels of a head dim are built; NVRTC rejecting one raises.
TEST_F(NvrtcCompilesAllKernels, AttentionKernelsOfCommonHeadDims) {
  const Device gpu{DeviceType::CUDA, 0};
  for (int64_t e : {16, 32, 40, 64, 80, 96, 128}) {
    Tensor q = Tensor::empty({2, 3, 70, e}, DType::Float32, gpu);
    EXPECT_NO_THROW(call1(Op::scaled_dot_product_attention, {q, q, q}, {{"is_causal", true}})) << "E " << e;
  }
}

// The training kernels beyond the fixtures' shapes: batch_norm and its backward in each form
// (stdlib/cuda/batch_norm.cpp: one block per channel holding 1, 2, 4, 8 or 16 elements a thread
// in registers, from 32 to 1024 threads; a channel split over several blocks),
// max_pool2d's backward (two kernels), Adam's multi-tensor step; in every floating dtype.
TEST_F(NvrtcCompilesAllKernels, TrainingKernelsOfEveryBlockSize) {
  const Device gpu{DeviceType::CUDA, 0};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (Shape s : {Shape{1, 4, 5, 5}, Shape{2, 4, 4, 5}, Shape{4, 6, 5, 5}, Shape{16, 128, 4, 4}, Shape{4, 96, 16, 16},
                    Shape{16, 128, 16, 16}, Shape{16, 128, 32, 32}, Shape{16, 8, 64, 64}}) {
      Tensor x = Tensor::empty(s, dt, gpu), w = Tensor::empty({s[1]}, dt, gpu);
      EXPECT_NO_THROW(call1(Op::batch_norm, {x, w, w, w, w, true, 0.1, 1e-5})) << shape_string(s);
      EXPECT_NO_THROW(call(Op::_batch_norm_backward, bind(Op::_batch_norm_backward, {x, x, w, w, w, true, 1e-5}, {})))
          << shape_string(s);
    }
    Tensor x = Tensor::empty({2, 3, 9, 9}, dt, gpu), g = Tensor::empty({2, 3, 5, 5}, dt, gpu);
    EXPECT_NO_THROW(call1(Op::_max_pool2d_backward, {g, x, IntList{3, 3}, IntList{2, 2}, IntList{1, 1}}));
    Tensor p = Tensor::empty({5000}, dt, gpu), step = Tensor::empty({}, DType::Float32, gpu);
    EXPECT_NO_THROW(call1(Op::_fused_adam_, {TensorList{p}, TensorList{p}, TensorList{p}, TensorList{p}, TensorList{}, step},
                          {{"lr", 0.01}}));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NvrtcCompilesAllKernels, testing::ValuesIn(fixture::fixture_files()),
                         [](const auto& info) { return std::filesystem::path(info.param).stem().string(); });

}  // namespace
