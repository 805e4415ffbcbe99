// The random ops draw from one counter-based Philox4x32-10 stream: known answers of the
// generator, the documented word-to-value mapping of tc/random.h, reproducibility across seeds,
// states and thread counts, and the statistics of every distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "tc/ops.h"
#include "tc/parallel.h"
#include "tc/random.h"

using namespace tc;

namespace {

using Kw = std::vector<std::pair<std::string, Value>>;

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

Tensor rand(IntList sizes, DType dt = DType::Float32) { return call1(Op::rand, {sizes}, {{"dtype", dt}}); }
Tensor randn(IntList sizes, DType dt = DType::Float32) { return call1(Op::randn, {sizes}, {{"dtype", dt}}); }

void mean_std(const std::vector<double>& v, double* mean, double* std) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  *mean = s / v.size();
  for (double x : v) s2 += (x - *mean) * (x - *mean);
  *std = std::sqrt(s2 / (v.size() - 1));
}

// Random123's known-answer vectors for philox4x32 with 10 rounds (tests/kat_vectors).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    PhiloxBlock b = philox4x32_10(k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3], k.key[0], k.key[1]);
    for (int i = 0; i < 4; i++) EXPECT_EQ(b.w[i], k.out[i]) << "word " << i;
  }
}

// The mapping of tc/random.h, recomputed from the generator itself: what the CUDA kernels match.
TEST(Philox, RandFollowsTheDocumentedMapping) {
  manual_seed(1234);
  RngState s = get_rng_state();
  Tensor f = rand({3, 5});
  Tensor d = rand({7}, DType::Float64);
  Tensor h = rand({6}, DType::Float16);
  for (int64_t i = 0; i < 15; i++) {
    uint32_t w = philox_block(s, i / 4).w[i % 4];
    EXPECT_EQ(f.data<float>()[i], (float)uniform_bits(w, 24)) << i;
  }
  RngState sd{s.seed, 16};  // 15 words, rounded up to 16
  for (int64_t i = 0; i < 7; i++) {
    PhiloxBlock b = philox_block(sd, i / 2);
    EXPECT_EQ(d.data<double>()[i], uniform53(b.w[2 * (i % 2)], b.w[2 * (i % 2) + 1])) << i;
  }
  RngState sh{s.seed, 32};  // after 14 -> 16 more words
  for (int64_t i = 0; i < 6; i++) {
    uint32_t w = philox_block(sh, i / 4).w[i % 4];
    EXPECT_EQ((float)h.data<Half>()[i], (float)uniform_bits(w, 11)) << i;
  }
  EXPECT_EQ(get_rng_state().offset, 40u);
}

TEST(Philox, RandnIsBoxMullerOfTheDocumentedLanes) {
  manual_seed(99);
  RngState s = get_rng_state();
  Tensor z = randn({6});
  Tensor z64 = randn({3}, DType::Float64);
  for (int64_t i = 0; i < 6; i++) {
    PhiloxBlock b = philox_block(s, i / 4);
    int pair = (int)(i % 4) / 2;
    double u1 = uniform_bits(b.w[2 * pair], 24), u2 = uniform_bits(b.w[2 * pair + 1], 24);
    double r = std::sqrt(-2 * std::log(1 - u1)), t = 6.283185307179586 * u2;
    EXPECT_EQ(z.data<float>()[i], (float)(i % 2 ? r * std::sin(t) : r * std::cos(t))) << i;
  }
  RngState s64{s.seed, 8};
  for (int64_t i = 0; i < 3; i++) {
    PhiloxBlock b = philox_block(s64, i / 2);
    double u1 = uniform53(b.w[0], b.w[1]), u2 = uniform53(b.w[2], b.w[3]);
    double r = std::sqrt(-2 * std::log(1 - u1)), t = 6.283185307179586 * u2;
    EXPECT_EQ(z64.data<double>()[i], i % 2 ? r * std::sin(t) : r * std::cos(t)) << i;
  }
}

