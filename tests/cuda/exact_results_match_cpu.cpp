// CUDA kernels whose results must equal the CPU's exactly do: sort/topk of long rows (radix
// path: ties, NaN, -0.0, descending, stable, any dim), nonzero and masked_select at every fill
// (none, all, random, empty, broadcast), multinomial (the same draws for the same seed, errors
// before any draw), scatter_add through the compare-and-swap add of 1- and 2-byte dtypes, and
// the integer products, convolutions and pools (wrapping arithmetic); none takes the host
// fallback. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tc/cuda.h"
#include "tc/ops.h"
#include "tc/random.h"

using namespace tc;

namespace {

const Device kCuda{DeviceType::CUDA, 0};

class ExactResultsMatchCpu : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::is_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
    fallbacks_ = cuda::fallback_op_count();
  }
  void TearDown() override {
    if (cuda::is_available()) {
      EXPECT_EQ(cuda::fallback_op_count(), fallbacks_) << "an op took the host fallback";
    }
  }
  int64_t fallbacks_ = 0;
};

Tensor to_cuda(const Tensor& t) {
  Tensor d = Tensor::empty(t.sizes(), t.dtype(), kCuda);
  d.copy_from(t);
  return d;
}

// Element-for-element equality (NaN equals NaN; -0.0 equals 0.0 only if `signed_zero` is false).
void expect_equal(const std::string& what, const Tensor& cpu, const Tensor& gpu) {
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  ASSERT_EQ(cpu.sizes(), gpu.sizes()) << what;
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  Tensor a = cpu.to(DType::Float64).contiguous(), b = Tensor::empty(gpu.sizes(), DType::Float64);
  b.copy_from(gpu);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); i++) {
    double x = a.data<double>()[i], y = b.data<double>()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y))) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.numel() << " differ, first at " << first;
}

void expect_same_op(const std::string& what, Op op, const Tensor& x, const std::vector<Value>& rest,
                    const std::vector<std::pair<std::string, Value>>& kw = {}) {
  Stack cpu_args{Value(x)}, gpu_args{Value(to_cuda(x))};
  for (auto& v : rest) {
    cpu_args.push_back(v);
    gpu_args.push_back(v.is_tensor() ? Value(to_cuda(v.tensor())) : v);
  }
  Stack c = call(op, bind(op, cpu_args, kw)), g = call(op, bind(op, gpu_args, kw));
  ASSERT_EQ(c.size(), g.size());
  for (size_t i = 0; i < c.size(); i++) expect_equal(what + " output " + std::to_string(i + 1), c[i].tensor(), g[i].tensor());
}

// n values from `distinct` levels (many ties), with NaN and signed zeros sprinkled in for floats.
Tensor tied(const Shape& shape, DType dt, int distinct) {
  manual_seed(7);
  Tensor r = call1(Op::randint, {(int64_t)0, (int64_t)distinct, Value(IntList(shape))});
  Tensor f = r.to(DType::Float64).contiguous();
  double* p = f.data<double>();
  for (int64_t i = 0; i < f.numel(); i++) {
    p[i] -= distinct / 2;
    if (is_floating(dt) && i % 97 == 5) p[i] = NAN;
    if (is_floating(dt) && i % 89 == 3) p[i] = i % 2 ? -0.0 : 0.0;
    if (is_floating(dt) && i % 101 == 7) p[i] = i % 2 ? INFINITY : -INFINITY;
  }
  if (dt == DType::UInt8) f = call1(Op::remainder, {f, 256.0});
  return f.to(dt);
}

