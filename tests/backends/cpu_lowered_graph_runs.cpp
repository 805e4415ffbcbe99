// A hand-built LoweredGraph through compile_lowered + Program::run: launches of one deduplicated
// kernel at two sizes, a temporary in the arena, an extern matmul (OpenBLAS through tc::call)
// between them, an output allocated on its own, an output that views an input, dynamic sizes
// from the inputs' dims; and the in-memory cache compiling a structure once per process.
#include <gtest/gtest.h>

#include "cpu_kernel_builder.h"
#include "tc/cpu_backend.h"

namespace tc::backends::cpu::test {
namespace {

using lower::Buffer;
using lower::BufferView;
using lower::SymInt;

// y[i] = max(x[i], 0) * 2 over n = size 0.
lower::Kernel relu2() {
  KernelBuilder b;
  b.buffer(DType::Float32, false);
  b.buffer(DType::Float32, true);
  Val n = b.pre(b.size(0));
  b.k.outer = {n};
  Val i = b.outer(0), x = b.load(0, i, Ty::F32), z = b.cf(0), m = b.math(ScalarOp::maximum, Ty::F32, x, z);
  Val two = b.cf(2), y = b.math(ScalarOp::mul, Ty::F32, m, two);
  b.code({i, x, m, y}, {{1, i, y}});
  b.k.name = "k0_relu_mul";
  return b.k;
}

BufferView view(int buffer, std::vector<SymInt> sizes, std::vector<SymInt> strides, SymInt offset = SymInt::of(0)) {
  return {buffer, offset, std::move(sizes), std::move(strides)};
}

// x: [s0, 6] (s0 dynamic), w: [6, 5]. out = relu(relu(x) * 2 @ w) * 2, and x^T as a view.
lower::LoweredGraph graph() {
  lower::LoweredGraph g;
  g.kernels = {relu2()};
  SymInt s0 = SymInt::sym(0);
  g.symbols = {{0, 0}};
  g.buffers = {
      {Buffer::Kind::Input, DType::Float32, s0 * SymInt::of(6), 0, -1},   // 0: x
      {Buffer::Kind::Input, DType::Float32, SymInt::of(30), 1, -1},      // 1: w
      {Buffer::Kind::Temp, DType::Float32, s0 * SymInt::of(6), -1, 0},   // 2: t = relu(x) * 2 (arena)
      {Buffer::Kind::Temp, DType::Float32, s0 * SymInt::of(5), -1, -1},  // 3: m = t @ w (own storage)
      {Buffer::Kind::Output, DType::Float32, s0 * SymInt::of(5), 0, -1}, // 4: out
  };
  lower::Step k1;
  k1.launch = {0, {0, 2}, {s0 * SymInt::of(6)}};
  lower::Step mm;
  mm.kind = lower::Step::Kind::Extern;
  mm.ext.op = Op::mm;
  mm.ext.inputs = {view(2, {s0, SymInt::of(6)}, {SymInt::of(6), SymInt::of(1)}),
                   view(1, {SymInt::of(6), SymInt::of(5)}, {SymInt::of(5), SymInt::of(1)})};
  mm.ext.output = view(3, {s0, SymInt::of(5)}, {SymInt::of(5), SymInt::of(1)});
  mm.ext.arg_kinds = {lower::Extern::kTensorArg, lower::Extern::kTensorArg};
  lower::Step k2;
  k2.launch = {0, {3, 4}, {s0 * SymInt::of(5)}};
  g.steps = {k1, mm, k2};
  g.outputs = {view(4, {s0, SymInt::of(5)}, {SymInt::of(5), SymInt::of(1)}),
               view(0, {SymInt::of(6), s0}, {SymInt::of(1), SymInt::of(6)})};
  return g;
}

TEST(CpuLoweredGraph, LaunchesExternsArenaAndOutputViewsMatchEager) {
  disk_cache_off();
  Program p = compile_lowered(graph());
  ASSERT_EQ(p.kernels.size(), 1u);
  for (int64_t rows : {4, 1, 9, 0}) {  // one compiled graph serves every s0, empty included
    Tensor x = Tensor::empty({rows, 6}, DType::Float32), w = Tensor::empty({6, 5}, DType::Float32);
    for (int64_t i = 0; i < rows * 6; i++) x.data<float>()[i] = (float)((i * 7) % 11) - 5;
    for (int64_t i = 0; i < 30; i++) w.data<float>()[i] = (float)((i * 3) % 7) - 3;
    std::vector<Tensor> outs = p.run(capture::borrow({x, w}));
    ASSERT_EQ(outs.size(), 2u);
    Tensor two = Tensor::scalar(2, DType::Float32);
    Tensor t = call1(Op::mul, {call1(Op::relu, {x}), two});
    Tensor want = call1(Op::mul, {call1(Op::relu, {call1(Op::mm, {t, w})}), two});
    ASSERT_EQ(outs[0].sizes(), want.sizes());
    for (int64_t i = 0; i < rows * 5; i++) EXPECT_FLOAT_EQ(outs[0].data<float>()[i], want.data<float>()[i]);
    // The second output views x's storage, transposed.
    EXPECT_EQ(outs[1].storage(), x.storage());
    EXPECT_EQ(outs[1].sizes(), (Shape{6, rows}));
    EXPECT_EQ(outs[1].strides(), (Shape{1, 6}));
  }
}

// A static graph keeps its arena across calls, but never while a tensor of an earlier call views
// it: an output that views an arena buffer keeps its values after the next call.
TEST(CpuLoweredGraph, KeptArenaIsNotReusedUnderALiveView) {
  disk_cache_off();
  lower::LoweredGraph g;
  g.kernels = {relu2()};
  g.buffers = {{Buffer::Kind::Input, DType::Float32, SymInt::of(8), 0, -1},
               {Buffer::Kind::Temp, DType::Float32, SymInt::of(8), -1, 0}};
  lower::Step k;
  k.launch = {0, {0, 1}, {SymInt::of(8)}};
  g.steps = {k};
  g.outputs = {view(1, {SymInt::of(8)}, {SymInt::of(1)})};
  g.arena_bytes_static = 32;
  Program p = compile_lowered(g);
  auto input = [](float v) {
    Tensor x = Tensor::empty({8}, DType::Float32);
    for (int i = 0; i < 8; i++) x.data<float>()[i] = v + (float)i;
    return x;
  };
  Tensor x1 = input(1), x2 = input(100);
  Tensor o1 = p.run(capture::borrow({x1}))[0];
  Tensor o2 = p.run(capture::borrow({x2}))[0];
  EXPECT_NE(o1.data_ptr(), o2.data_ptr());
  for (int i = 0; i < 8; i++) {
    EXPECT_EQ(o1.data<float>()[i], 2 * (1 + i));
    EXPECT_EQ(o2.data<float>()[i], 2 * (100 + i));
  }
  void* kept = o1.data_ptr();
  o1 = Tensor();
  o2 = Tensor();
  Tensor o3 = p.run(capture::borrow({x2}))[0];
  EXPECT_EQ(o3.data_ptr(), kept);  // free again: reused
  EXPECT_EQ(o3.data<float>()[7], 2 * 107);
}

TEST(CpuLoweredGraph, IdenticalKernelsCompileOncePerProcess) {
  disk_cache_off();
  reset_stats();
  lower::Kernel a = relu2(), b = relu2();
  b.name = "k7_other_name";
  b.source_nodes = {3, 4};
  lower::LoweredGraph g;
  g.kernels = {a, b};
  Program p = compile_lowered(g);
  Stats s = stats();
  // Kernels that differ only in name and sources are one compiled function.
  EXPECT_EQ(p.kernels[0].fn, p.kernels[1].fn);
  Program q = compile_lowered(g);
  EXPECT_EQ(q.kernels[0].fn, p.kernels[0].fn);
  Stats s2 = stats();
  EXPECT_EQ(s2.kernels_compiled, s.kernels_compiled);
  EXPECT_EQ(s2.memory_hits, s.memory_hits + 2);
  EXPECT_LE(s.kernels_compiled, 1);
}

}  // namespace
}  // namespace tc::backends::cpu::test