TEST(Philox, SameSeedSameValuesDifferentSeedsDiffer) {
  auto draw = [](uint64_t seed) {
    manual_seed(seed);
    std::vector<double> all;
    for (const Tensor& t : {rand({100}), randn({33}, DType::Float64), call1(Op::randint, {0, 1000, IntList{50}}),
                            call1(Op::bernoulli, {rand({40}), Value()}),
                            call1(Op::multinomial, {rand({3, 20}), 5, false})}) {
      auto v = values(t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  manual_seed(5);
  EXPECT_EQ(initial_seed(), 5u);
  EXPECT_NE(values(rand({8})), values(rand({8})));  // successive calls continue the stream
}

TEST(Philox, StateSaveAndRestore) {
  manual_seed(3);
  rand({5});
  RngState st = get_rng_state();
  EXPECT_EQ(st.offset, 8u);  // 5 words rounded up to a multiple of 4
  auto a = values(randn({17}));
  set_rng_state(st);
  EXPECT_EQ(values(randn({17})), a);
  EXPECT_THROW(set_rng_state(RngState{1, 6}), Error);
}

TEST(Philox, ValuesDoNotDependOnThreadCount) {
  int saved = get_num_threads();
  auto draw = [](int threads) {
    set_num_threads(threads);
    manual_seed(2024);
    std::vector<std::vector<double>> out;
    out.push_back(values(rand({1 << 18})));
    out.push_back(values(randn({1 << 18}, DType::Float64)));
    out.push_back(values(call1(Op::randint, {-5, 5, IntList{100000}})));
    out.push_back(values(call1(Op::bernoulli, {Tensor::empty({100000}, DType::Float32), 0.25})));
    out.push_back(values(call1(Op::multinomial, {rand({64, 50}), 10, true})));
    out.push_back(values(call1(Op::multinomial, {rand({64, 50}), 10, false})));
    out.push_back(values(call1(Op::arange, {0.0, 50000.0, 0.5})));
    out.push_back(values(bernoulli_mask({70000}, 0.5, DType::Float32, 2.0)));
    return out;
  };
  auto one = draw(1), two = draw(2);
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); i++) EXPECT_EQ(one[i], two[i]) << "draw " << i;
}

TEST(RandomStatistics, RandnHasMeanZeroStdOne) {
  manual_seed(11);
  for (DType dt : {DType::Float32, DType::Float64}) {
    double m, s;
    mean_std(values(randn({1000000}, dt)), &m, &s);
    EXPECT_NEAR(m, 0.0, 0.005) << dtype_name(dt);  // standard error 0.001
    EXPECT_NEAR(s, 1.0, 0.005) << dtype_name(dt);
  }
  Tensor t = Tensor::empty({200000}, DType::BFloat16);
  call1(Op::normal_, {t, 3.0, 0.5});
  double m, s;
  mean_std(values(t), &m, &s);
  EXPECT_NEAR(m, 3.0, 0.01);
  EXPECT_NEAR(s, 0.5, 0.01);
}

TEST(RandomStatistics, UniformStaysInItsHalfOpenRange) {
  manual_seed(12);
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    auto v = values(rand({200000}, dt));
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end()), m, s;
    EXPECT_GE(lo, 0.0) << dtype_name(dt);
    EXPECT_LT(hi, 1.0) << dtype_name(dt);
    mean_std(v, &m, &s);
    EXPECT_NEAR(m, 0.5, 0.005) << dtype_name(dt);
    EXPECT_NEAR(s, std::sqrt(1.0 / 12), 0.005) << dtype_name(dt);
  }
  // a range whose top rounds to `to` in float16 still excludes it
  Tensor h = Tensor::empty({100000}, DType::Float16);
  call1(Op::uniform_, {h, 1000.0, 1000.5});
  for (double x : values(h)) ASSERT_TRUE(x >= 1000.0 && x < 1000.5) << x;
  Tensor f = Tensor::empty({100000}, DType::Float32);
  Tensor r = call1(Op::uniform_, {f, -2.0, 3.0});
  EXPECT_TRUE(r.same(f));
  for (double x : values(f)) ASSERT_TRUE(x >= -2.0 && x < 3.0) << x;
}

