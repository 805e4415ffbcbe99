// The pointwise kernels on tensors large enough to take the vectorized and multi-threaded paths
// (contiguous, scalar-broadcast, row/column broadcast, strided and transposed operands), checked
// element by element against a plain scalar loop written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;

namespace {

constexpr int64_t kLarge = (1 << 20) + 37;  // past every grain size, with a ragged tail

uint64_t next(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 33;
}

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::Float32);
  for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = (float)((int64_t)(next(seed) % 20001) - 10000) / 1000.0f;
  return t;
}

Tensor random_i64(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi) {
  Tensor t = Tensor::empty(shape, DType::Int64);
  for (int64_t i = 0; i < t.numel(); i++) t.data<int64_t>()[i] = lo + (int64_t)(next(seed) % (uint64_t)(hi - lo + 1));
  return t;
}

// Element (i) of a tensor of any layout, read through its strides, as double.
double at(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); d++) off += idx[d] * t.strides()[d];
  return visit_dtype(t.dtype(), [&]<typename T>() { return (double)static_cast<opmath_t<T>>(t.data<T>()[off]); });
}

// Calls fn(multi-index) for every element of shape in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  Shape idx(shape.size(), 0);
  for (int64_t n = shape_numel(shape), k = 0; k < n; k++) {
    fn(idx);
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Index into an operand broadcast to `shape` (its trailing dims; size-1 dims read element 0).
Shape operand_index(const Tensor& t, const Shape& idx) {
  Shape out(t.dim());
  int64_t off = (int64_t)idx.size() - t.dim();
  for (int64_t d = 0; d < t.dim(); d++) out[d] = t.sizes()[d] == 1 ? 0 : idx[off + d];
  return out;
}

// out must equal ref(a, b) at every element of its shape (exactly, or within rel_tol).
void expect_binary(const Tensor& out, const Tensor& a, const Tensor& b, const std::function<double(double, double)>& ref,
                   double rel_tol = 0) {
  int64_t bad = 0;
  for_each_index(out.sizes(), [&](const Shape& idx) {
    double want = ref(at(a, operand_index(a, idx)), at(b, operand_index(b, idx))), got = at(out, idx);
    bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= rel_tol * std::fabs(want);
    if (!ok && bad++ < 5) ADD_FAILURE() << "element " << shape_string(idx) << ": got " << got << ", expected " << want;
  });
  EXPECT_EQ(bad, 0);
}

Tensor transposed(const Tensor& t) { return call1(Op::t, {t}); }

TEST(PointwiseLarge, AddContiguousMatchesScalarLoop) {
  Tensor a = random_f32({kLarge}, 1), b = random_f32({kLarge}, 2);
  Tensor out = call1(Op::add, {a, b});
  EXPECT_EQ(out.dtype(), DType::Float32);
  expect_binary(out, a, b, [](double x, double y) { return (double)((float)x + (float)y); });
}

TEST(PointwiseLarge, OutputsOverSixteenMegabytesAreStreamed) {
  const int64_t n = (1 << 22) + 5;  // 16 MiB + 20 bytes of float32: the non-temporal store path
  Tensor a = random_f32({n}, 26), b = random_f32({n}, 27);
  expect_binary(call1(Op::add, {a, b}), a, b, [](double x, double y) { return (double)((float)x + (float)y); });
  Tensor s = Tensor::scalar(3, DType::Float32);
  expect_binary(call1(Op::mul, {Value(3), b}), s, b, [](double x, double y) { return (double)((float)x * (float)y); });
  // a view starting 4 bytes into its storage: the output is fresh, the input unaligned
  Tensor off = a.as_strided({n - 1}, {1}, 1);
  expect_binary(call1(Op::sub, {off, Value(0.5)}), off, s, [](double x, double) { return (double)((float)x - 0.5f); });
}

TEST(PointwiseLarge, AddWithAlphaAndSubtract) {
  Tensor a = random_f32({kLarge}, 3), b = random_f32({kLarge}, 4);
  expect_binary(call1(Op::add, {a, b}, {{"alpha", Value(2.5)}}), a, b,
                [](double x, double y) { return (double)((float)x + 2.5f * (float)y); }, 1e-6);
  expect_binary(call1(Op::sub, {a, b}), a, b, [](double x, double y) { return (double)((float)x - (float)y); });
}

TEST(PointwiseLarge, MulByLuaNumberBroadcastsAScalar) {
  Tensor a = random_f32({kLarge}, 5);
  Tensor out = call1(Op::mul, {a, Value(0.25)});
  Tensor s = Tensor::scalar(0.25, DType::Float32);
  expect_binary(out, a, s, [](double x, double y) { return (double)((float)x * (float)y); });
  Tensor out2 = call1(Op::sub, {Value(1), a});  // scalar first
  expect_binary(out2, s, a, [](double, double y) { return (double)(1.0f - (float)y); });
}

TEST(PointwiseLarge, BroadcastRowAndColumn) {
  Tensor a = random_f32({1031, 1029}, 6), row = random_f32({1029}, 7), col = random_f32({1031, 1}, 8);
  expect_binary(call1(Op::add, {a, row}), a, row, [](double x, double y) { return (double)((float)x + (float)y); });
  expect_binary(call1(Op::mul, {col, a}), col, a, [](double x, double y) { return (double)((float)x * (float)y); });
  Tensor outer = call1(Op::sub, {col, row});  // both broadcast: [1031, 1] - [1029]
  EXPECT_EQ(outer.sizes(), (Shape{1031, 1029}));
  expect_binary(outer, col, row, [](double x, double y) { return (double)((float)x - (float)y); });
}

TEST(PointwiseLarge, StridedAndTransposedOperands) {
  Tensor base = random_f32({1024, 2050}, 9);
  Tensor strided = base.as_strided({1024, 1025}, {2050, 2}, 0);  // every other column
  Tensor sq = random_f32({1025, 1024}, 10);
  Tensor tr = transposed(sq);  // [1024, 1025], strides (1, 1024)
  expect_binary(call1(Op::add, {strided, tr}), strided, tr, [](double x, double y) { return (double)((float)x + (float)y); });
  expect_binary(call1(Op::maximum, {tr, strided}), tr, strided, [](double x, double y) { return std::max(x, y); });
  // a batch of transposed matrices (tiles over the last two dims, per batch element), ragged tiles
  Tensor b = random_f32({3, 301, 203}, 24);
  Tensor bt = b.as_strided({3, 203, 301}, {301 * 203, 1, 203}, 0);
  Tensor c = random_f32({3, 203, 301}, 25);
  expect_binary(call1(Op::mul, {bt, c}), bt, c, [](double x, double y) { return (double)((float)x * (float)y); });
  expect_binary(call1(Op::where, {call1(Op::gt, {bt, c}), bt, Value(0.5)}).as_strided({3, 203, 301}, {203 * 301, 301, 1}, 0), bt, c,
                [](double x, double y) { return x > y ? x : (double)0.5f; });
}

TEST(PointwiseLarge, ComparisonsGiveBool) {
  Tensor a = random_f32({kLarge}, 11), b = random_f32({kLarge}, 12);
  Tensor out = call1(Op::lt, {a, b});
  EXPECT_EQ(out.dtype(), DType::Bool);
  expect_binary(out, a, b, [](double x, double y) { return x < y ? 1.0 : 0.0; });
  Tensor ge = call1(Op::ge, {transposed(a.as_strided({1024, 1024}, {1024, 1}, 0)), Value(0)});
  Tensor z = Tensor::scalar(0, DType::Float32);
  expect_binary(ge, transposed(a.as_strided({1024, 1024}, {1024, 1}, 0)), z, [](double x, double) { return x >= 0 ? 1.0 : 0.0; });
}

TEST(PointwiseLarge, IntegerFloorDivisionAndRemainderFollowPython) {
  Tensor a = random_i64({kLarge}, 13, -1000000, 1000000), b = random_i64({kLarge}, 14, 1, 97);
  Tensor sign = random_i64({kLarge}, 15, 0, 1);
  for (int64_t i = 0; i < kLarge; i++)
    if (sign.data<int64_t>()[i]) b.data<int64_t>()[i] = -b.data<int64_t>()[i];
  auto floordiv = [](double x, double y) { return std::floor(x / y); };
  auto mod = [](double x, double y) { return x - y * std::floor(x / y); };
  expect_binary(call1(Op::div, {a, b}, {{"rounding_mode", Value("floor")}}), a, b, floordiv);
  expect_binary(call1(Op::div, {a, b}, {{"rounding_mode", Value("trunc")}}), a, b, [](double x, double y) { return std::trunc(x / y); });
  expect_binary(call1(Op::remainder, {a, b}), a, b, mod);
}

TEST(PointwiseLarge, IntegerDivisionByZeroRaisesAndMinOverMinusOneWraps) {
  Tensor a = random_i64({kLarge}, 16, -100, 100), b = random_i64({kLarge}, 17, 1, 9);
  b.data<int64_t>()[kLarge - 1] = 0;
  for (Op op : {Op::div, Op::remainder}) {
    try {
      call1(op, {a, b}, op == Op::div ? std::vector<std::pair<std::string, Value>>{{"rounding_mode", Value("floor")}}
                                      : std::vector<std::pair<std::string, Value>>{});
      ADD_FAILURE() << op_name(op) << " by zero did not raise";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ValueError);
      EXPECT_STREQ(e.what(), "ZeroDivisionError");
    }
  }
  Tensor m = Tensor::empty({3}, DType::Int64);
  m.data<int64_t>()[0] = INT64_MIN;
  m.data<int64_t>()[1] = 7;
  m.data<int64_t>()[2] = -7;
  Tensor q = call1(Op::div, {m, Value(-1)}, {{"rounding_mode", Value("floor")}});
  EXPECT_EQ(q.data<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(q.data<int64_t>()[1], -7);
  Tensor r = call1(Op::remainder, {m, Value(-1)});
  EXPECT_EQ(r.data<int64_t>()[0], 0);
}

TEST(PointwiseLarge, HalfTypesRoundOnce) {
  Tensor a32 = random_f32({kLarge}, 18), b32 = random_f32({kLarge}, 19);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor a = a32.to(dt), b = b32.to(dt);
    Tensor out = call1(Op::mul, {a, b});
    EXPECT_EQ(out.dtype(), dt);
    Tensor ref = Tensor::empty({kLarge}, DType::Float32);
    for (int64_t i = 0; i < kLarge; i++) ref.data<float>()[i] = (float)at(a, {i}) * (float)at(b, {i});
    Tensor ref_dt = ref.to(dt);
    int64_t bad = 0;
    for (int64_t i = 0; i < kLarge; i++) bad += at(out, {i}) != at(ref_dt, {i});
    EXPECT_EQ(bad, 0) << dtype_name(dt);
  }
}

