// Hand-built loop-IR kernels through the CPU code generator: reductions (NaN-propagating max/min,
// first-index argmax with NaN winning), a one-kernel softmax with accumulators used across
// statements, float16/bfloat16/uint8 loads and stores, scalar (0-dim) and empty launches, and
// parallel launches equal to serial ones over any chunking of the outer range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cpu_kernel_builder.h"
#include "tc/parallel.h"

namespace tc::backends::cpu::test {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// out_r[row] = reduce(x[row, 0..cols)) for every ReduceOp (Any/All on x != 0); argmax/argmin also
// store their value (Reduction::value).
lower::Kernel row_reduce_kernel(Ty t) {
  KernelBuilder b;
  DType d = dtype_of(t);
  b.buffer(d, false);  // x [rows, cols]
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min,
                          ReduceOp::ArgMax, ReduceOp::ArgMin, ReduceOp::Any, ReduceOp::All};
  for (ReduceOp op : ops) b.buffer(op == ReduceOp::ArgMax || op == ReduceOp::ArgMin ? DType::Int64
                                   : op == ReduceOp::Any || op == ReduceOp::All   ? DType::Bool
                                                                                  : d,
                                   true);
  int vmax = b.buffer(d, true), vmin = b.buffer(d, true);
  Val rows = b.pre(b.size(0)), cols = b.pre(b.size(1));
  b.k.outer = {rows};
  Val r = b.outer(0), j = b.loop_var(0);
  Val idx = b.math(ScalarOp::add, Ty::I64, b.math(ScalarOp::mul, Ty::I64, r, cols), j);
  Val x = b.load(0, idx, t);
  Val nz = b.math(ScalarOp::cast, Ty::Bool, x);
  std::vector<lower::Reduction> reds;
  std::vector<Val> results;
  for (int i = 0; i < 8; i++) {
    ReduceOp op = ops[i];
    bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin, logic = op == ReduceOp::Any || op == ReduceOp::All;
    lower::Reduction red{op, logic ? nz : x, arg ? j : lower::kNoVal, b.acc(i, arg ? Ty::I64 : logic ? Ty::Bool : t)};
    if (arg) red.value = b.acc(i, t, 1);
    reds.push_back(red);
  }
  b.loop({cols}, {j, idx - 1, idx, x, nz}, reds);
  std::vector<lower::Store> stores;
  for (int i = 0; i < 8; i++) stores.push_back({1 + i, r, reds[i].result});
  stores.push_back({vmax, r, reds[4].value});
  stores.push_back({vmin, r, reds[5].value});
  std::vector<Val> code = {r};
  b.code(code, stores);
  return b.k;
}

