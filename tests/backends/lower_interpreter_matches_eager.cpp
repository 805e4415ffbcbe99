// The loop-IR interpreter running lowered graphs gives eager's results: every pointwise op on
// several dtypes, reductions, views and movement as index arithmetic, composites through their
// decompositions, on contiguous, transposed, broadcast and sliced inputs, sizes 0, 1 and odd.
#include "lower_graphs.h"

using namespace tc;
using namespace tc::testing;

namespace {

// Inputs of one shape in several layouts: contiguous, transposed (a permuted contiguous
// tensor), sliced with a step (strided, offset), broadcast (stride 0).
std::vector<Tensor> layouts(Shape s, DType d) {
  std::vector<Tensor> out = {randn(s, d)};
  if (s.size() == 2) {
    out.push_back(call1(Op::t, {randn({s[1], s[0]}, d)}));
    out.push_back(call1(Op::slice, {randn({s[0], 2 * s[1] + 1}, d), int64_t(2), int64_t(2), Value(), int64_t(2)}));
    out.push_back(call1(Op::expand, {randn({1, s[1]}, d), IntList{s[0], s[1]}}));
  }
  return out;
}

Tensor ints(Shape s, int64_t lo, int64_t hi, DType d = DType::Int64) {
  Tensor t = call1(Op::randint, {lo, hi, IntList(s.begin(), s.end())});
  return d == DType::Int64 ? t : call1(Op::to_dtype, {t, d});
}

}  // namespace

TEST(LowerMatchesEager, UnaryPointwiseOpsOnLayoutsAndDtypes) {
  const Op ops[] = {Op::neg, Op::abs, Op::sign, Op::sqrt, Op::rsqrt, Op::exp, Op::exp2, Op::log, Op::log2,
                    Op::log1p, Op::expm1, Op::sin, Op::cos, Op::tan, Op::tanh, Op::sigmoid, Op::relu,
                    Op::gelu, Op::silu, Op::softplus, Op::leaky_relu, Op::elu, Op::hardtanh, Op::floor,
                    Op::ceil, Op::round, Op::trunc, Op::reciprocal, Op::erf, Op::isnan, Op::isinf,
                    Op::logical_not};
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (Op op : ops)
      for (const Tensor& x : layouts({5, 7}, d)) {
        GraphBuilder b;
        b.out(b.op(op, {b.in(x)}));
        SCOPED_TRACE(std::string(op_name(op)) + " " + dtype_name(d));
        expect_matches_eager(b, 1e-5, 1e-5);
      }
}

TEST(LowerMatchesEager, GeluTanhClampAndIntegerUnaryOps) {
  {
    GraphBuilder b;
    Tensor x = b.in(randn({3, 9}));
    b.out(b.op(Op::gelu, {x}, {{"approximate", "tanh"}}));
    b.out(b.op(Op::clamp, {x, -0.5, 0.25}));
    b.out(b.op(Op::clamp, {x, Value(), 0.1}));
    b.out(b.op(Op::softplus, {x, 2.0, 1.0}));
    expect_matches_eager(b);
  }
  for (DType d : {DType::Int64, DType::Int32, DType::UInt8}) {
    GraphBuilder b;
    Tensor x = b.in(ints({4, 5}, 0, 200, d));
    for (Op op : {Op::neg, Op::abs, Op::sign, Op::relu, Op::bitwise_not, Op::floor, Op::sqrt})
      b.out(b.op(op, {x}));
    b.out(b.op(Op::to_dtype, {x, DType::Float16}));
    SCOPED_TRACE(dtype_name(d));
    expect_matches_eager(b);
  }
}