TEST_F(ExactResultsMatchCpu, SortAndTopkOfLongRows) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                   DType::UInt8, DType::Bool}) {
    std::string n = dtype_name(dt);
    Tensor x = tied({100000}, dt, 1000);
    for (bool desc : {false, true}) {
      expect_same_op("sort 100k " + n + (desc ? " desc" : ""), Op::sort, x, {Value((int64_t)-1), Value(desc)});
      for (int64_t k : {(int64_t)1, (int64_t)77, (int64_t)100000})
        expect_same_op("topk 100k k=" + std::to_string(k) + " " + n, Op::topk, x, {Value(k)}, {{"largest", Value(desc)}});
    }
  }
  // several rows, along the first dim (a transposed layout) and the last; rows of 4097 (just past
  // the shared-memory sort) and of 5000 with two tiles of the radix sort
  Tensor y = tied({5000, 3}, DType::Float32, 50);
  expect_same_op("sort [5000,3] dim 1", Op::sort, y, {Value((int64_t)1), Value(false)});
  expect_same_op("sort [5000,3] dim 1 desc", Op::sort, y, {Value((int64_t)1), Value(true)});
  Tensor z = tied({3, 4097}, DType::Int64, 10);
  expect_same_op("sort [3,4097]", Op::sort, z, {Value((int64_t)2), Value(false)});
  expect_same_op("topk [3,4097] k=4097", Op::topk, z, {Value((int64_t)4097)}, {{"largest", Value(false)}});
  Tensor few = tied({1 << 20}, DType::Float32, 3);  // three values: ties dominate
  expect_same_op("sort 1M of 3 values", Op::sort, few, {Value((int64_t)-1), Value(true)});
  // 0-dim input: one element, index 1
  Tensor s = Tensor::scalar(2.5, DType::Float32);
  expect_same_op("sort 0-dim", Op::sort, s, {Value((int64_t)1), Value(false)});
  expect_same_op("topk 0-dim k=1", Op::topk, s, {Value((int64_t)1)});
  expect_same_op("topk 0-dim k=0", Op::topk, s, {Value((int64_t)0)});
}

TEST_F(ExactResultsMatchCpu, NonzeroAndMaskedSelectAtEveryFill) {
  for (DType dt : {DType::Float32, DType::Float16, DType::Int64, DType::UInt8, DType::Bool}) {
    std::string n = dtype_name(dt);
    Tensor zeros = call1(Op::zeros, {IntList{37, 3, 5}}, {{"dtype", Value(dt)}});
    Tensor ones = call1(Op::ones, {IntList{37, 3, 5}}, {{"dtype", Value(dt)}});
    Tensor mixed = tied({101, 2, 3, 7}, dt, 3);
    Tensor big = tied({3000001}, dt, 4);
    for (auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{
             {"none", zeros}, {"all", ones}, {"mixed", mixed}, {"3M", big}, {"empty", Tensor::empty({4, 0}, dt)},
             {"0-dim 1", Tensor::scalar(1.0).to(dt)}, {"0-dim 0", Tensor::scalar(0.0).to(dt)}}) {
      expect_same_op("nonzero " + name + " " + n, Op::nonzero, t, {});
      Tensor mask = call1(Op::ne, {tied(t.sizes(), DType::Int32, 2), 0});
      expect_same_op("masked_select " + name + " " + n, Op::masked_select, t, {Value(mask)});
    }
    // broadcasting: a row mask over a matrix, and a matrix mask over a row
    Tensor m = call1(Op::gt, {tied({7}, DType::Int32, 4), 0});
    expect_same_op("masked_select row mask " + n, Op::masked_select, tied({5, 7}, dt, 5), {Value(m)});
    Tensor mm = call1(Op::gt, {tied({5, 7}, DType::Int32, 4), 0});
    expect_same_op("masked_select matrix mask " + n, Op::masked_select, tied({7}, dt, 5), {Value(mm)});
  }
}

