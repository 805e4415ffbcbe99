// Lowered graphs of real ops (lowering's own output, not hand-built kernels) run through the CPU
// code generator equal the loop-IR interpreter (the reference every code generator is checked
// against) and eager: pointwise chains with broadcasts, transposed inputs, softmax/log_softmax/
// layer_norm, reductions along each dim, argmax, cross entropy, linear (extern GEMM) with its
// epilogue, tiny matmuls, integer and bool math, float16/bfloat16, empty and single-element
// tensors, and the 64-layer seed model compiled whole.
#include <chrono>

#include "cpu/compile.h"
#include "lower_graphs.h"
#include "tc/cpu_backend.h"

using namespace tc;
using namespace tc::testing;

namespace {

// Runs `b` lowered on the interpreter, the CPU code generator and eager; generated and
// interpreted results agree to float reassociation, both agree with eager to DESIGN.md §4.
void expect_generated_matches(GraphBuilder& b, const char* what, double atol = 1e-5, double rtol = 1e-4) {
  SCOPED_TRACE(what);
  setenv("TC_CACHE_DIR", "", 1);
  lower::LoweredGraph lg = lower::lower(b.g);
  backends::cpu::Program p = backends::cpu::compile_lowered(lg);
  std::vector<Tensor> got = p.run(capture::borrow(b.inputs));
  std::vector<Tensor> ref = lower::run(lg, b.inputs), want = eager(b.g, b.inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    bool low = want[i].dtype() == DType::Float16 || want[i].dtype() == DType::BFloat16;
    EXPECT_LE(closeness(got[i], ref[i], low ? 1e-2 : 1e-6, low ? 1e-2 : 1e-5), 1.0)
        << "generated vs interpreter, output " << i << "\n" << b.g.print_code() << lower::print(lg);
    EXPECT_LE(closeness(got[i], want[i], low ? 1e-2 : atol, low ? 1e-2 : rtol), 1.0)
        << "generated vs eager, output " << i << "\n" << b.g.print_code() << lower::print(lg);
  }
}

TEST(CpuMatchesInterpreter, PointwiseChainsBroadcastsAndTransposes) {
  {
    GraphBuilder b;
    ten_op_chain(b);
    expect_generated_matches(b, "10-op chain with a broadcast row");
  }
  {
    GraphBuilder b;
    Tensor x = b.in(randn({17, 33})), y = b.in(randn({33, 1}));
    Tensor xt = b.op(Op::transpose, {x, int64_t(1), int64_t(2)});
    b.out(b.op(Op::mul, {b.op(Op::add, {xt, y}), b.op(Op::abs, {xt})}));
    expect_generated_matches(b, "transposed input plus a column");
  }
  for (Shape s : {Shape{0, 5}, Shape{1}, Shape{}}) {
    GraphBuilder b;
    Tensor x = b.in(randn(s));
    b.out(b.op(Op::exp, {b.op(Op::neg, {x})}));
    expect_generated_matches(b, "empty, one-element and 0-dim tensors");
  }
}

TEST(CpuMatchesInterpreter, RowKernelsAndReductions) {
  for (Op op : {Op::softmax, Op::log_softmax, Op::layer_norm}) {
    GraphBuilder b;
    Tensor x = b.in(randn({8, 3, 37}));
    b.out(op == Op::layer_norm ? b.op(op, {x, IntList{37}, b.in(randn({37})), b.in(randn({37}))})
                               : b.op(op, {x, int64_t(-1)}));
    expect_generated_matches(b, op_name(op));
  }
  {
    GraphBuilder b;
    Tensor x = b.in(randn({4, 9, 5}));
    b.out(b.op(Op::softmax, {x, int64_t(2)}));
    expect_generated_matches(b, "softmax over a middle dim");
  }
  for (int64_t dim : {1, 2}) {
    GraphBuilder b;
    Tensor x = b.in(randn({7, 130}));
    b.out(b.op(Op::sum, {x, IntList{dim}}));
    b.out(b.op(Op::mean, {x, IntList{dim}, true}));
    b.out(b.op(Op::amax, {x, IntList{dim}}));
    b.out(b.op(Op::argmax, {x, dim}));
    expect_generated_matches(b, dim == 1 ? "reductions over dim 1" : "reductions over dim 2");
  }
  for (const char* red : {"none", "mean"}) {
    GraphBuilder b;
    Tensor x = b.in(randn({6, 11}));
    Tensor t = b.in(call1(Op::randint, {int64_t(1), int64_t(12), IntList{6}}));
    b.out(b.op(Op::cross_entropy, {x, t}, {{"reduction", red}}));
    expect_generated_matches(b, "cross entropy");
  }
}

// Two-level reductions (one kernel: row reductions in loops, the sum over rows across the outer
// iterations): cross_entropy's mean and sum over many rows (split into parts run on threads, then
// combined in order), with a spatial dim and ignore_index, and other full reductions of row
// reductions.
TEST(CpuMatchesInterpreter, TwoLevelReductions) {
  for (Shape s : {Shape{20000, 7}, Shape{5, 9, 4}, Shape{1, 3}}) {
    for (const char* red : {"mean", "sum"}) {
      GraphBuilder b;
      Tensor x = b.in(randn(s));
      Shape ts = s;
      ts.erase(ts.begin() + 1);
      Tensor t = b.in(call1(Op::randint, {int64_t(1), s[1] + 1, IntList(ts)}));
      b.out(b.op(Op::cross_entropy, {x, t}, {{"reduction", red}, {"ignore_index", int64_t(2)}}));
      lower::LoweredGraph lg = lower::lower(b.g);
      EXPECT_EQ(lower::count_launches(lg), 1) << lower::print(lg);
      expect_generated_matches(b, "cross entropy, two-level", 1e-5, 1e-4);
    }
  }
  {
    GraphBuilder b;
    Tensor x = b.in(randn({3000, 33}));
    b.out(b.op(Op::sum, {b.op(Op::amax, {x, IntList{2}})}));
    b.out(b.op(Op::amin, {b.op(Op::logsumexp, {x, IntList{2}})}));
    b.out(b.op(Op::mean, {b.op(Op::log_softmax, {x, int64_t(2)})}));
    expect_generated_matches(b, "full reductions of row reductions", 1e-4, 1e-4);
  }
}

TEST(CpuMatchesInterpreter, LinearExternsAndTinyMatmuls) {
  {
    GraphBuilder b;
    Tensor x = b.in(randn({32, 64})), w = b.in(randn({48, 64})), bias = b.in(randn({48}));
    b.out(b.op(Op::relu, {b.op(Op::linear, {x, w, bias})}));
    expect_generated_matches(b, "linear + bias + relu", 1e-4, 1e-4);
  }
  {
    GraphBuilder b;
    Tensor x = b.in(randn({10, 10})), w = b.in(randn({10, 10})), bias = b.in(randn({10}));
    b.out(b.op(Op::sigmoid, {b.op(Op::relu, {b.op(Op::linear, {x, w, bias})})}));
    expect_generated_matches(b, "tiny matmul");
  }
}

TEST(CpuMatchesInterpreter, IntegerBoolAndHalfMath) {
  {
    GraphBuilder b;
    Tensor x = b.in(call1(Op::randint, {int64_t(-50), int64_t(50), IntList{9, 13}}));
    Tensor y = b.in(call1(Op::randint, {int64_t(1), int64_t(9), IntList{13}}));
    Tensor q = b.op(Op::div, {x, y}, {{"rounding_mode", "floor"}});
    Tensor r = b.op(Op::remainder, {x, y});
    Tensor m = b.op(Op::mul, {q, y});
    b.out(b.op(Op::add, {m, r}));  // floor division and remainder recombine to x
    b.out(b.op(Op::where, {b.op(Op::gt, {x, y}), x, q}));
    expect_generated_matches(b, "int64 floor division, remainder, where");
  }
  for (DType d : {DType::Float16, DType::BFloat16}) {
    GraphBuilder b;
    Tensor x = b.in(randn({5, 67}, d));
    b.out(b.op(Op::softmax, {b.op(Op::mul, {x, 1.5}), int64_t(-1)}));
    expect_generated_matches(b, d == DType::Float16 ? "float16 softmax" : "bfloat16 softmax");
  }
}

// In-place ops inside the graph (extern steps writing a view of their input) and an op without a
// lowering: values read before the write were computed before it.
TEST(CpuMatchesInterpreter, InPlaceExternsWriteThroughTheirViews) {
  GraphBuilder b;
  Tensor x = b.in(randn({6, 5})), y = b.in(randn({6, 5}));
  Tensor t = b.op(Op::add, {x, 1.0});
  Tensor before = b.op(Op::mul, {t, 2.0});  // reads t before the fill
  Tensor row = b.op(Op::select, {t, int64_t(1), int64_t(2)});
  b.op(Op::fill_, {row, 0.5});
  Tensor u = b.op(Op::mul, {y, 3.0});
  b.op(Op::copy_, {b.op(Op::select, {u, int64_t(2), int64_t(1)}), b.op(Op::select, {t, int64_t(2), int64_t(3)})});
  b.out(before);
  b.out(b.op(Op::add, {t, u}));
  b.out(b.op(Op::sort, {y, int64_t(-1)}));
  expect_generated_matches(b, "fill_ and copy_ through views, sort on its eager kernel");
}

// An index out of range raises eager's error from the compiled graph, as a NodeError naming the
// node (capture reports the user's line of it).
TEST(CpuMatchesInterpreter, IndexErrorsRaiseAsTheirNode) {
  setenv("TC_CACHE_DIR", "", 1);
  GraphBuilder b;
  Tensor x = b.in(randn({5, 3}));
  Tensor idx = b.in(call1(Op::randint, {int64_t(1), int64_t(4), IntList{4}}));
  b.out(b.op(Op::exp, {b.op(Op::index_select, {x, int64_t(1), idx})}));
  const int node = int(b.g.nodes.size()) - 2;
  ASSERT_EQ(b.g.nodes[node].op, Op::index_select);
  backends::Compiled c = backends::find("cpu").compile(b.g, {});
  expect_generated_matches(b, "index_select in range");
  Tensor bad = call1(Op::full, {IntList{4}, int64_t(100)}, {{"dtype", DType::Int64}});
  std::vector<Tensor> ins = {b.inputs[0], bad};
  try {
    c.run(capture::borrow(ins));
    ADD_FAILURE() << "an index out of range ran";
  } catch (const capture::NodeError& e) {
    EXPECT_EQ(e.node, node) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::IndexError) << e.what();
  }
}

// The seed model (linear, then 64 x [linear, relu, sigmoid, linear, relu] on [10, 10]) compiled
// whole: as many distinct kernels as one layer, and the generated graph equals eager.
TEST(CpuMatchesInterpreter, SeedModelWholeCompilesOneLayersKernels) {
  GraphBuilder b;
  Tensor h = b.in(randn({10, 10}));
  auto linear = [&](const Tensor& x) { return b.op(Op::linear, {x, b.in(randn({10, 10})), b.in(randn({10}))}); };
  h = linear(h);
  for (int l = 0; l < 64; l++) {
    h = b.op(Op::sigmoid, {b.op(Op::relu, {linear(h)})});
    h = b.op(Op::relu, {linear(h)});
  }
  b.out(h);
  backends::cpu::reset_stats();
  expect_generated_matches(b, "64-layer seed model");
  backends::cpu::Stats s = backends::cpu::stats();
  EXPECT_LE(s.kernels_compiled + s.memory_hits, 4) << "distinct kernels of the whole model";
}

}  // namespace