TEST(RandomStatistics, RandintIsLowInclusiveHighExclusive) {
  manual_seed(13);
  auto v = values(call1(Op::randint, {-3, 4, IntList{100000}}));
  std::vector<int> count(7, 0);
  for (double x : v) {
    ASSERT_TRUE(x >= -3 && x < 4 && x == std::floor(x)) << x;
    count[(int)x + 3]++;
  }
  for (int c : count) EXPECT_NEAR(c, 100000 / 7.0, 600);
  Tensor t = call1(Op::randint, {0, 5, IntList{2, 3}});
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  Tensor u8 = call1(Op::randint, {250, 256, IntList{1000}}, {{"dtype", DType::UInt8}});
  for (double x : values(u8)) ASSERT_TRUE(x >= 250 && x <= 255);
  // a range wider than 2^32 draws 64 bits
  int64_t lo = -(int64_t(1) << 40), hi = int64_t(1) << 40;
  Tensor w = call1(Op::randint, {lo, hi, IntList{10000}});
  int64_t mn = hi, mx = lo;
  for (int64_t i = 0; i < 10000; i++) {
    int64_t x = w.data<int64_t>()[i];
    ASSERT_TRUE(x >= lo && x < hi);
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  EXPECT_LT(mn, lo / 2);
  EXPECT_GT(mx, hi / 2);
}

TEST(RandomStatistics, BernoulliFiresAtItsRate) {
  manual_seed(14);
  auto v = values(call1(Op::bernoulli, {Tensor::empty({1000000}, DType::Float32), 0.3}));
  double m, s;
  mean_std(v, &m, &s);
  EXPECT_NEAR(m, 0.3, 0.003);
  // probabilities from self, per element
  Tensor p = Tensor::empty({2, 100000}, DType::Float64);
  for (int64_t i = 0; i < 200000; i++) p.data<double>()[i] = i < 100000 ? 0.9 : 0.1;
  Tensor b = call1(Op::bernoulli, {p});
  EXPECT_EQ(b.dtype(), DType::Float64);
  auto bv = values(b);
  double first = 0, second = 0;
  for (int64_t i = 0; i < 100000; i++) {
    first += bv[i];
    second += bv[100000 + i];
  }
  EXPECT_NEAR(first / 100000, 0.9, 0.005);
  EXPECT_NEAR(second / 100000, 0.1, 0.005);
}

TEST(RandomStatistics, BernoulliMaskIsTheBernoulliStream) {
  manual_seed(15);
  Tensor b = call1(Op::bernoulli, {Tensor::empty({1000}, DType::Float32), 0.8});
  manual_seed(15);
  Tensor m = bernoulli_mask({1000}, 0.8, DType::Float32, 1.25);
  auto bv = values(b), mv = values(m);
  for (size_t i = 0; i < bv.size(); i++) ASSERT_EQ(mv[i], bv[i] * 1.25) << i;
  EXPECT_THROW(bernoulli_mask({2}, 1.5, DType::Float32), Error);
}

TEST(RandomStatistics, MultinomialWithReplacementFollowsTheProbabilities) {
  manual_seed(16);
  Tensor p = Tensor::empty({4}, DType::Float32);
  float probs[4] = {0.1f, 0.0f, 0.6f, 0.3f};
  std::copy(probs, probs + 4, p.data<float>());
  Tensor s = call1(Op::multinomial, {p, 200000, true});
  EXPECT_EQ(s.dtype(), DType::Int64);
  EXPECT_EQ(s.sizes(), (Shape{200000}));
  std::vector<int> count(4, 0);
  for (int64_t i = 0; i < 200000; i++) {
    int64_t c = s.data<int64_t>()[i];
    ASSERT_TRUE(c >= 1 && c <= 4) << c;  // 1-based
    count[c - 1]++;
  }
  EXPECT_EQ(count[1], 0);  // zero probability: never drawn
  for (int c = 0; c < 4; c++) EXPECT_NEAR(count[c] / 200000.0, probs[c], 0.005) << c;
}

TEST(RandomStatistics, MultinomialWithoutReplacementDrawsDistinctCategories) {
  manual_seed(17);
  Tensor p = call1(Op::rand, {IntList{500, 8}});
  Tensor s = call1(Op::multinomial, {p, 8, false});
  EXPECT_EQ(s.sizes(), (Shape{500, 8}));
  for (int64_t r = 0; r < 500; r++) {
    std::set<int64_t> seen;
    for (int64_t j = 0; j < 8; j++) seen.insert(s.data<int64_t>()[r * 8 + j]);
    ASSERT_EQ(seen.size(), 8u);
    EXPECT_EQ(*seen.begin(), 1);
    EXPECT_EQ(*seen.rbegin(), 8);
  }
  // the first draw of each row follows the probabilities; later draws never repeat it
  Tensor q = Tensor::empty({20000, 3}, DType::Float64);
  for (int64_t r = 0; r < 20000; r++) {
    q.data<double>()[r * 3] = 0.2;
    q.data<double>()[r * 3 + 1] = 0.5;
    q.data<double>()[r * 3 + 2] = 0.3;
  }
  Tensor d = call1(Op::multinomial, {q, 2});
  std::vector<int> first(3, 0);
  for (int64_t r = 0; r < 20000; r++) {
    int64_t a = d.data<int64_t>()[r * 2], b = d.data<int64_t>()[r * 2 + 1];
    ASSERT_NE(a, b);
    first[a - 1]++;
  }
  EXPECT_NEAR(first[0] / 20000.0, 0.2, 0.015);
  EXPECT_NEAR(first[1] / 20000.0, 0.5, 0.015);
  EXPECT_NEAR(first[2] / 20000.0, 0.3, 0.015);
  // zero-probability categories come last
  Tensor z = Tensor::empty({3}, DType::Float32);
  z.data<float>()[0] = 0;
  z.data<float>()[1] = 1;
  z.data<float>()[2] = 0;
  EXPECT_EQ(call1(Op::multinomial, {z, 1}).data<int64_t>()[0], 2);
}

TEST(RandomOps, InPlaceOpsWriteSelfInElementOrder) {
  Tensor base = Tensor::empty({4, 3}, DType::Float32);
  Tensor t = base.as_strided({3, 4}, {1, 3}, 0);  // a transposed view
  uint64_t v0 = t.version();
  manual_seed(21);
  Tensor r = call1(Op::uniform_, {t, 0.0, 1.0});
  EXPECT_TRUE(r.same(t));
  EXPECT_GT(t.version(), v0);
  manual_seed(21);
  auto want = values(rand({3, 4}));
  EXPECT_EQ(values(t), want);  // element i in row-major order of the view, not of memory

  Tensor c = Tensor::empty({5}, DType::Float64);
  uint64_t v1 = c.version();
  EXPECT_TRUE(call1(Op::normal_, {c}).same(c));
  EXPECT_EQ(c.version(), v1 + 1);
  Tensor f = call1(Op::fill_, {c, 2.5});
  EXPECT_TRUE(f.same(c));
  EXPECT_EQ(c.version(), v1 + 2);
  for (double x : values(c)) EXPECT_EQ(x, 2.5);
}

TEST(RandomOps, BadInputLeavesTheStreamAlone) {
  manual_seed(22);
  Tensor p = Tensor::empty({3}, DType::Float32);
  p.data<float>()[0] = 0.5f;
  p.data<float>()[1] = 1.5f;
  p.data<float>()[2] = 0.5f;
  EXPECT_THROW(call1(Op::bernoulli, {p}), Error);
  EXPECT_THROW(call1(Op::multinomial, {call1(Op::zeros, {IntList{2, 3}}), 1}), Error);
  EXPECT_EQ(get_rng_state().offset, 0u);
}

TEST(CreationOps, OptionsAndEmpty) {
  Tensor e = call1(Op::empty, {2, 3}, {{"dtype", DType::Int32}});
  EXPECT_EQ(e.sizes(), (Shape{2, 3}));
  EXPECT_EQ(e.dtype(), DType::Int32);
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(call1(Op::empty, {IntList{}}).dim(), 0);
  Tensor z = call1(Op::zeros, {4}, {{"requires_grad", true}});
  EXPECT_TRUE(z.requires_grad());
  EXPECT_FALSE(call1(Op::ones, {4}).requires_grad());
  EXPECT_TRUE(call1(Op::randn, {2}, {{"requires_grad", true}}).requires_grad());
  EXPECT_TRUE(call1(Op::eye, {2}, {{"requires_grad", true}, {"dtype", DType::Float64}}).requires_grad());
  EXPECT_EQ(call1(Op::rand, {2}, {{"dtype", "float64"}}).dtype(), DType::Float64);
  set_default_dtype(DType::Float64);
  EXPECT_EQ(call1(Op::zeros, {2}).dtype(), DType::Float64);
  EXPECT_EQ(call1(Op::full, {IntList{2}, 0.5}).dtype(), DType::Float64);
  EXPECT_EQ(call1(Op::arange, {0, 1, 0.25}).dtype(), DType::Float64);
  EXPECT_EQ(call1(Op::arange, {0, 4}).dtype(), DType::Int64);
  set_default_dtype(DType::Float32);
  // an unavailable device is diagnosed, not written through a host pointer
  EXPECT_THROW(call1(Op::zeros, {2}, {{"device", "cuda"}}), Error);
}

}  // namespace
