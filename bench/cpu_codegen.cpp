// CPU code generator benchmark, figures next to their peers measured in the same run:
//   - a 10-op pointwise chain on 16M float32 as one generated kernel (hand-built loop IR run
//     through compile_lowered + Program::run, output allocated per call) against the same 10 ops
//     run eagerly through tc::call (goal: >= 5x), and its GB/s (x read + y written) against a
//     parallel memcpy of the same bytes (goal: >= 70 %);
//   - softmax over the rows of [4096, 1024] as one generated kernel against eager's softmax;
//   - the compile time (cold, no disk cache).
// Usage: bench_cpu_codegen [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu_kernel_builder.h"
#include "tc/cpu_backend.h"
#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;
using namespace tc::backends::cpu;
using lower::ScalarOp;
using lower::Ty;
using lower::Val;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Best time of each function over `reps` rounds that run them one after another.
std::vector<double> best_of_each(int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<double> best(fns.size(), 1e30);
  for (auto& f : fns) f();  // warm up (page faults, thread pool start)
  for (int r = 0; r < reps; r++)
    for (size_t i = 0; i < fns.size(); i++) {
      double t0 = now();
      fns[i]();
      best[i] = std::min(best[i], now() - t0);
    }
  return best;
}

// y = ((|min((max(x*1.5 + 0.25, 0) - 0.5)^2, 6) + x|) * 0.125) - x, as one kernel over s0 elements.
lower::Kernel chain_kernel() {
  test::KernelBuilder b;
  b.buffer(DType::Float32, false);
  b.buffer(DType::Float32, true);
  Val n = b.pre(b.size(0));
  b.k.outer = {n};
  b.k.name = "k0_pointwise_chain";
  Val i = b.outer(0), x = b.load(0, i, Ty::F32);
  auto m = [&](ScalarOp op, Val a, Val c) { return b.math(op, Ty::F32, a, c); };
  Val v = m(ScalarOp::mul, x, b.cf(1.5));
  v = m(ScalarOp::add, v, b.cf(0.25));
  v = m(ScalarOp::maximum, v, b.cf(0));
  v = m(ScalarOp::sub, v, b.cf(0.5));
  v = m(ScalarOp::mul, v, v);
  v = m(ScalarOp::minimum, v, b.cf(6));
  v = m(ScalarOp::add, v, x);
  v = b.math(ScalarOp::abs, Ty::F32, v);
  v = m(ScalarOp::mul, v, b.cf(0.125));
  v = m(ScalarOp::sub, v, x);
  std::vector<Val> body;
  for (Val j = i; j <= v; j++) body.push_back(j);
  b.code(body, {{1, i, v}});
  return b.k;
}

// One launch of `k` over a graph input [s0, s1] (or [s0]) into an output of the same shape.
lower::LoweredGraph one_kernel_graph(lower::Kernel k, int dims) {
  lower::LoweredGraph g;
  g.kernels = {std::move(k)};
  std::vector<lower::SymInt> sizes, strides;
  lower::SymInt numel = lower::SymInt::of(1);
  for (int d = 0; d < dims; d++) {
    g.symbols.push_back({0, d});
    sizes.push_back(lower::SymInt::sym(d));
    numel = numel * sizes.back();
  }
  strides = dims == 2 ? std::vector<lower::SymInt>{sizes[1], lower::SymInt::of(1)} : std::vector<lower::SymInt>{lower::SymInt::of(1)};
  g.buffers = {{lower::Buffer::Kind::Input, DType::Float32, numel, 0, -1},
               {lower::Buffer::Kind::Output, DType::Float32, numel, 0, -1}};
  lower::Step st;
  st.launch = {0, {0, 1}, sizes};
  g.steps = {st};
  g.outputs = {{1, lower::SymInt::of(0), sizes, strides}};
  return g;
}