TEST(CpuKernels, FloatRowReductionsPropagateNaNAndTakeTheFirstExtreme) {
  disk_cache_off();
  CompiledKernel k = compile_one(row_reduce_kernel(Ty::F32));
  // rows: plain, with a NaN, with ties, all -inf, long (vectorized main loop + tail), empty row set below
  std::vector<std::vector<float>> rows = {
      {3, -1, 4, 1, -5, 9, 2, 6}, {1, kNaN, 7, kNaN, -2, 0, 0, 1}, {2, 5, 5, -3, -3, 5, 2, 1},
      {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}};
  const int64_t cols = 8;
  std::vector<float> x;
  for (auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  const int64_t n = (int64_t)rows.size();
  std::vector<float> sum(n), prod(n), mx(n), mn(n), vmax(n), vmin(n);
  std::vector<int64_t> amax(n), amin(n);
  std::vector<char> any(n), all(n);
  void* bufs[] = {x.data(), sum.data(), prod.data(), mx.data(), mn.data(), amax.data(), amin.data(),
                  any.data(), all.data(), vmax.data(), vmin.data()};
  int64_t sizes[] = {n, cols};
  launch(k, bufs, sizes);
  for (int64_t r = 0; r < n; r++) {
    double s = 0, p = 1;
    bool has_nan = false, a = false, l = true;
    int64_t im = 0, in = 0;
    for (int64_t c = 0; c < cols; c++) {
      float v = rows[r][c];
      s += v;
      p *= v;
      a = a || v != 0;
      l = l && v != 0;
      if (std::isnan(v) && !has_nan) im = in = c, has_nan = true;
      if (!has_nan && v > rows[r][im]) im = c;
      if (!has_nan && v < rows[r][in]) in = c;
    }
    SCOPED_TRACE("row " + std::to_string(r));
    if (has_nan) {
      EXPECT_TRUE(std::isnan(sum[r]) && std::isnan(mx[r]) && std::isnan(mn[r]) && std::isnan(vmax[r]));
    } else {
      EXPECT_FLOAT_EQ(sum[r], (float)s);
      EXPECT_EQ(mx[r], *std::max_element(rows[r].begin(), rows[r].end()));
      EXPECT_EQ(mn[r], *std::min_element(rows[r].begin(), rows[r].end()));
      EXPECT_EQ(vmax[r], mx[r]);
      EXPECT_EQ(vmin[r], mn[r]);
    }
    if (!has_nan) EXPECT_FLOAT_EQ(prod[r], (float)p);
    EXPECT_EQ(amax[r], im);
    EXPECT_EQ(amin[r], in);
    EXPECT_EQ(any[r], a);
    EXPECT_EQ(all[r], l);
  }
}

TEST(CpuKernels, LongFloatSumsAreAccurateAndNaNAnywherePropagates) {
  disk_cache_off();
  CompiledKernel k = compile_one(row_reduce_kernel(Ty::F32));
  const int64_t rows = 3, cols = 100003;  // odd: vector main loop plus scalar tail
  std::vector<float> x(rows * cols);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  x[1 * cols + cols - 1] = kNaN;  // NaN in the tail of row 1
  x[2 * cols + 16] = kNaN;        // and in the main loop of row 2
  std::vector<float> out(rows * 10);
  std::vector<int64_t> idx(rows * 2);
  std::vector<char> flags(rows * 2);
  float* o = out.data();
  void* bufs[] = {x.data(), o, o + 3, o + 6, o + 9, idx.data(), idx.data() + 3, flags.data(), flags.data() + 3,
                  o + 12, o + 15};
  int64_t sizes[] = {rows, cols};
  launch(k, bufs, sizes);
  double s = 0;
  float m = -INFINITY;
  int64_t am = 0;
  for (int64_t c = 0; c < cols; c++) {
    s += x[c];
    if (x[c] > m) m = x[c], am = c;
  }
  EXPECT_NEAR(out[0], s, 1e-3);
  EXPECT_EQ(out[6], m);
  EXPECT_EQ(idx[0], am);
  EXPECT_TRUE(std::isnan(out[1]) && std::isnan(out[6 + 1]) && std::isnan(out[9 + 1]));  // sum, max, min of row 1
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[6 + 2]) && std::isnan(out[9 + 2]));
  EXPECT_EQ(idx[1], cols - 1);
  EXPECT_EQ(idx[2], 16);
  EXPECT_EQ(idx[3 + 2], 16);  // argmin: NaN wins too
}

