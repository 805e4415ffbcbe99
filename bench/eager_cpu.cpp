// Eager CPU benchmark of the tensor core, each figure next to its peer measured in the same run:
//   - GB/s of a large float32 add against the machine's memory copy rate (memcpy),
//   - GFLOP/s of a 1024^3 float32 matmul against OpenBLAS's sgemm called directly.
// Usage: bench_eager_cpu [--quick]. Prints one line per figure, then a short table.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of fn, in seconds.
template <typename F>
double best_of(int reps, F&& fn) {
  fn();  // warm up (page faults, thread pool start)
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

Tensor filled(const Shape& s, float v) {
  Tensor t = Tensor::empty(s, DType::Float32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int reps = quick ? 3 : 10;
  int64_t n = quick ? (1 << 22) : (1 << 24);  // elements per operand
  printf("threads: %d\n", get_num_threads());

  // memory copy rate: bytes read + written per second, memcpy in parallel chunks like our kernels
  std::vector<char> src(n * 4 * 2, 1), dst(n * 4 * 2, 0);
  double t_copy = best_of(reps, [&] {
    parallel_for(0, (int64_t)src.size(), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(&dst[b], &src[b], e - b); });
  });
  double copy_gbs = 2.0 * src.size() / t_copy / 1e9;

  Tensor a = filled({n}, 1.5f), b = filled({n}, 2.5f);
  Tensor out;
  double t_add = best_of(reps, [&] { out = call1(Op::add, {a, b}); });
  double add_gbs = 3.0 * n * 4 / t_add / 1e9;

  int64_t m = 1024;
  Tensor x = filled({m, m}, 0.5f), y = filled({m, m}, 0.25f);
  Tensor z = Tensor::empty({m, m}, DType::Float32);
  double t_blas = best_of(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f, x.data<float>(), m, y.data<float>(), m,
                0.0f, z.data<float>(), m);
  });
  double t_mm = best_of(reps, [&] { out = call1(Op::matmul, {x, y}); });
  double flops = 2.0 * m * m * m;

  printf("\n%-34s %12s %12s %8s\n", "eager CPU", "tc", "peer", "ratio");
  printf("%-34s %9.2f GB/s %7.2f GB/s %8.2f   (peer: memcpy)\n", "add float32 [16M] (r+r+w bytes)", add_gbs, copy_gbs,
         add_gbs / copy_gbs);
  printf("%-34s %6.1f GFLOP/s %5.1f GFLOP/s %6.2f   (peer: cblas_sgemm)\n", "matmul float32 1024^3", flops / t_mm / 1e9,
         flops / t_blas / 1e9, t_blas / t_mm);
  return 0;
}