TEST_F(ExactResultsMatchCpu, MultinomialDrawsTheCpuStream) {
  auto both = [&](const std::string& what, const Tensor& probs, int64_t ns, bool repl) {
    manual_seed(99);
    Tensor c = call1(Op::multinomial, {probs, ns, repl});
    RngState after = get_rng_state();
    manual_seed(99);
    Tensor g = call1(Op::multinomial, {to_cuda(probs), ns, repl});
    EXPECT_EQ(get_rng_state().offset, after.offset) << what << ": the stream advanced differently";
    expect_equal(what, c, g);
  };
  manual_seed(3);
  Tensor p = call1(Op::rand, {IntList{4, 6000}});
  p = call1(Op::mul, {p, call1(Op::gt, {p, 0.3})});  // some zero probabilities
  for (bool repl : {false, true}) {
    std::string r = repl ? " with replacement" : " without replacement";
    both("4x6000" + r, p, 1000, repl);
    both("4x6000 f64" + r, p.to(DType::Float64), 6000 * 7 / 10 - 100, repl);
    both("1-d 10" + r, call1(Op::rand, {IntList{10}}), 10, repl);
    both("1-d bf16" + r, call1(Op::rand, {IntList{300}}).to(DType::BFloat16), 5, repl);
  }
  Tensor one = call1(Op::zeros, {IntList{1, 3}});
  one.data<float>()[1] = 3;
  both("one category", one, 4, true);
  // a bad distribution raises before any word of the stream is used
  for (double v : {-1.0, (double)NAN, (double)INFINITY}) {
    Tensor bad = call1(Op::ones, {IntList{2, 50}});
    bad.data<float>()[60] = (float)v;
    RngState before = get_rng_state();
    try {
      call1(Op::multinomial, {to_cuda(bad), (int64_t)3, true});
      ADD_FAILURE() << "multinomial with a probability " << v << " did not raise";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ValueError);
    }
    EXPECT_EQ(get_rng_state().offset, before.offset);
  }
  try {
    call1(Op::multinomial, {to_cuda(call1(Op::zeros, {IntList{2, 5}})), (int64_t)1, false});
    ADD_FAILURE() << "multinomial of zeros did not raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ValueError);
  }
}

TEST_F(ExactResultsMatchCpu, ScatterAddOfSmallDtypesCollides) {
  // 20000 sources of 0 or 1 into 7 slots: adding 0 changes nothing, so every order of the atomic
  // adds rounds (or wraps) like the CPU's sequential loop
  manual_seed(5);
  Tensor index = call1(Op::randint, {(int64_t)1, (int64_t)8, IntList{20000}});
  for (DType dt : {DType::Float16, DType::BFloat16, DType::UInt8, DType::Bool, DType::Float32, DType::Int32}) {
    Tensor src = dt == DType::Bool ? call1(Op::gt, {call1(Op::randint, {(int64_t)0, (int64_t)2, IntList{20000}}), 0})
                                   : call1(Op::randint, {(int64_t)0, (int64_t)2, IntList{20000}}).to(dt);
    Tensor self = call1(Op::zeros, {IntList{7}}, {{"dtype", Value(dt)}});
    expect_same_op(std::string("scatter_add ") + dtype_name(dt), Op::scatter_add, self,
                   {Value((int64_t)1), Value(index), Value(src)});
    // 2-d, along the last dim, odd offsets inside the 32-bit words
    Tensor self2 = call1(Op::zeros, {IntList{3, 5}}, {{"dtype", Value(dt)}});
    Tensor idx2 = call1(Op::randint, {(int64_t)1, (int64_t)6, IntList{3, 400}});
    Tensor src2 = dt == DType::Bool ? call1(Op::gt, {call1(Op::randint, {(int64_t)0, (int64_t)2, IntList{3, 400}}), 0})
                                    : call1(Op::randint, {(int64_t)0, (int64_t)2, IntList{3, 400}}).to(dt);
    expect_same_op(std::string("scatter_add 2-d ") + dtype_name(dt), Op::scatter_add, self2,
                   {Value((int64_t)2), Value(idx2), Value(src2)});
  }
}