TEST(CpuKernels, IntegerRowReductionsWrapAndCompareSigned) {
  disk_cache_off();
  for (Ty t : {Ty::I32, Ty::I64}) {
    CompiledKernel k = compile_one(row_reduce_kernel(t));
    const int64_t cols = 5, n = 2;
    int64_t big = t == Ty::I32 ? INT32_MAX : INT64_MAX;
    std::vector<int64_t> vals = {3, -7, 0, -7, 2, big, big, 1, -1, 5};
    std::vector<char> x(n * cols * 8);
    for (size_t i = 0; i < vals.size(); i++) {
      if (t == Ty::I32) reinterpret_cast<int32_t*>(x.data())[i] = (int32_t)vals[i];
      else reinterpret_cast<int64_t*>(x.data())[i] = vals[i];
    }
    std::vector<char> o(10 * n * 8);
    std::vector<int64_t> amax(n), amin(n);
    std::vector<char> any(n), all(n);
    auto at = [&](int i) { return (void*)(o.data() + i * n * 8); };
    void* bufs[] = {x.data(), at(0), at(1), at(2), at(3), amax.data(), amin.data(), any.data(), all.data(), at(4), at(5)};
    int64_t sizes[] = {n, cols};
    launch(k, bufs, sizes);
    auto get = [&](int i, int r) -> int64_t {
      return t == Ty::I32 ? reinterpret_cast<int32_t*>(at(i))[r] : reinterpret_cast<int64_t*>(at(i))[r];
    };
    SCOPED_TRACE(t == Ty::I32 ? "int32" : "int64");
    EXPECT_EQ(get(0, 0), -9);
    EXPECT_EQ(get(1, 0), 0);
    EXPECT_EQ(get(2, 0), 3);
    EXPECT_EQ(get(3, 0), -7);
    EXPECT_EQ(amax[0], 0);
    EXPECT_EQ(amin[0], 1);  // first of the two -7
    EXPECT_EQ(get(5, 0), -7);
    EXPECT_EQ(get(0, 1), t == Ty::I32 ? (int64_t)(int32_t)(2u * INT32_MAX + 5) : (int64_t)(2ull * INT64_MAX + 5));
    EXPECT_EQ(amax[1], 0);
    EXPECT_EQ(any[0], 1);
    EXPECT_EQ(all[0], 0);
    EXPECT_EQ(all[1], 1);
  }
}

TEST(CpuKernels, SoftmaxAsOneKernelMatchesDoubleReference) {
  disk_cache_off();
  CompiledKernel k = compile_one(softmax_rows());
  const int64_t rows = 37, cols = 131;
  std::vector<float> x(rows * cols), y(rows * cols);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 3);
  for (float& v : x) v = g(rng);
  void* bufs[] = {x.data(), y.data()};
  int64_t sizes[] = {rows, cols};
  launch(k, bufs, sizes);
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; c++) m = std::max(m, (double)x[r * cols + c]);
    for (int64_t c = 0; c < cols; c++) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; c++) EXPECT_NEAR(y[r * cols + c], std::exp(x[r * cols + c] - m) / s, 1e-6);
  }
}

// y = x (converted through the compute type) between two buffers of the given dtypes.
CompiledKernel copy_kernel(DType from, DType to, Ty via) {
  KernelBuilder b;
  b.buffer(from, false);
  b.buffer(to, true);
  Val n = b.pre(b.size(0));
  b.k.outer = {n};
  Val i = b.outer(0), x = b.load(0, i, via);
  b.code({i, x}, {{1, i, x}});
  return compile_one(b.k);
}

