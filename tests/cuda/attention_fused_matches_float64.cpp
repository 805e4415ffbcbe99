// scaled_dot_product_attention on CUDA through the fused kernel (stdlib/cuda/attention.cpp)
// equals the float64 CPU result to float32 rounding: causal and not, 3-D and 4-D, queries and
// keys of different lengths (partial tiles), head dims 8 to 128 (the tensor-core kernel's and the
// CUDA-core kernel's), and q/k/v as strided head views of one projection (GPT-2's split + view +
// transpose, which the kernels read in place; rows aligned to 16 bytes or not); the path with a
// mask (composed of native ops) still agrees. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "tc/config.h"
#include "tc/cuda.h"
#include "tc/ops.h"
#include "compare_to_cpu.h"

using namespace tc;
using tc::test::convert;
using tc::test::max_rel_err;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

class FusedAttention : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
  }
  std::mt19937 rng{7};
};

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Value& mask = Value()) {
  return call1(Op::scaled_dot_product_attention, {q, k, v}, {{"attn_mask", mask}, {"is_causal", causal}});
}

}  // namespace

TEST_F(FusedAttention, EqualsFloat64) {
  set_float32_matmul_precision("high");  // the composed path may use TF32; the fused kernel never does
  struct Case {
    Shape q, k;
  };
  // head dims that are multiples of 8 up to 64 run on tensor cores (sm_80+), the others on CUDA cores
  for (Case c : {Case{{2, 3, 70, 64}, {2, 3, 70, 64}}, Case{{4, 33, 16}, {4, 47, 16}}, Case{{1, 2, 130, 80}, {1, 2, 65, 80}},
                 Case{{2, 1, 64, 128}, {2, 1, 200, 128}}, Case{{3, 5, 1, 64}, {3, 5, 9, 64}},
                 Case{{2, 2, 97, 40}, {2, 2, 97, 40}}, Case{{1, 3, 33, 8}, {1, 3, 129, 8}}, Case{{2, 2, 200, 56}, {2, 2, 77, 56}},
                 Case{{1, 1, 256, 12}, {1, 1, 256, 12}}}) {
    for (bool causal : {false, true}) {
      Tensor q = tc::test::randn_f64(c.q, rng), k = tc::test::randn_f64(c.k, rng), v = tc::test::randn_f64(c.k, rng);
      Tensor want = sdpa(q, k, v, causal);
      Tensor got = sdpa(convert(q, DType::Float32, kGpu), convert(k, DType::Float32, kGpu),
                        convert(v, DType::Float32, kGpu), causal);
      EXPECT_LT(max_rel_err(want, got), 2e-5) << "q " << c.q.size() << "-D L " << c.q[c.q.size() - 2] << " S "
                                              << c.k[c.k.size() - 2] << " E " << c.q.back() << " causal " << causal;
    }
  }
}

// also with rows that are not 16-byte aligned (one float of padding: the kernels' scalar loads)
TEST_F(FusedAttention, ReadsStridedHeadViewsInPlace) {
  const int64_t B = 2, T = 96, H = 4;
  for (int64_t E : {64, 80})
    for (int64_t pad : {0, 1}) {
      const int64_t C = H * E;
      Tensor qkv = tc::test::randn_f64({B, T, 3 * C + pad}, rng);
      auto heads = [&](const Tensor& t, int64_t i) {  // views of the projection, no copy
        Tensor part = call1(Op::narrow, {t, (int64_t)3, i * C + 1 + pad, C});  // dims and starts are 1-based
        return call1(Op::transpose, {call1(Op::view, {part, Shape{B, T, H, E}}), (int64_t)2, (int64_t)3});
      };
      Tensor g = convert(qkv, DType::Float32, kGpu);
      for (bool causal : {false, true}) {
        Tensor want = sdpa(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), causal);
        Tensor got = sdpa(heads(g, 0), heads(g, 1), heads(g, 2), causal);
        EXPECT_LT(max_rel_err(want, got), 2e-5) << "E " << E << " pad " << pad << " causal " << causal;
      }
    }
}

TEST_F(FusedAttention, MaskedAttentionTakesTheComposedPath) {
  set_float32_matmul_precision("highest");
  Tensor q = tc::test::randn_f64({2, 3, 20, 16}, rng), k = tc::test::randn_f64({2, 3, 24, 16}, rng),
         v = tc::test::randn_f64({2, 3, 24, 16}, rng);
  Tensor mask = call1(Op::gt, {tc::test::randn_f64({20, 24}, rng), -1.0});
  Tensor want = sdpa(q, k, v, false, mask);
  Tensor got = sdpa(convert(q, DType::Float32, kGpu), convert(k, DType::Float32, kGpu), convert(v, DType::Float32, kGpu),
                    false, convert(mask, DType::Bool, kGpu));
  EXPECT_LT(max_rel_err(want, got), 2e-5);
  set_float32_matmul_precision("high");
}
