// Dynamic dims stay symbolic (one lowered graph, one set of kernels, serves every size), the
// static memory plan reuses dead buffers without overlapping live ones, and the printed form of a
// small lowered graph (golden).
#include "lower_graphs.h"

using namespace tc;
using namespace tc::testing;

TEST(LowerDynamicDims, OneLoweringServesEverySize) {
  GraphBuilder b;
  Tensor x = b.in(randn({6, 8}), /*dynamic0=*/true);
  Tensor w = b.in(randn({32, 8}));
  Tensor s = b.op(Op::softmax, {b.op(Op::mul, {x, 2}), int64_t(-1)});
  b.out(s);
  b.out(b.op(Op::sum, {x, int64_t(1)}));
  b.out(b.op(Op::relu, {b.op(Op::linear, {x, w})}));
  b.out(b.op(Op::mean, {b.op(Op::t, {x})}, {{"dim", IntList{2}}}));
  lower::LoweredGraph lg = lower::lower(b.g);
  ASSERT_EQ(lg.symbols.size(), 1u);
  bool symbolic = false;
  for (const lower::Step& st : lg.steps)
    for (const lower::SymInt& z : st.launch.sizes) symbolic = symbolic || !z.is_const();
  EXPECT_TRUE(symbolic) << lower::print(lg);
  EXPECT_NE(lower::print(lg).find("s0"), std::string::npos);
  for (int64_t rows : {6, 2, 13, 1}) {
    std::vector<Tensor> in = {randn({rows, 8}), b.inputs[1]};
    std::vector<Tensor> got = lower::run(lg, in), want = eager(b.g, in);
    for (size_t i = 0; i < got.size(); i++) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << rows;
      EXPECT_LE(closeness(got[i], want[i], 1e-5, 1e-4), 1.0) << "rows " << rows << " output " << i;
    }
  }
}

TEST(LowerDynamicDims, ReshapeOfADynamicDimKeepsItSymbolic) {
  GraphBuilder b;
  Tensor x = b.in(randn({4, 3, 5}), true);
  b.out(b.op(Op::layer_norm, {b.op(Op::reshape, {x, int64_t(-1), int64_t(5)}), IntList{5}}));
  lower::LoweredGraph lg = lower::lower(b.g);
  EXPECT_EQ(lower::count_launches(lg), 1) << lower::print(lg);
  for (int64_t n : {4, 7}) {
    std::vector<Tensor> in = {randn({n, 3, 5})};
    EXPECT_LE(closeness(lower::run(lg, in)[0], eager(b.g, in)[0], 1e-5, 1e-4), 1.0) << n;
  }
}

TEST(LowerDynamicDims, SizesThatDoNotFollowTheDynamicDimAreRefused) {
  GraphBuilder b;
  Tensor x = b.in(randn({6, 4}), true);
  b.out(b.op(Op::view, {x, int64_t(24)}));  // 24 is fixed: no symbolic form
  try {
    lower::lower(b.g);
    ADD_FAILURE() << "lowered";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplementedError) << e.what();
  }
}

// No two temps live at the same step overlap in the arena; the arena is smaller than their sum.
TEST(LowerMemoryPlan, DeadBuffersAreReusedLiveOnesNeverOverlap) {
  GraphBuilder b;
  Tensor h = b.in(randn({40, 40}));
  for (int i = 0; i < 6; i++) h = b.op(Op::mm, {b.op(Op::sin, {h}), b.in(randn({40, 40}))});
  b.out(h);
  lower::LoweredGraph lg = expect_matches_eager(b, 1e-4, 1e-4);
  std::vector<int> first(lg.buffers.size(), -1), last(lg.buffers.size(), -1);
  for (int s = 0; s < int(lg.steps.size()); s++) {
    auto touch = [&](int buf) {
      if (first[buf] < 0) first[buf] = s;
      last[buf] = s;
    };
    const lower::Step& st = lg.steps[s];
    if (st.kind == lower::Step::Kind::Launch)
      for (int buf : st.launch.buffers) touch(buf);
    else {
      for (const lower::BufferView& v : st.ext.inputs) touch(v.buffer);
      touch(st.ext.output.buffer);
    }
  }
  int64_t total = 0;
  int temps = 0;
  for (size_t i = 0; i < lg.buffers.size(); i++) {
    const lower::Buffer& a = lg.buffers[i];
    if (a.kind != lower::Buffer::Kind::Temp) continue;
    temps++;
    ASSERT_GE(a.offset, 0);
    EXPECT_EQ(a.offset % 64, 0);
    int64_t abytes = a.numel.const_value() * 4;
    total += abytes;
    EXPECT_LE(a.offset + abytes, lg.arena_bytes_static);
    for (size_t j = i + 1; j < lg.buffers.size(); j++) {
      const lower::Buffer& c = lg.buffers[j];
      if (c.kind != lower::Buffer::Kind::Temp) continue;
      bool live_together = !(last[i] < first[j] || last[j] < first[i]);
      bool overlap = a.offset < c.offset + c.numel.const_value() * 4 && c.offset < a.offset + abytes;
      EXPECT_FALSE(live_together && overlap) << i << " and " << j << "\n" << lower::print(lg);
    }
  }
  EXPECT_GE(temps, 10);
  EXPECT_LT(lg.arena_bytes_static, total / 2) << lower::print(lg);
}

TEST(LowerPrint, SmallGraphGolden) {
  GraphBuilder b;
  Tensor x = b.in(randn({2, 3}));
  Tensor y = b.in(randn({3}));
  b.out(b.op(Op::sum, {b.op(Op::relu, {b.op(Op::add, {x, y})}), int64_t(2)}));
  lower::LoweredGraph lg = expect_matches_eager(b);
  // Index math hoisted out of the loop, relu as a select, the float sum accumulated in float64.
  EXPECT_EQ(lower::print(lg),
      "buf0: input 0 float32[6]\n"
      "buf1: input 1 float32[3]\n"
      "buf2: output 0 float32[2]\n"
      "kernel k0_sum_relu_add(b0: float32, b1: float32, b2: float32 out)  # nodes 4 3 2\n"
      "  %0 = const.i64 2\n"
      "  %2 = const.i64 3\n"
      "  %11 = const.f32 0\n"
      "  for outer [%0]\n"
      "    %1 = outer 0\n"
      "    %5 = mul.i64 %1, %2\n"
      "    loop [%2]\n"
      "      %4 = loopvar 0\n"
      "      %7 = add.i64 %5, %4\n"
      "      %8 = load.f32 b0[%7]\n"
      "      %9 = load.f32 b1[%4]\n"
      "      %10 = add.f32 %8, %9\n"
      "      %12 = lt.bool %10, %11\n"
      "      %13 = where.f32 %12, %11, %10\n"
      "      %14 = cast.f64 %13\n"
      "      r0: sum %14 -> %15\n"
      "    %16 = cast.f32 %15\n"
      "    store b2[%1] = %16\n"
      "launch k0_sum_relu_add(buf0, buf1, buf2)\n"
      "outputs: buf2[2 : 1]\n"
      "arena 0 bytes\n");
}
