// CUDA eager benchmarks (run on a GPU machine): large pointwise ops in GB/s against a
// device-to-device copy of the same bytes measured in the same run, and the per-op launch
// overhead of small eager ops (µs, host time per call with the stream kept busy-free), and the
// ops whose work depends on the data: sort/topk of long rows (radix path), nonzero, masked_select.
// Usage: bench_cuda_eager [elements (default 2^28)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "tc/cuda.h"
#include "tc/ops.h"

using namespace tc;
using Clock = std::chrono::steady_clock;

static double time_ms(int iters, const std::function<void()>& f) {
  f();
  cuda::synchronize();
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; i++) f();
    cuda::synchronize();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters);
  }
  return best;
}

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::is_available(&why)) {
    printf("CUDA not available: %s\n", why.c_str());
    return 0;
  }
  int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 28;
  const Device D{DeviceType::CUDA, 0};
  printf("device: %s\n", cuda::device_name().c_str());
  Tensor x = call1(Op::randn, {n}, {{"device", Value(D)}});
  Tensor y = call1(Op::randn, {n}, {{"device", Value(D)}});
  Tensor o = Tensor::empty({n}, DType::Float32, D);
  double gb1 = 4.0 * n / 1e9;
  double copy = time_ms(20, [&] { o.copy_from(x); });
  printf("d2d copy (float32, %lld el): %.3f ms, %.0f GB/s (read+write)\n", (long long)n, copy, 2 * gb1 / copy * 1e3);
  struct Case {
    const char* name;
    double bytes;
    std::function<void()> f;
  };
  Case cases[] = {
      {"relu", 2 * gb1, [&] { call1(Op::relu, {x}); }},
      {"add", 3 * gb1, [&] { call1(Op::add, {x, y}); }},
      {"mul_scalar", 2 * gb1, [&] { call1(Op::mul, {x, 2.5}); }},
      {"gelu", 2 * gb1, [&] { call1(Op::gelu, {x}); }},
      {"to_bf16", 1.5 * gb1, [&] { call1(Op::to_dtype, {x, Value(DType::BFloat16)}); }},
      {"add_bcast_row", 2 * gb1, [&] { call1(Op::add, {x.as_strided({n / 1024, 1024}, {1024, 1}, 0), y.as_strided({1024}, {1}, 0)}); }},
      {"add_bcast_chan", 2 * gb1, [&] { call1(Op::add, {x.as_strided({n / (64 * 4096), 64, 4096}, {64 * 4096, 4096, 1}, 0), y.as_strided({64, 1}, {1, 0}, 0)}); }},
      {"sum", 1 * gb1, [&] { call1(Op::sum, {x}); }},
  };
  double copy_gbs = 2 * gb1 / copy * 1e3;
  for (auto& c : cases) {
    double ms = time_ms(20, c.f);
    double gbs = c.bytes / ms * 1e3;
    printf("%-14s %.3f ms  %.0f GB/s  %.0f%% of copy\n", c.name, ms, gbs, 100 * gbs / copy_gbs);
  }
  // Data-dependent ops, ms per call.
  {
    auto randn = [&](IntList s) { return call1(Op::randn, {Value(s)}, {{"device", Value(D)}}); };
    Tensor a = randn({100000}), b = randn({1 << 24}), c = randn({64, 50000});
    Tensor m = call1(Op::gt, {b, 0.0});
    struct Dd {
      const char* name;
      std::function<void()> f;
    };
    Dd dd[] = {
        {"sort_100k", [&] { call(Op::sort, {a, (int64_t)-1, false}); }},
        {"sort_16M", [&] { call(Op::sort, {b, (int64_t)-1, false}); }},
        {"sort_64x50k", [&] { call(Op::sort, {c, (int64_t)-1, false}); }},
        {"topk_100k_k100", [&] { call(Op::topk, {a, (int64_t)100, (int64_t)-1, true, true}); }},
        {"nonzero_16M", [&] { call1(Op::nonzero, {m}); }},
        {"masked_select_16M", [&] { call1(Op::masked_select, {b, m}); }},
    };
    for (auto& k : dd) printf("%-18s %.3f ms\n", k.name, time_ms(5, k.f));
  }
  // Launch overhead: tiny tensors, host time per op.
  Tensor s = call1(Op::ones, {1}, {{"device", Value(D)}});
  int iters = 20000;
  struct Small {
    const char* name;
    std::function<void()> f;
  };
  Small small[] = {
      {"add_tensor_tensor", [&] { call1(Op::add, {s, s}); }},
      {"mul_tensor_number", [&] { call1(Op::mul, {s, 2}); }},
      {"relu", [&] { call1(Op::relu, {s}); }},
      {"sum", [&] { call1(Op::sum, {s}); }},
  };
  for (auto& c : small) {
    double ms = time_ms(iters, c.f);
    printf("overhead %-18s %.2f us/op\n", c.name, ms * 1e3);
  }
  printf("ops native %lld, host fallback %lld\n", (long long)cuda::native_op_count(), (long long)cuda::fallback_op_count());
  return 0;
}