Tensor eager_chain(const Tensor& x) {
  Tensor v = call1(Op::mul, {x, 1.5});
  v = call1(Op::add, {v, 0.25});
  v = call1(Op::relu, {v});
  v = call1(Op::sub, {v, 0.5});
  v = call1(Op::mul, {v, v});
  v = call1(Op::clamp, {v, Value(), 6.0});
  v = call1(Op::add, {v, x});
  v = call1(Op::abs, {v});
  v = call1(Op::mul, {v, 0.125});
  return call1(Op::sub, {v, x});
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int reps = quick ? 3 : 10;
  int64_t n = quick ? (1 << 22) : (1 << 24);
  setenv("TC_CACHE_DIR", "", 1);  // measure a cold compile
  printf("threads: %d, elements: %lld\n", get_num_threads(), (long long)n);

  double t0 = now();
  Program p = compile_lowered(one_kernel_graph(chain_kernel(), 1));
  double t_compile = now() - t0;
  Stats s = stats();  // the chain's compile alone (includes creating the JIT)

  Tensor x = Tensor::empty({n}, DType::Float32);
  for (int64_t i = 0; i < n; i++) x.data<float>()[i] = (float)((i * 37) % 1001) / 100.0f - 5.0f;
  std::vector<const Tensor*> in = {&x};
  std::vector<Tensor> out;
  Tensor ref;
  std::vector<char> src(n * 4, 1), dst(n * 4, 0);
  // Interleaved, best of each: the machine is shared, so a slow phase hits all three alike.
  std::vector<double> t = best_of_each(reps, {[&] { out = p.run(in); }, [&] { ref = eager_chain(x); }, [&] {
    parallel_for(0, (int64_t)src.size(), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(&dst[b], &src[b], e - b); });
  }});
  double t_gen = t[0], t_eager = t[1], t_copy = t[2];
  double max_diff = 0;
  for (int64_t i = 0; i < n; i++)
    max_diff = std::max(max_diff, (double)std::abs(out[0].data<float>()[i] - ref.data<float>()[i]));
  double bytes = 2.0 * n * 4;  // x read once, y written once (memcpy: the same bytes)
  double gen_gbs = bytes / t_gen / 1e9, copy_gbs = bytes / t_copy / 1e9;
  printf("pointwise chain (10 ops, %lldM float32): generated %.2f ms, eager %.2f ms -> %.1fx (goal >= 5x)\n",
         (long long)(n >> 20), t_gen * 1e3, t_eager * 1e3, t_eager / t_gen);
  printf("bandwidth: generated %.1f GB/s, memcpy %.1f GB/s -> %.0f %% (goal >= 70 %%)\n", gen_gbs, copy_gbs,
         100 * gen_gbs / copy_gbs);
  printf("max |generated - eager| = %g\n", max_diff);

  // softmax over the rows of [4096, 1024]: one generated kernel against eager's softmax.
  const int64_t rows = quick ? 1024 : 4096, cols = 1024;
  Program sm = compile_lowered(one_kernel_graph(test::softmax_rows(), 2));
  Tensor xs = Tensor::empty({rows, cols}, DType::Float32);
  for (int64_t i = 0; i < rows * cols; i++) xs.data<float>()[i] = (float)((i * 13) % 997) / 100.0f - 5.0f;
  std::vector<const Tensor*> in2 = {&xs};
  Tensor sref;
  std::vector<double> ts = best_of_each(reps, {[&] { out = sm.run(in2); }, [&] { sref = call1(Op::softmax, {xs, -1}); }});
  double t_sm = ts[0], t_sm_eager = ts[1];
  double sm_diff = 0;
  for (int64_t i = 0; i < rows * cols; i++)
    sm_diff = std::max(sm_diff, (double)std::abs(out[0].data<float>()[i] - sref.data<float>()[i]));
  printf("softmax [%lld, %lld]: generated %.2f ms, eager %.2f ms -> %.2fx; max |diff| %g\n", (long long)rows,
         (long long)cols, t_sm * 1e3, t_sm_eager * 1e3, t_sm_eager / t_sm, sm_diff);
  printf("compile of the chain kernel: %.1f ms (codegen %.1f ms, LLVM %.1f ms), kernels compiled %lld\n", t_compile * 1e3,
         s.codegen_s * 1e3, s.llvm_s * 1e3, (long long)s.kernels_compiled);
  return max_diff < 1e-5 && sm_diff < 1e-6 ? 0 : 1;
}
