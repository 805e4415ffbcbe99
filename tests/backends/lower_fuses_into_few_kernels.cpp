// Fusion: how many kernels and externs lowering makes of typical patterns, and that each lowered
// graph still computes what eager computes (loop-IR interpreter vs eager).
#include "lower_graphs.h"

using namespace tc;
using namespace tc::testing;

TEST(LowerFusion, TenOpPointwiseChainIsOneKernel) {
  GraphBuilder b;
  ten_op_chain(b);
  lower::LoweredGraph lg = expect_matches_eager(b);
  EXPECT_EQ(lower::count_launches(lg), 1) << lower::print(lg);
  EXPECT_EQ(lower::count_externs(lg, false), 0);
}

TEST(LowerFusion, SoftmaxLogSoftmaxLayerNormAreOneKernelEach) {
  for (Op op : {Op::softmax, Op::log_softmax, Op::layer_norm}) {
    GraphBuilder b;
    Tensor x = b.in(randn({8, 3, 37}));
    Tensor y = op == Op::layer_norm ? b.op(op, {x, IntList{37}, b.in(randn({37})), b.in(randn({37}))})
                                    : b.op(op, {x, int64_t(-1)});
    b.out(y);
    lower::LoweredGraph lg = expect_matches_eager(b);
    EXPECT_EQ(lower::count_launches(lg), 1) << op_name(op) << "\n" << lower::print(lg);
    EXPECT_EQ(lower::count_externs(lg, false), 0) << op_name(op);
  }
}

TEST(LowerFusion, GroupRmsAndBatchNormAreOneKernelEach) {
  for (Op op : {Op::group_norm, Op::rms_norm, Op::batch_norm}) {
    GraphBuilder b;
    Tensor x = b.in(randn({2, 6, 5, 3}));
    Tensor w = b.in(randn({6})), bias = b.in(randn({6}));
    Tensor y = op == Op::group_norm ? b.op(op, {x, int64_t(3), w, bias})
             : op == Op::rms_norm   ? b.op(op, {x, IntList{5, 3}})
                                    : b.op(op, {x, w, bias, b.in(randn({6})), b.in(call1(Op::rand, {IntList{6}}))});
    b.out(y);
    lower::LoweredGraph lg = expect_matches_eager(b);
    EXPECT_EQ(lower::count_launches(lg), 1) << op_name(op) << "\n" << lower::print(lg);
  }
}

TEST(LowerFusion, OutputsOfOneShapeShareAKernel) {
  GraphBuilder b;
  Tensor x = b.in(randn({7, 9}));
  Stack mx = b.ops(Op::max_dim, {x, int64_t(2)});
  Stack vm = b.ops(Op::var_mean, {x, IntList{2}});
  for (const Value& v : mx) b.out(v.tensor());
  for (const Value& v : vm) b.out(v.tensor());
  b.out(b.op(Op::exp, {x}));
  b.out(b.op(Op::cos, {x}));
  lower::LoweredGraph lg = expect_matches_eager(b);
  EXPECT_EQ(lower::count_launches(lg), 2) << lower::print(lg);
  // max and argmax come from one loop, var and mean from one pair of loops
  int loops = 0;
  for (const lower::Kernel& k : lg.kernels)
    for (const lower::Stmt& s : k.body) loops += s.kind == lower::Stmt::Kind::Loop;
  EXPECT_EQ(loops, 3) << lower::print(lg);
}

TEST(LowerFusion, SoftmaxOverAMiddleDimIsOneKernel) {
  GraphBuilder b;
  Tensor x = b.in(randn({4, 9, 5}));
  b.out(b.op(Op::softmax, {x, int64_t(2)}));
  lower::LoweredGraph lg = expect_matches_eager(b);
  EXPECT_EQ(lower::count_launches(lg), 1) << lower::print(lg);
}

TEST(LowerFusion, CrossEntropyIsOneKernelForEveryReduction) {
  for (const char* red : {"none", "mean", "sum"}) {
    GraphBuilder b;
    Tensor x = b.in(randn({6, 11}));
    Tensor t = b.in(call1(Op::randint, {int64_t(1), int64_t(12), IntList{6}}));
    b.out(b.op(Op::cross_entropy, {x, t}, {{"reduction", red}}));
    lower::LoweredGraph lg = expect_matches_eager(b);
    // mean and sum: a two-level reduction (each row's logsumexp in loops, the sum over rows
    // across the outer iterations)
    EXPECT_EQ(lower::count_launches(lg), 1) << red << "\n" << lower::print(lg);
    EXPECT_EQ(lg.kernels[0].two_level(), std::string(red) != "none") << red;
    // one extern step: the range check of the targets (eager raises for a target out of range)
    EXPECT_EQ(lower::count_externs(lg, false), 1);
    EXPECT_EQ(lower::count_externs(lg, true), 0);
  }
}