TEST(CpuKernels, HalfAndBFloat16LoadAndStoreLikeEager) {
  disk_cache_off();
  // Every float16 bit pattern through float32 and back is unchanged (NaNs stay NaN).
  CompiledKernel h2h = copy_kernel(DType::Float16, DType::Float16, Ty::F32);
  std::vector<uint16_t> in(65536), out(65536);
  for (int i = 0; i < 65536; i++) in[i] = (uint16_t)i;
  int64_t n = 65536;
  void* b1[] = {in.data(), out.data()};
  launch(h2h, b1, &n);
  for (int i = 0; i < 65536; i++) {
    bool nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
    if (nan) EXPECT_TRUE((out[i] & 0x7c00) == 0x7c00 && (out[i] & 0x3ff)) << i;
    else ASSERT_EQ(out[i], in[i]) << i;
  }
  // float32 -> float16 and -> bfloat16 round as tc::Half / tc::BFloat16 (nearest even, NaN quiet).
  CompiledKernel f2h = copy_kernel(DType::Float32, DType::Float16, Ty::F32);
  CompiledKernel f2b = copy_kernel(DType::Float32, DType::BFloat16, Ty::F32);
  CompiledKernel b2f = copy_kernel(DType::BFloat16, DType::Float32, Ty::F32);
  std::mt19937 rng(11);
  std::vector<float> f(200000);
  for (size_t i = 0; i < f.size(); i++) {
    uint32_t bits = rng();
    if (i % 4 == 0) bits = (bits & 0x8000ffffu) | 0x38000000u;  // near float16's subnormal range
    if (i % 4 == 1) bits = (bits & 0xffff0000u) | 0x8000u;      // exact bfloat16 ties
    std::memcpy(&f[i], &bits, 4);
  }
  n = (int64_t)f.size();
  std::vector<uint16_t> h(f.size()), bf(f.size());
  void* b2[] = {f.data(), h.data()};
  void* b3[] = {f.data(), bf.data()};
  launch(f2h, b2, &n);
  launch(f2b, b3, &n);
  for (size_t i = 0; i < f.size(); i++) {
    uint16_t want_h = Half::from_float(f[i]), want_b = BFloat16::from_float(f[i]);
    if (std::isnan(f[i])) {
      EXPECT_TRUE((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff));
      EXPECT_EQ(bf[i], want_b);
    } else {
      ASSERT_EQ(h[i], want_h) << f[i];
      ASSERT_EQ(bf[i], want_b) << f[i];
    }
  }
  std::vector<float> back(f.size());
  void* b4[] = {bf.data(), back.data()};
  launch(b2f, b4, &n);
  for (size_t i = 0; i < f.size(); i += 97)
    if (!std::isnan(f[i])) EXPECT_EQ(back[i], BFloat16::to_float(bf[i]));
}

TEST(CpuKernels, Uint8AndBoolStoresWrapAndNormalize) {
  disk_cache_off();
  CompiledKernel f2u = copy_kernel(DType::Float32, DType::UInt8, Ty::F32);
  CompiledKernel i2u = copy_kernel(DType::Int32, DType::UInt8, Ty::I32);
  CompiledKernel u2i = copy_kernel(DType::UInt8, DType::Int64, Ty::I32);
  CompiledKernel f2b = copy_kernel(DType::Float32, DType::Bool, Ty::F32);
  std::vector<float> f = {-1.5f, 255.9f, 300.0f, 0.0f, kNaN, -0.0f};
  std::vector<int32_t> i = {-1, 256, 255, 511, 0, 7};
  std::vector<uint8_t> u(6), u2(6);
  std::vector<int64_t> back(6);
  std::vector<char> bl(6);
  int64_t n = 6;
  void* a[] = {f.data(), u.data()};
  void* b[] = {i.data(), u2.data()};
  void* c[] = {u2.data(), back.data()};
  void* d[] = {f.data(), bl.data()};
  launch(f2u, a, &n);
  launch(i2u, b, &n);
  launch(u2i, c, &n);
  launch(f2b, d, &n);
  EXPECT_EQ(u[0], 255);  // -1.5 -> -1 -> 255, as eager
  EXPECT_EQ(u[1], 255);
  EXPECT_EQ(u[2], 44);
  EXPECT_EQ(u2, (std::vector<uint8_t>{255, 0, 255, 255, 0, 7}));
  EXPECT_EQ(back, (std::vector<int64_t>{255, 0, 255, 255, 0, 7}));  // zero-extended
  EXPECT_EQ(bl, (std::vector<char>{1, 1, 1, 0, 1, 0}));
}