TEST(PointwiseLarge, UnaryAndWhereAndConversion) {
  Tensor a = random_f32({1024, 1027}, 20);
  Tensor e = call1(Op::exp, {transposed(a)});
  Tensor zero = Tensor::scalar(0, DType::Float32);
  expect_binary(e, transposed(a), zero, [](double x, double) { return (double)std::exp((float)x); }, 1e-6);
  Tensor cond = call1(Op::gt, {a, Value(0)});
  Tensor row = random_f32({1027}, 21);
  Tensor w = call1(Op::where, {cond, a, row});
  for_each_index(w.sizes(), [&](const Shape& idx) {
    double want = at(cond, idx) != 0 ? at(a, idx) : at(row, {idx[1]});
    if (at(w, idx) != want) ADD_FAILURE() << "where at " << shape_string(idx);
  });
  Tensor u = call1(Op::to_dtype, {a, Value(DType::UInt8)});
  int64_t bad = 0;
  for_each_index(u.sizes(), [&](const Shape& idx) {
    bad += at(u, idx) != (double)(uint8_t)(int64_t)(float)at(a, idx);
  });
  EXPECT_EQ(bad, 0);
}

TEST(PointwiseLarge, VectorizedExpIsAccurateOverTheWholeRange) {
  Tensor x = Tensor::empty({kLarge}, DType::Float32);
  for (int64_t i = 0; i < kLarge; i++) x.data<float>()[i] = -110.0f + 205.0f * (float)i / (float)kLarge;  // [-110, 95)
  x.data<float>()[0] = NAN;
  x.data<float>()[1] = -INFINITY;
  x.data<float>()[2] = INFINITY;
  Tensor e = call1(Op::exp, {x}), s = call1(Op::sigmoid, {x});
  int64_t bad = 0;
  for (int64_t i = 0; i < kLarge; i++) {
    float v = x.data<float>()[i], got = e.data<float>()[i], want = std::exp(v);
    float sg = s.data<float>()[i], swant = 1.0f / (1.0f + std::exp(-v));
    bool ok = std::isnan(want) ? std::isnan(got) : std::isinf(want) ? got == want : std::fabs(got - want) <= 2.5e-7f * want + 1e-45f;
    bool sok = std::isnan(swant) ? std::isnan(sg) : std::fabs(sg - swant) <= 1e-6f * swant + 1e-45f;
    if ((!ok || !sok) && bad++ < 5) ADD_FAILURE() << "exp/sigmoid(" << v << ") = " << got << ", " << sg << "; expected " << want << ", " << swant;
  }
  EXPECT_EQ(bad, 0);
}