// A runner with device checks (the CUDA backend): index_select, gather, embedding and the targets
// of cross_entropy are read by the kernels themselves, which flag bad values (flag_if) for the
// graph's IndexCheck; raising a check gives the op's eager error for the value. No check steps.
TEST(LowerFusion, WithDeviceChecksIndexOpsFuseAndFlagBadValues) {
  lower::LowerOptions o;
  o.device_checks = true;
  for (Op op : {Op::embedding, Op::index_select, Op::gather, Op::cross_entropy}) {
    GraphBuilder b;
    Tensor x = b.in(randn({6, 11}));
    Tensor i = b.in(call1(Op::randint, {int64_t(1), int64_t(7), op == Op::gather ? IntList{6, 3} : IntList{4}}));
    Tensor y = op == Op::embedding      ? b.op(op, {i, x})
             : op == Op::index_select ? b.op(op, {x, int64_t(1), i})
             : op == Op::gather       ? b.op(op, {x, int64_t(2), i})
                                      : b.op(op, {b.op(Op::narrow, {x, int64_t(1), int64_t(1), int64_t(4)}), i});
    b.out(b.op(Op::mul, {y, 2.0}));
    lower::LoweredGraph lg = expect_matches_eager(b, 1e-5, 1e-4, o);
    EXPECT_EQ(lower::count_externs(lg, false), 0) << op_name(op) << "\n" << lower::print(lg);
    EXPECT_EQ(lower::count_launches(lg), 1) << op_name(op) << "\n" << lower::print(lg);
    ASSERT_EQ(lg.index_checks.size(), 1u) << op_name(op);
    int flags = 0;
    for (const lower::Kernel& k : lg.kernels)
      for (const lower::Instr& in : k.instrs) flags += in.op == lower::Opc::Math && in.sop == lower::ScalarOp::flag_if;
    EXPECT_EQ(flags, 1) << op_name(op) << "\n" << lower::print(lg);
    try {
      lg.index_checks[0].raise(40, {}, Device{});
      ADD_FAILURE() << op_name(op) << ": raise did not raise";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::IndexError) << op_name(op) << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
    }
  }
}

// Class weights, ignore_index, label smoothing, class-probability targets, a spatial dim: still one
// kernel, nothing on eager (the weights at the targets are read through the targets' check).
TEST(LowerFusion, CrossEntropyWithWeightsSmoothingOrProbabilitiesIsOneKernel) {
  for (const char* red : {"none", "mean", "sum"})
    for (int variant = 0; variant < 5; variant++) {
      GraphBuilder b;
      Shape s = variant == 4 ? Shape{3, 5, 4} : Shape{6, 11};
      Tensor x = b.in(randn(s));
      Tensor w = b.in(call1(Op::rand, {IntList{s[1]}}));
      Shape ts = s;
      ts.erase(ts.begin() + 1);
      Tensor t = variant == 3 ? b.in(call1(Op::softmax, {randn(s), int64_t(2)}))
                              : b.in(call1(Op::randint, {int64_t(1), s[1] + 1, IntList(ts)}));
      Value weight = variant == 1 || variant >= 2 ? Value(w) : Value();
      double smoothing = variant >= 2 ? 0.2 : 0.0;
      int64_t ignore = variant == 3 ? -100 : 2;
      b.out(variant == 0 ? b.op(Op::nll_loss, {b.op(Op::log_softmax, {x, int64_t(2)}), t, w}, {{"reduction", red}, {"ignore_index", ignore}})
                         : b.op(Op::cross_entropy, {x, t, weight}, {{"reduction", red}, {"ignore_index", ignore},
                                                                    {"label_smoothing", smoothing}}));
      lower::LoweredGraph lg = expect_matches_eager(b, 1e-5, 1e-4);
      EXPECT_EQ(lower::count_launches(lg), 1) << red << " variant " << variant << "\n" << lower::print(lg);
      EXPECT_EQ(lower::count_externs(lg, true), 0) << red << " variant " << variant;
      EXPECT_TRUE(lg.perf_hints.empty()) << lg.perf_hints[0];
    }
}