TEST(LowerMatchesEager, BinaryOpsWithPromotionAndBroadcasting) {
  const Op ops[] = {Op::add, Op::sub, Op::mul, Op::div, Op::remainder, Op::pow, Op::minimum, Op::maximum,
                    Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge, Op::logical_and, Op::logical_or,
                    Op::logical_xor};
  const std::pair<DType, DType> pairs[] = {{DType::Float32, DType::Float32}, {DType::Float32, DType::Float64},
                                           {DType::Int64, DType::Float32}, {DType::Float16, DType::Float32},
                                           {DType::BFloat16, DType::BFloat16}, {DType::Int32, DType::Int64}};
  for (auto [da, db] : pairs)
    for (Op op : ops) {
      GraphBuilder b;
      Tensor x = is_floating(da) ? randn({4, 1, 6}, da) : ints({4, 1, 6}, -9, 10, da);
      Tensor y = is_floating(db) ? randn({3, 1}, db) : ints({3, 1}, 1, 10, db);
      if (op == Op::pow) x = call1(Op::abs, {x});
      b.out(b.op(op, {b.in(x), b.in(y)}));
      b.out(b.op(op, {b.in(x), 3}));
      SCOPED_TRACE(std::string(op_name(op)) + " " + dtype_name(da) + " " + dtype_name(db));
      expect_matches_eager(b, 1e-5, 1e-4);
    }
}

TEST(LowerMatchesEager, IntegerDivisionRemainderAndBitwise) {
  GraphBuilder b;
  Tensor x = b.in(ints({5, 6}, -20, 21)), y = b.in(ints({6}, 1, 7));
  b.out(b.op(Op::div, {x, y}));
  b.out(b.op(Op::div, {x, y}, {{"rounding_mode", "trunc"}}));
  b.out(b.op(Op::div, {x, y}, {{"rounding_mode", "floor"}}));
  b.out(b.op(Op::remainder, {x, y}));
  b.out(b.op(Op::remainder, {x, -3}));
  b.out(b.op(Op::bitwise_and, {x, y}));
  b.out(b.op(Op::bitwise_or, {x, y}));
  b.out(b.op(Op::bitwise_xor, {x, y}));
  Tensor u = b.in(ints({7}, 0, 256, DType::UInt8));
  b.out(b.op(Op::add, {u, u}));
  b.out(b.op(Op::mul, {u, 3}));
  Tensor f = b.in(randn({5, 6}));
  b.out(b.op(Op::div, {f, 0.7}, {{"rounding_mode", "floor"}}));
  b.out(b.op(Op::remainder, {f, -0.7}));
  expect_matches_eager(b);
}

TEST(LowerMatchesEager, WhereMaskedFillLerp) {
  GraphBuilder b;
  Tensor x = b.in(randn({4, 5})), y = b.in(randn({5})), c = b.in(call1(Op::gt, {randn({4, 1}), 0.0}));
  b.out(b.op(Op::where, {c, x, y}));
  b.out(b.op(Op::where, {c, x, 2}));
  b.out(b.op(Op::masked_fill, {x, c, -1.5}));
  b.out(b.op(Op::lerp, {x, y, 0.3}));
  b.out(b.op(Op::lerp, {x, y, b.in(call1(Op::rand, {IntList{4, 5}}))}));
  expect_matches_eager(b);
}

TEST(LowerMatchesEager, ReductionsOverDimsWithKeepdim) {
  std::vector<std::pair<Value, bool>> dims = {{Value(), false}, {IntList{2}, false}, {IntList{1}, true},
                                              {IntList{1, 3}, false}, {IntList{-1}, true}};
  for (const Tensor& x : {randn({3, 4, 5}), call1(Op::permute, {randn({5, 3, 4}), IntList{2, 3, 1}})})
    for (const auto& [dim, keep] : dims) {
      GraphBuilder b;
      Tensor in = b.in(x);
      for (Op op : {Op::sum, Op::mean, Op::prod, Op::amax, Op::amin}) b.out(b.op(op, {in, dim, keep}));
      b.out(b.op(Op::var, {in, dim}, {{"keepdim", keep}}));
      b.out(b.op(Op::std, {in, dim}, {{"keepdim", keep}, {"correction", 0}}));
      Stack vm = b.ops(Op::var_mean, {in, dim}, {{"keepdim", keep}});
      b.out(vm[0].tensor());
      b.out(vm[1].tensor());
      b.out(b.op(Op::norm, {in, 2, dim, keep}));
      b.out(b.op(Op::logsumexp, {in, dim.is_none() ? Value(IntList{1, 2, 3}) : dim, keep}));
      b.out(b.op(Op::any, {b.op(Op::gt, {in, 1.0}), dim, keep}));
      b.out(b.op(Op::all, {b.op(Op::gt, {in, -1.0}), dim, keep}));
      expect_matches_eager(b, 1e-5, 1e-4);
    }
}