TEST_F(ExactResultsMatchCpu, IntegerProductsConvolutionsAndPoolsWrapLikeTheCpu) {
  manual_seed(11);
  auto ints = [](IntList s, DType dt, int64_t lo, int64_t hi) { return call1(Op::randint, {lo, hi, Value(s)}).to(dt); };
  for (DType dt : {DType::Int64, DType::Int32, DType::UInt8}) {
    std::string n = dtype_name(dt);
    int64_t lo = dt == DType::UInt8 ? 0 : -100, hi = 200;  // uint8 sums wrap
    Tensor a = ints({2, 1, 5, 7}, dt, lo, hi), b = ints({3, 7, 4}, dt, lo, hi), v = ints({7}, dt, lo, hi);
    expect_same_op("matmul broadcast " + n, Op::matmul, a, {Value(b)});
    expect_same_op("matmul 1-d " + n, Op::matmul, v, {Value(b)});
    expect_same_op("matmul 2-d @ 1-d " + n, Op::matmul, ints({5, 7}, dt, lo, hi), {Value(v)});
    Tensor m = ints({4, 6}, dt, lo, hi), k = ints({6, 3}, dt, lo, hi);
    expect_same_op("mm transposed " + n, Op::mm, call1(Op::t, {ints({6, 4}, dt, lo, hi)}), {Value(k)});
    expect_same_op("addmm " + n, Op::addmm, ints({3}, dt, lo, hi), {Value(m), Value(k)},
                   {{"beta", Value((int64_t)2)}, {"alpha", Value((int64_t)3)}});
    expect_same_op("baddbmm " + n, Op::baddbmm, ints({2, 4, 3}, dt, lo, hi),
                   {Value(ints({2, 4, 6}, dt, lo, hi)), Value(ints({2, 6, 3}, dt, lo, hi))});
    expect_same_op("linear " + n, Op::linear, ints({2, 3, 6}, dt, lo, hi), {Value(ints({5, 6}, dt, lo, hi)), Value(ints({5}, dt, lo, hi))});
    Tensor x = ints({2, 4, 9, 8}, dt, lo, hi);
    expect_same_op("conv2d groups stride pad dilation " + n, Op::conv2d, x,
                   {Value(ints({6, 2, 3, 2}, dt, lo, hi)), Value(ints({6}, dt, lo, hi)), Value(IntList{2, 1}), Value(IntList{1, 2}),
                    Value(IntList{2, 1}), Value((int64_t)2)});
    expect_same_op("conv1d same " + n, Op::conv1d, ints({2, 3, 10}, dt, lo, hi),
                   {Value(ints({4, 3, 3}, dt, lo, hi)), Value(), Value(IntList{1}), Value(std::string("same"))});
    expect_same_op("conv_transpose2d " + n, Op::conv_transpose2d, x,
                   {Value(ints({4, 3, 3, 2}, dt, lo, hi)), Value(ints({6}, dt, lo, hi)), Value(IntList{2, 3}), Value(IntList{1, 0}),
                    Value(IntList{1, 1}), Value((int64_t)2)});
    expect_same_op("max_pool2d " + n, Op::max_pool2d, x, {Value(IntList{3, 2}), Value(IntList{2, 1}), Value(IntList{1, 1}), Value(IntList{1, 2})});
    expect_same_op("avg_pool2d " + n, Op::avg_pool2d, x,
                   {Value(IntList{3, 3}), Value(IntList{2, 2}), Value(IntList{1, 1}), Value(true), Value(false)});
    expect_same_op("adaptive_avg_pool2d " + n, Op::adaptive_avg_pool2d, x, {Value(IntList{4, 3})});
    expect_same_op("adaptive_max_pool2d " + n, Op::adaptive_max_pool2d, x, {Value(IntList{5, 3})});
    Tensor e1 = ints({3, 4, 5}, dt, lo, hi), e2 = ints({5, 4, 3}, dt, lo, hi);
    Value eq(std::string("bij,jib->bj"));
    expect_equal("einsum " + n, call1(Op::einsum, {eq, Value(TensorList{e1, e2})}),
                 call1(Op::einsum, {eq, Value(TensorList{to_cuda(e1), to_cuda(e2)})}));
  }
}

}  // namespace