TEST(LowerFusion, LinearBiasReluIsOneGemmAndOneKernel) {
  GraphBuilder b;
  Tensor x = b.in(randn({32, 64}));
  Tensor w = b.in(randn({48, 64}));
  Tensor bias = b.in(randn({48}));
  b.out(b.op(Op::relu, {b.op(Op::linear, {x, w, bias})}));
  lower::LoweredGraph lg = expect_matches_eager(b, 1e-4, 1e-4);
  EXPECT_EQ(lower::count_externs(lg, false), 1) << lower::print(lg);
  EXPECT_EQ(lower::count_externs(lg, true), 0);
  EXPECT_LE(lower::count_launches(lg), 1) << lower::print(lg);
}

TEST(LowerFusion, TinyMatmulIsAGeneratedReductionWithItsEpilogue) {
  GraphBuilder b;
  Tensor x = b.in(randn({10, 10}));
  Tensor w = b.in(randn({10, 10}));
  Tensor bias = b.in(randn({10}));
  b.out(b.op(Op::sigmoid, {b.op(Op::relu, {b.op(Op::linear, {x, w, bias})})}));
  lower::LoweredGraph lg = expect_matches_eager(b);
  EXPECT_EQ(lower::count_externs(lg, false), 0) << lower::print(lg);
  // the weight transposed (read along the outputs, not gathered), then the matmul with its epilogue
  EXPECT_EQ(lower::count_launches(lg), 2) << lower::print(lg);
}

// The seed model (scripts/models/seed_layers.lua): linear, then 64 layers of linear, relu,
// sigmoid, linear, relu, on [10, 10]. Whole, it must need as many distinct kernels as one layer.
static GraphBuilder seed_model(int layers) {
  GraphBuilder b;
  Tensor h = b.in(randn({10, 10}));
  auto linear = [&](const Tensor& x) { return b.op(Op::linear, {x, b.in(randn({10, 10})), b.in(randn({10}))}); };
  h = linear(h);
  for (int l = 0; l < layers; l++) {
    h = b.op(Op::sigmoid, {b.op(Op::relu, {linear(h)})});
    h = b.op(Op::relu, {linear(h)});
  }
  b.out(h);
  return b;
}

TEST(LowerFusion, SixtyFourIdenticalLayersShareOneLayersKernels) {
  GraphBuilder one = seed_model(1), two = seed_model(2), all = seed_model(64);
  lower::LoweredGraph l1 = expect_matches_eager(one), l2 = lower::lower(two.g), l64 = lower::lower(all.g);
  EXPECT_EQ(l64.kernels.size(), l2.kernels.size()) << lower::print(l2);
  EXPECT_LE(l64.kernels.size(), l1.kernels.size() + 1) << lower::print(l1);
  EXPECT_EQ(lower::count_launches(l64), 2 * (1 + 64 * 2))
      << "per linear: one kernel transposing its weight, one with the matmul and its epilogue";
  EXPECT_EQ(lower::count_externs(l64, false), 0);
  // The whole model still computes eager's result.
  std::vector<Tensor> got = lower::run(l64, all.inputs), want = eager(all.g, all.inputs);
  EXPECT_LE(closeness(got[0], want[0], 1e-5, 1e-4), 1.0);
}

// A value with reductions in it read by several kernels stays lazy (recomputed in each reader)
// only while it reads few buffers: a gradient summed along a residual stream, g + (g - mean(g * x)
// * x) layer after layer, each layer's g also read by a row sum (a norm's statistics), is stored
// once it grows, so no kernel recomputes every earlier layer (GPT-2's backward did: kernels growing
// from 65 to 290 us layer after layer). Work per output of the busiest kernel: 12 layers as 3.
TEST(LowerFusion, ResidualGradientChainIsStoredNotRecomputedPerReader) {
  auto busiest = [](int layers) {
    GraphBuilder b;
    Tensor g = b.in(randn({8, 16}));
    for (int l = 0; l < layers; l++) {
      Tensor x = b.in(randn({8, 16}));
      Tensor m = b.op(Op::mean, {b.op(Op::mul, {g, x}), IntList{-1}, true});
      g = b.op(Op::add, {g, b.op(Op::sub, {g, b.op(Op::mul, {m, x})})});
      b.out(b.op(Op::sum, {g, IntList{1}}));
    }
    b.out(g);
    lower::LoweredGraph lg = expect_matches_eager(b);
    size_t most = 0;
    for (const lower::Kernel& k : lg.kernels) {
      size_t outs = 0;
      for (const lower::BufferParam& p : k.buffers) outs += p.written;
      most = std::max(most, k.instrs.size() / std::max<size_t>(1, outs));
    }
    return most;
  };
  size_t three = busiest(3), twelve = busiest(12);
  EXPECT_LE(twelve, three) << "instructions per output of the busiest kernel";
}