TEST(LowerMatchesEager, ArgReductionsAndMaxDimGiveOneBasedIndices) {
  GraphBuilder b;
  Tensor x = b.in(call1(Op::round, {call1(Op::mul, {randn({4, 6}), 2.0})}));  // ties
  b.out(b.op(Op::argmax, {x}));
  b.out(b.op(Op::argmax, {x, int64_t(2)}));
  b.out(b.op(Op::argmin, {x, int64_t(1), true}));
  Stack mx = b.ops(Op::max_dim, {x, int64_t(2)});
  b.out(mx[0].tensor());
  b.out(mx[1].tensor());
  Stack mn = b.ops(Op::min_dim, {x, int64_t(1), true});
  b.out(mn[0].tensor());
  b.out(mn[1].tensor());
  b.out(b.op(Op::sum, {b.in(ints({3, 4}, 0, 5, DType::Int32)), int64_t(2)}));
  b.out(b.op(Op::sum, {b.in(call1(Op::gt, {randn({3, 4}), 0.0}))}));
  expect_matches_eager(b);
}

TEST(LowerMatchesEager, ViewsAreIndexArithmetic) {
  GraphBuilder b;
  Tensor x = b.in(randn({4, 6}));
  Tensor e = b.op(Op::exp, {x});  // a lazy value: its views are index maps, not buffer views
  for (const Tensor& t : {x, e}) {
    b.out(b.op(Op::mul, {b.op(Op::t, {t}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::view, {t, int64_t(3), int64_t(8)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::reshape, {t, int64_t(2), int64_t(2), int64_t(6)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::permute, {b.op(Op::reshape, {t, int64_t(2), int64_t(2), int64_t(6)}), int64_t(3), int64_t(1), int64_t(2)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::narrow, {t, int64_t(2), int64_t(2), int64_t(3)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::select, {t, int64_t(1), int64_t(-1)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::slice, {t, int64_t(2), int64_t(2), int64_t(-1), int64_t(2)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::expand, {b.op(Op::unsqueeze, {t, int64_t(1)}), int64_t(3), int64_t(4), int64_t(6)}), 2}));
    b.out(b.op(Op::mul, {b.op(Op::flatten, {t}, {{"start_dim", 1}}), 2}));
    b.out(b.op(Op::squeeze, {b.op(Op::unsqueeze, {t, int64_t(2)})}));
    Stack parts = b.ops(Op::chunk, {t, int64_t(3), int64_t(2)});
    for (const Tensor& p : parts[0].tensors()) b.out(b.op(Op::neg, {p}));
    Stack rows = b.ops(Op::unbind, {t, int64_t(1)});
    b.out(b.op(Op::neg, {rows[0].tensors()[3]}));
  }
  b.out(b.op(Op::t, {x}));  // a view of an input returned as is
  b.out(b.op(Op::reshape, {b.op(Op::t, {x}), int64_t(24)}));  // reshape that must copy
  b.out(b.op(Op::mul, {b.op(Op::view, {b.op(Op::reshape, {b.op(Op::t, {x}), int64_t(24)}), int64_t(2), int64_t(12)}), 2}));
  expect_matches_eager(b);
}

TEST(LowerMatchesEager, MovementOpsAreIndexArithmetic) {
  GraphBuilder b;
  Tensor x = b.in(randn({3, 4})), y = b.in(randn({3, 2})), z = b.in(randn({0, 4}));
  Tensor lazy = b.op(Op::sin, {x});
  b.out(b.op(Op::cat, {TensorList{x, lazy, z}, int64_t(1)}));
  b.out(b.op(Op::cat, {TensorList{x, y}, int64_t(2)}));
  b.out(b.op(Op::stack, {TensorList{x, lazy}, int64_t(2)}));
  b.out(b.op(Op::flip, {lazy, IntList{1, 2}}));
  b.out(b.op(Op::roll, {x, IntList{1, -1}, IntList{1, 2}}));
  b.out(b.op(Op::repeat, {x, int64_t(2), int64_t(1), int64_t(3)}));
  b.out(b.op(Op::pad, {x, IntList{1, 2, 0, 1}}, {{"value", 0.5}}));
  Tensor x3 = b.op(Op::unsqueeze, {x, int64_t(1)});
  b.out(b.op(Op::pad, {x3, IntList{2, 1}, "reflect"}));
  b.out(b.op(Op::pad, {x3, IntList{2, 1}, "replicate"}));
  b.out(b.op(Op::pad, {x3, IntList{2, 1}, "circular"}));
  b.out(b.op(Op::tril, {x}));
  b.out(b.op(Op::triu, {lazy, int64_t(1)}));
  b.out(b.op(Op::tril, {x, int64_t(-1)}));
  Tensor idx = b.in(ints({5}, 1, 4));
  b.out(b.op(Op::index_select, {x, int64_t(1), idx}));
  b.out(b.op(Op::index_select, {lazy, int64_t(2), idx}));
  Tensor gi = b.in(ints({3, 2}, 1, 5));
  b.out(b.op(Op::gather, {x, int64_t(2), gi}));
  Tensor ids = b.in(ints({2, 3}, 1, 4));
  b.out(b.op(Op::embedding, {ids, x}));
  b.out(b.op(Op::contiguous, {b.op(Op::t, {x})}));
  b.out(b.op(Op::clone, {x}));
  expect_matches_eager(b);
}

TEST(LowerMatchesEager, CompositesThroughTheirDecompositions) {
  GraphBuilder b;
  Tensor x = b.in(randn({2, 6, 3, 5}));
  Tensor w = b.in(randn({6})), bias = b.in(randn({6}));
  b.out(b.op(Op::group_norm, {x, int64_t(3), w, bias}));
  b.out(b.op(Op::batch_norm, {x, w, bias, b.in(randn({6})), b.in(call1(Op::rand, {IntList{6}}))}));
  b.out(b.op(Op::rms_norm, {x, IntList{3, 5}}));
  b.out(b.op(Op::layer_norm, {x, IntList{3, 5}}));
  b.out(b.op(Op::log_softmax, {x, int64_t(2)}));
  Tensor p = b.in(randn({4, 7})), q = b.in(randn({4, 7}));
  for (const char* red : {"none", "mean", "sum"}) {
    b.out(b.op(Op::mse_loss, {p, q, red}));
    b.out(b.op(Op::l1_loss, {p, q, red}));
    b.out(b.op(Op::binary_cross_entropy_with_logits, {p, b.op(Op::sigmoid, {q})}, {{"reduction", red}}));
    b.out(b.op(Op::binary_cross_entropy, {b.op(Op::sigmoid, {p}), b.op(Op::sigmoid, {q})}, {{"reduction", red}}));
  }
  Tensor t = b.in(ints({4}, 1, 8));
  b.out(b.op(Op::cross_entropy, {p, t}, {{"ignore_index", 3}}));
  b.out(b.op(Op::nll_loss, {b.op(Op::log_softmax, {p, int64_t(2)}), t}, {{"reduction", "sum"}}));
  b.out(b.op(Op::addmm, {b.in(randn({4})), p, b.in(randn({7, 4}))}, {{"beta", 0.5}, {"alpha", 2}}));
  b.out(b.op(Op::dropout, {p, 0.5, false}));
  b.out(b.op(Op::add, {b.op(Op::arange, {int64_t(3), int64_t(11), int64_t(2)}), b.op(Op::eye, {int64_t(4)})}));
  b.out(b.op(Op::full, {IntList{2, 3}, 1.5}));
  expect_matches_eager(b, 1e-4, 1e-4);
}

TEST(LowerMatchesEager, AttentionIsTwoMatmulsAroundOneSoftmaxKernel) {
  for (bool causal : {false, true}) {
    GraphBuilder b;
    Tensor q = b.in(randn({2, 3, 20, 8})), k = b.in(randn({2, 3, 20, 8})), v = b.in(randn({2, 3, 20, 8}));
    b.out(b.op(Op::scaled_dot_product_attention, {q, k, v}, {{"is_causal", causal}}));
    lower::LoweredGraph lg = expect_matches_eager(b, 1e-5, 1e-4);
    EXPECT_EQ(lower::count_externs(lg, false), 2) << lower::print(lg);
    EXPECT_EQ(lower::count_launches(lg), 1) << lower::print(lg);
  }
}

TEST(LowerMatchesEager, ExternsAndFallbacksComputeTheirOps) {
  GraphBuilder b;
  Tensor x = b.in(randn({2, 3, 8, 8}));
  Tensor c = b.op(Op::conv2d, {x, b.in(randn({4, 3, 3, 3})), b.in(randn({4}))});
  b.out(b.op(Op::relu, {c}));
  b.out(b.op(Op::max_pool2d, {c, IntList{2, 2}}));
  b.out(b.op(Op::adaptive_avg_pool2d, {c, IntList{4, 4}}));  // windows of unequal size: eager
  Tensor m = b.in(randn({20, 30}));
  b.out(b.op(Op::mm, {m, b.op(Op::t, {m})}));
  Stack s = b.ops(Op::sort, {m, int64_t(2)});
  b.out(s[0].tensor());
  b.out(s[1].tensor());
  b.out(b.op(Op::cumsum, {m, int64_t(1)}));
  lower::LoweredGraph lg = expect_matches_eager(b, 1e-4, 1e-4);
  EXPECT_EQ(lower::fallback_ops(lg), (std::vector<std::string>{"adaptive_avg_pool2d", "sort", "cumsum"}));
  ASSERT_EQ(lg.perf_hints.size(), 3u);
  EXPECT_EQ(lg.perf_hints[1], "line 7: sort (sort): runs on its eager kernel (not generated)");
}

// batch_norm in training mode updates its running stats in place: values read before it see the
// old stats, later ones the new, as in eager.
TEST(LowerMatchesEager, InPlaceUpdatesKeepEagerOrder) {
  GraphBuilder b;
  Tensor x = b.in(randn({4, 3, 5}));
  Tensor rm = b.in(randn({3})), rv = b.in(call1(Op::rand, {IntList{3}}));
  Tensor before = b.op(Op::mul, {rm, 2});
  b.out(b.op(Op::batch_norm, {x, Value(), Value(), rm, rv, true}));
  b.out(before);
  b.out(b.op(Op::mul, {rm, 2}));
  Tensor y = b.in(randn({3, 4}));
  Tensor old = b.op(Op::exp, {y});
  Tensor row = b.op(Op::select, {y, int64_t(1), int64_t(2)});
  b.op(Op::copy_, {row, b.op(Op::mul, {b.op(Op::select, {y, int64_t(1), int64_t(1)}), 3})});
  b.op(Op::fill_, {b.op(Op::select, {y, int64_t(2), int64_t(1)}), 7.0});
  b.out(old);
  b.out(y);
  b.out(row);
  std::vector<Tensor> twin;
  for (const Tensor& t : b.inputs) twin.push_back(t.clone());
  lower::LoweredGraph lg = lower::lower(b.g);
  std::vector<Tensor> got = lower::run(lg, b.inputs), want = eager(b.g, twin);
  for (size_t i = 0; i < got.size(); i++) EXPECT_LE(closeness(got[i], want[i], 1e-5, 1e-4), 1.0) << i << lower::print(lg);
  for (size_t i = 0; i < twin.size(); i++) EXPECT_LE(closeness(b.inputs[i], twin[i], 0, 0), 1.0) << "input " << i;
  EXPECT_EQ(lower::fallback_ops(lg), (std::vector<std::string>{"batch_norm"}));
}

TEST(LowerMatchesEager, PoolsAreGeneratedWindowReductions) {
  GraphBuilder b;
  Tensor x = b.in(randn({2, 3, 9, 7}));
  Tensor y = b.in(randn({3, 8, 8}));
  b.out(b.op(Op::max_pool2d, {x, IntList{3}, IntList{2}, IntList{1}}));
  b.out(b.op(Op::max_pool2d, {x, IntList{2, 3}, Value(), IntList{1, 1}, IntList{2, 1}, true}));
  b.out(b.op(Op::avg_pool2d, {x, IntList{3}, IntList{2}, IntList{1}}));
  b.out(b.op(Op::avg_pool2d, {x, IntList{3}, IntList{2}, IntList{1}, true, false}));
  b.out(b.op(Op::avg_pool2d, {x, IntList{2}, Value(), IntList{0}, false, true, int64_t(3)}));
  b.out(b.op(Op::adaptive_avg_pool2d, {y, IntList{1, 1}}));
  b.out(b.op(Op::adaptive_max_pool2d, {y, IntList{4, 2}}));
  b.out(b.op(Op::relu, {b.op(Op::avg_pool2d, {b.op(Op::exp, {x}), IntList{2}})}));
  lower::LoweredGraph lg = expect_matches_eager(b);
  EXPECT_EQ(lower::count_externs(lg, false), 0) << lower::print(lg);
  EXPECT_LE(lower::count_launches(lg), 8);
}

TEST(LowerMatchesEager, SizesZeroAndOne) {
  for (Shape s : {Shape{0, 5}, Shape{1, 1}, Shape{1, 7}, Shape{}}) {
    GraphBuilder b;
    Tensor x = b.in(randn(s));
    b.out(b.op(Op::add, {b.op(Op::exp, {x}), 1}));
    b.out(b.op(Op::sum, {x}));
    if (!s.empty()) b.out(b.op(Op::sum, {x, int64_t(-1), true}));
    if (!s.empty() && s[0] > 0) b.out(b.op(Op::softmax, {x, int64_t(-1)}));
    SCOPED_TRACE(shape_string(s));
    expect_matches_eager(b);
  }
}

TEST(LowerMatchesEager, OutputsMayAliasAnInputOrRepeat) {
  GraphBuilder b;
  Tensor x = b.in(randn({3, 4}));
  Tensor y = b.op(Op::relu, {x});
  b.out(y);
  b.out(y);
  b.out(x);
  b.out(b.op(Op::transpose, {x, int64_t(1), int64_t(2)}));
  b.out(b.op(Op::contiguous, {x}));  // contiguous already: eager returns x itself
  b.out(b.op(Op::clone, {x}));
  Tensor z = b.op(Op::zeros, {int64_t(3), int64_t(4)});
  b.out(z);
  b.out(b.op(Op::select, {z, int64_t(1), int64_t(2)}));  // a view of another output stays one
  lower::LoweredGraph lg = expect_matches_eager(b);
  std::vector<Tensor> out = lower::run(lg, b.inputs);
  EXPECT_EQ(out[0].data_ptr(), out[1].data_ptr());
  EXPECT_EQ(out[2].data_ptr(), b.inputs[0].data_ptr());
  EXPECT_EQ(out[3].storage().get(), b.inputs[0].storage().get());
  EXPECT_EQ(out[4].data_ptr(), b.inputs[0].data_ptr());
  EXPECT_NE(out[5].data_ptr(), b.inputs[0].data_ptr());
  EXPECT_EQ(out[7].data_ptr(), static_cast<char*>(out[6].data_ptr()) + 4 * sizeof(float));
}

// Index values are data: an out-of-range one raises eager's IndexError from a check step (naming
// the node that made the op), or the op runs on its eager kernel when the runner calls no
// functions.
TEST(LowerMatchesEager, OutOfRangeIndicesRaiseEagersError) {
  GraphBuilder b;
  Tensor x = b.in(randn({2, 3}));
  Tensor idx = b.in(call1(Op::full, {IntList{1}, int64_t(5)}, {{"dtype", DType::Int64}}));
  b.out(b.op(Op::index_select, {b.op(Op::exp, {x}), int64_t(1), idx}));
  const int node = int(b.g.nodes.size()) - 1;
  std::string want;
  try {
    eager(b.g, b.inputs);
  } catch (const Error& e) {
    want = e.what();
  }
  ASSERT_FALSE(want.empty());
  lower::LoweredGraph lg = lower::lower(b.g, loopir_options());
  EXPECT_EQ(lower::count_externs(lg, false), 1);
  try {
    lower::run(lg, b.inputs);
    ADD_FAILURE() << "no error";
  } catch (const capture::NodeError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::IndexError);
    EXPECT_EQ(std::string(e.what()), want);
    EXPECT_EQ(e.node, node);
  }
  lower::LoweredGraph plain = lower::lower(b.g);  // no function calls: index_select is an extern
  ASSERT_EQ(plain.steps.size(), 2u) << lower::print(plain);
  EXPECT_EQ(plain.steps[1].ext.op, Op::index_select);
  EXPECT_THROW(lower::run(plain, b.inputs), capture::NodeError);
}
