// conv2d float32 on the CPU, shape by shape (layers of ResNet-18/50, DenseNet-121, Inception-v3 at
// the inputs of bench/models_cpu.lua), each next to its peer measured in the same run: one
// cblas_sgemm of the same GEMM size (O x C*KH*KW x N*OH*OW), i.e. the convolution's arithmetic
// at OpenBLAS's rate without any im2col. Usage: bench_conv_cpu [THREADS [REPS]].
// Prints best-of-REPS ms per call, GFLOP/s, and tc / sgemm (> 1: slower than the bare GEMM).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tc/ops.h"
#include "tc/parallel.h"

using namespace tc;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename F>
double best_of(int reps, F&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

Tensor filled(const Shape& s, unsigned seed) {
  Tensor t = Tensor::empty(s, DType::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return t;
}

struct Case {
  const char* name;
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : get_num_threads();
  int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  set_num_threads(threads);
  std::vector<Case> cases = {
      {"r18 stem 7x7/2", 2, 3, 128, 128, 64, 7, 7, 2, 2, 3, 3},
      {"r18 l1 3x3", 2, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1},
      {"r18 l2 3x3/2", 2, 64, 32, 32, 128, 3, 3, 2, 2, 1, 1},
      {"r18 l2 3x3", 2, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1},
      {"r18 l2 1x1/2", 2, 64, 32, 32, 128, 1, 1, 2, 2, 0, 0},
      {"r18 l3 3x3", 2, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1},
      {"r18 l4 3x3", 2, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1},
      {"r50 l1 1x1 64>256", 2, 64, 32, 32, 256, 1, 1, 1, 1, 0, 0},
      {"r50 l1 1x1 256>64", 2, 256, 32, 32, 64, 1, 1, 1, 1, 0, 0},
      {"r50 l3 1x1 1024>256", 2, 1024, 8, 8, 256, 1, 1, 1, 1, 0, 0},
      {"dn121 1x1 256>128", 2, 256, 32, 32, 128, 1, 1, 1, 1, 0, 0},
      {"dn121 3x3 128>32", 2, 128, 32, 32, 32, 3, 3, 1, 1, 1, 1},
      {"dn121 3x3 128>32 4x4", 2, 128, 4, 4, 32, 3, 3, 1, 1, 1, 1},
      {"inc 3x3 32>32 149", 1, 32, 149, 149, 32, 3, 3, 1, 1, 0, 0},
      {"inc 3x3 32>64 147", 1, 32, 147, 147, 64, 3, 3, 1, 1, 1, 1},
      {"inc 3x3 80>192 73", 1, 80, 73, 73, 192, 3, 3, 1, 1, 0, 0},
      {"inc 1x7 128>128 17", 1, 128, 17, 17, 128, 1, 7, 1, 1, 0, 3},
      {"inc 7x1 160>192 17", 1, 160, 17, 17, 192, 7, 1, 1, 1, 3, 0},
      {"inc 3x3 384>384 8", 1, 384, 8, 8, 384, 1, 3, 1, 1, 0, 1},
  };
  printf("conv2d float32, %d threads, best of %d\n", threads, reps);
  printf("%-22s %10s %10s %10s %9s\n", "shape", "tc ms", "GFLOP/s", "sgemm ms", "tc/sgemm");
  double tot_tc = 0, tot_blas = 0;
  for (const Case& c : cases) {
    int64_t OH = (c.H + 2 * c.ph - c.KH) / c.sh + 1, OW = (c.W + 2 * c.pw - c.KW) / c.sw + 1;
    Tensor x = filled({c.N, c.C, c.H, c.W}, 1), w = filled({c.O, c.C, c.KH, c.KW}, 2), b = filled({c.O}, 3);
    Tensor y;
    double t = best_of(reps, [&] {
      y = call1(Op::conv2d, {x, w, b, IntList{c.sh, c.sw}, IntList{c.ph, c.pw}});
    });
    int64_t M = c.O, K = c.C * c.KH * c.KW, P = c.N * OH * OW;
    Tensor bm = filled({K, P}, 4), cm = Tensor::empty({M, P}, DType::Float32);
    double tb = best_of(reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)P, (int)K, 1.0f, w.data<float>(), (int)K,
                  bm.data<float>(), (int)P, 0.0f, cm.data<float>(), (int)P);
    });
    double flops = 2.0 * M * K * P;
    tot_tc += t, tot_blas += tb;
    printf("%-22s %10.3f %10.1f %10.3f %9.2f\n", c.name, t * 1e3, flops / t / 1e9, tb * 1e3, t / tb);
  }
  printf("%-22s %10.3f %10s %10.3f %9.2f\n", "total", tot_tc * 1e3, "", tot_blas * 1e3, tot_tc / tot_blas);
  return 0;
}