TEST(PointwiseLarge, SameResultOnOneThread) {
  Tensor a = random_f32({kLarge}, 22), b = random_f32({kLarge}, 23);
  Tensor two = call1(Op::lerp, {a, b, Value(0.3)});
  int saved = get_num_threads();
  set_num_threads(1);
  Tensor one = call1(Op::lerp, {a, b, Value(0.3)});
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data_ptr(), two.data_ptr(), kLarge * sizeof(float)), 0);
}

}  // namespace

namespace {

// Capture runs only the meta rules, on fake tensors: no data is read, results carry shapes and dtypes.
TEST(PointwiseMeta, FakeTensorsGetShapesAndDtypes) {
  Tensor a = Tensor::fake({3, 1}, {1, 1}, DType::Int32), b = Tensor::fake({4}, {1}, DType::Float16);
  Tensor s = call1(Op::add, {a, b});
  EXPECT_TRUE(s.is_fake());
  EXPECT_EQ(s.sizes(), (Shape{3, 4}));
  EXPECT_EQ(s.dtype(), DType::Float16);
  EXPECT_EQ(call1(Op::pow, {a, Value(2)}).dtype(), DType::Int32);
  EXPECT_EQ(call1(Op::sqrt, {a}).dtype(), DType::Float32);
  EXPECT_EQ(call1(Op::lt, {a, Value(2.5)}).dtype(), DType::Bool);
  EXPECT_EQ(call1(Op::clamp, {a, Value(0.5)}).dtype(), DType::Float32);
  Tensor m = Tensor::fake({4}, {1}, DType::Bool);
  EXPECT_EQ(call1(Op::masked_fill, {a, m, Value(1.5)}).sizes(), (Shape{3, 4}));
  EXPECT_EQ(call1(Op::where, {m, a, Value(0)}).dtype(), DType::Int32);
  EXPECT_THROW(call1(Op::add, {a, Tensor::fake({2, 5}, {5, 1}, DType::Float32)}), Error);
}

}  // namespace