// A sum over all elements into a 0-dim output (no outer dims), and empty launches.
TEST(CpuKernels, ScalarOutputAndEmptyExtents) {
  disk_cache_off();
  KernelBuilder b;
  b.buffer(DType::Float64, false);
  b.buffer(DType::Float64, true);
  Val n = b.pre(b.size(0));
  Val j = b.loop_var(0), x = b.load(0, j, Ty::F64), s = b.acc(0, Ty::F64);
  b.loop({n}, {j, x}, {{ReduceOp::Sum, x, lower::kNoVal, s}});
  Val zero = b.ci(0);
  b.code({}, {{1, zero, s}});
  CompiledKernel k = compile_one(b.k);
  std::vector<double> in(1000);
  for (int i = 0; i < 1000; i++) in[i] = i;
  double out = -1;
  void* bufs[] = {in.data(), &out};
  int64_t sz = 1000;
  launch(k, bufs, &sz);
  EXPECT_EQ(out, 999 * 1000 / 2);
  sz = 0;  // empty reduction: the identity
  launch(k, bufs, &sz);
  EXPECT_EQ(out, 0);

  CompiledKernel copy = copy_kernel(DType::Float64, DType::Float64, Ty::F64);
  double sentinel = 42;
  void* c[] = {in.data(), &sentinel};
  launch(copy, c, &sz);  // zero elements: nothing runs
  EXPECT_EQ(sentinel, 42);
}

// y[i, j, k] = x[k, i, j] * 2 + i (a permuted 3-d walk): any chunking of the flat outer range, and
// the thread pool's split, give the serial result.
TEST(CpuKernels, ParallelAndChunkedLaunchesEqualSerial) {
  disk_cache_off();
  KernelBuilder b;
  b.buffer(DType::Float32, false);
  b.buffer(DType::Float32, true);
  Val d0 = b.pre(b.size(0)), d1 = b.pre(b.size(1)), d2 = b.pre(b.size(2));
  b.k.outer = {d0, d1, d2};
  Val i = b.outer(0), j = b.outer(1), k = b.outer(2);
  Val src = b.math(ScalarOp::add, Ty::I64, b.math(ScalarOp::mul, Ty::I64, b.math(ScalarOp::add, Ty::I64,
                   b.math(ScalarOp::mul, Ty::I64, k, d0), i), d1), j);
  Val dst = b.math(ScalarOp::add, Ty::I64, b.math(ScalarOp::mul, Ty::I64, b.math(ScalarOp::add, Ty::I64,
                   b.math(ScalarOp::mul, Ty::I64, i, d1), j), d2), k);
  Val x = b.load(0, src, Ty::F32);
  Val y = b.math(ScalarOp::add, Ty::F32, b.math(ScalarOp::mul, Ty::F32, x, b.cf(2)),
                 b.math(ScalarOp::cast, Ty::F32, i));
  std::vector<Val> body;
  for (Val v = i; v <= y; v++) body.push_back(v);
  b.code(body, {{1, dst, y}});
  CompiledKernel kern = compile_one(b.k);
  int64_t sizes[] = {67, 45, 23};
  const int64_t total = 67 * 45 * 23;
  std::vector<float> in(total), serial(total, -1), par(total, -1), chunked(total, -1);
  for (int64_t t = 0; t < total; t++) in[t] = (float)(t % 1013) * 0.5f;
  void* bs[] = {in.data(), serial.data()};
  kern.fn(bs, sizes, 0, total);
  for (int64_t a = 0; a < 67; a++)
    for (int64_t c = 0; c < 23; c++)
      ASSERT_EQ(serial[(a * 45 + 7) * 23 + c], in[(c * 67 + a) * 45 + 7] * 2 + (float)a);
  const int threads = get_num_threads();
  set_num_threads(4);  // split even on a 1-core machine
  void* bp[] = {in.data(), par.data()};
  launch(kern, bp, sizes);
  set_num_threads(threads);
  EXPECT_EQ(par, serial);
  void* bc[] = {in.data(), chunked.data()};
  std::mt19937 rng(5);
  for (int64_t s = 0; s < total;) {
    int64_t e = std::min(total, s + 1 + (int64_t)(rng() % 100));
    kern.fn(bc, sizes, s, e);
    s = e;
  }
  EXPECT_EQ(chunked, serial);
}

}  // namespace
}  // namespace tc::backends::cpu::test
