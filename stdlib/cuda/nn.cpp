// CUDA kernels of the nn group. Normalisations (layer_norm, rms_norm, group_norm: one block per
// row, statistics in double like the CPU; batch_norm: with batch statistics one kernel
// (batch_norm.cpp), otherwise per-channel statistics in double, the running-stat update on the
// device, then one fused scale-and-shift pass), embedding (the
// index_select kernel), dropout (the CPU's Philox bernoulli stream, fused), and
// scaled_dot_product_attention: float32 without a mask or dropout as one fused kernel
// (attention.cpp), otherwise composed of native ops (cuBLAS batched GEMMs, masking and the
// softmax kernel). Losses: loss.cpp; interpolate: interpolate.cpp.
#include <cmath>

#include "cpu/nn.h"
#include "cpu/optim.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kBlock = 256;


// mode 0: layer_norm, 1: rms_norm, 2: group_norm (rows = N * G of length cg * s).
void norm_rows(int mode, const Tensor& x, const Tensor& out, int64_t rows, int64_t n, const Tensor& w, const Tensor& b,
               double eps, int64_t G, int64_t cg, int64_t s) {
  if (rows == 0 || n == 0) {
    return;
  }
  int device = out.device().index;
  std::string T = ctype(x.dtype()), A = mtype(x.dtype());
  auto f = kernels(device, "normrows:" + T, [&] {
    return prelude() + block_sum_src() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "extern \"C\" __global__ void __launch_bounds__(256) nrm(const T* __restrict__ x, T* __restrict__ out, "
           "const A* __restrict__ w, const A* __restrict__ b, i64 n, double eps, int mode, i64 G, i64 cg, i64 s) {\n"
           "  __shared__ double sm[9];\n"
           "  i64 row = blockIdx.x;\n  const T* p = x + row * n;\n  T* o = out + row * n;\n"
           "  double mean = 0, var = 0;\n"
           "  if (mode == 1) {\n"
           "    double q = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) { double v = (double)cvt<A>(p[i]); q += v * v; }\n"
           "    var = block_sum(q, sm) / n;\n"
           "  } else {\n"
           "    double t = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) t += (double)cvt<A>(p[i]);\n"
           "    mean = block_sum(t, sm) / n;\n"
           "    double q = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) { double d = (double)cvt<A>(p[i]) - mean; q += d * d; }\n"
           "    var = block_sum(q, sm) / n;\n"
           "  }\n"
           "  A rstd = (A)(1.0 / sqrt(var + eps)), mu = (A)mean;\n"
           "  if (mode == 2) {\n"
           "    i64 g = row % G;\n"
           "    for (i64 i = threadIdx.x; i < n; i += 256) {\n"
           "      i64 ch = g * cg + i / s;\n"
           "      A sc = rstd * (w ? w[ch] : (A)1), sh = (b ? b[ch] : (A)0) - mu * sc;\n"
           "      o[i] = Cv<T>::f(cvt<A>(p[i]) * sc + sh);\n    }\n"
           "  } else {\n"
           "    for (i64 i = threadIdx.x; i < n; i += 256) {\n"
           "      A v = (cvt<A>(p[i]) - mu) * rstd;\n      if (w) v *= w[i];\n      if (b) v += b[i];\n"
           "      o[i] = Cv<T>::f(v);\n    }\n  }\n}\n";
  }, {"nrm"})[0];
  const void* xp = x.data_ptr();
  void* op = out.data_ptr();
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const void* bp = b.defined() ? b.data_ptr() : nullptr;
  void* args[] = {&xp, &op, &wp, &bp, &n, &eps, &mode, &G, &cg, &s};
  launch(device, f, (unsigned)rows, kBlock, args);
}

// Per-row mean and sum of squared deviations (double) of a contiguous rows x len tensor.
Tensor row_moments(const Tensor& x, int64_t rows, int64_t len) {
  Tensor st = Tensor::empty({rows, 2}, DType::Float64, x.device());
  int device = x.device().index;
  std::string T = ctype(x.dtype()), A = mtype(x.dtype());
  auto f = kernels(device, "moments:" + T, [&] {
    return prelude() + block_sum_src() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "extern \"C\" __global__ void __launch_bounds__(256) mom(const T* __restrict__ x, double* st, i64 n) {\n"
           "  __shared__ double sm[9];\n  const T* p = x + (i64)blockIdx.x * n;\n"
           "  double t = 0;\n  for (i64 i = threadIdx.x; i < n; i += 256) t += (double)cvt<A>(p[i]);\n"
           "  double mean = n ? block_sum(t, sm) / n : 0.0;\n"
           "  double q = 0;\n  for (i64 i = threadIdx.x; i < n; i += 256) { double d = (double)cvt<A>(p[i]) - mean; q += d * d; }\n"
           "  q = block_sum(q, sm);\n"
           "  if (threadIdx.x == 0) { st[2 * blockIdx.x] = mean; st[2 * blockIdx.x + 1] = q; }\n}\n";
  }, {"mom"})[0];
  const void* xp = x.data_ptr();
  void* sp = st.data_ptr();
  void* args[] = {&xp, &sp, &len};
  launch(device, f, (unsigned)rows, kBlock, args);
  return st;
}

Tensor opt_as(const Value& v, DType dt) {
  if (v.is_none()) return Tensor();
  const Tensor& t = v.tensor();
  Tensor d = t;
  if (t.device().is_cpu()) {
    d = Tensor::empty(t.sizes(), t.dtype(), Device{DeviceType::CUDA, 0});
    d.copy_from(t);
  }
  return contiguous_as(d, dt);
}

// Eval mode with running statistics already on the device in one floating dtype (the usual
// case: a model's buffers): y = (x - rm) / sqrt(rv + eps) * w + b in one pass with the channel's
// factors computed inline. The general path below takes six launches and four conversions for
// the same result, which made batch norm the most expensive op of an eager ResNet forward.
bool batch_norm_eval(const Tensor& x, const Stack& a, const Tensor& out, double eps) {
  if (a[3].is_none() || a[4].is_none()) return false;
  const Tensor& rm = a[3].tensor();
  DType pt = rm.dtype();
  const void* p[4] = {};
  for (int i = 0; i < 4; i++) {
    const Value& v = a[i < 2 ? 3 + i : i - 1];  // running_mean, running_var, weight, bias
    if (v.is_none()) continue;
    const Tensor& t = v.tensor();
    if (t.dtype() != pt || !t.device().is_cuda() || !t.is_contiguous() || t.numel() != x.sizes()[1]) return false;
    p[i] = t.data_ptr();
  }
  if (!is_floating(pt)) return false;
  int64_t n = out.numel(), C = x.sizes()[1];
  if (n == 0) return true;
  int64_t S = n / (x.sizes()[0] * C);
  int device = out.device().index;
  DType dt = x.dtype();
  std::string T = ctype(dt), P = ctype(pt), A = pt == DType::Float64 || dt == DType::Float64 ? "double" : "float";
  std::string I = n < (int64_t(1) << 31) ? "unsigned" : "u64";
  auto f = kernels(device, "bneval:" + T + P + I, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + P + " P;\ntypedef " + A + " A;\ntypedef " + I + " I;\n"
           "extern \"C\" __global__ void bneval(const T* __restrict__ x, T* __restrict__ y, const P* __restrict__ rm, "
           "const P* __restrict__ rv, const P* __restrict__ w, const P* __restrict__ b, i64 n64, i64 C64, i64 S64, double eps) {\n"
           "  I n = (I)n64, C = (I)C64, S = (I)S64;\n"
           "  for (I i = (I)blockIdx.x * 256 + threadIdx.x; i < n; i += (I)gridDim.x * 256) {\n"
           "    I c = (i / S) % C;\n"
           "    A sc = (A)1 / sqrt(cvt<A>(rv[c]) + (A)eps);\n"
           "    if (w) sc *= cvt<A>(w[c]);\n"
           "    A v = (cvt<A>(x[i]) - cvt<A>(rm[c])) * sc;\n"
           "    if (b) v += cvt<A>(b[c]);\n"
           "    y[i] = Cv<T>::f(v);\n  }\n}\n";
  }, {"bneval"})[0];
  const void* xp = x.data_ptr();
  void* yp = out.data_ptr();
  void* args[] = {&xp, &yp, &p[0], &p[1], &p[2], &p[3], &n, &C, &S, &eps};
  int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, (int64_t)dev(device).sm_count * 32);
  launch(device, f, (unsigned)std::max<int64_t>(blocks, 1), kBlock, args);
  return true;
}

bool batch_norm(const Stack& a, const TensorMeta& m, Stack* result) {
  const Tensor& x0 = a[0].tensor();
  DType dt = x0.dtype(), ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor x = contiguous_as(x0, dt), out = empty_from_meta(m);
  *result = {Value(out)};
  bool training = a[5].to_bool();
  double momentum = a[6].to_double(), eps = a[7].to_double();
  if (!training && out.is_contiguous() && batch_norm_eval(x, a, out, eps)) return true;
  if (training && batch_norm_train(x, a, out)) return true;
  if (training) cpu::count_batch(a);
  int64_t N = x.sizes()[0], C = x.sizes()[1], S = 1;
  for (int64_t d = 2; d < x.dim(); d++) S *= x.sizes()[d];
  int64_t count = N * S;
  int device = out.device().index;
  Tensor stats;  // [C, 2] double: mean, var (biased) or sum of squared deviations (training)
  if (training) {
    Tensor xp = contiguous_as(x.as_strided({C, N, S}, {S, C * S, 1}, x.offset()), dt);
    stats = row_moments(xp, C, count);
  } else {
    Tensor rm = opt_as(a[3], DType::Float64), rv = opt_as(a[4], DType::Float64);
    stats = Tensor::empty({C, 2}, DType::Float64, out.device());
    copy_strided(stats.as_strided({C}, {2}, 0), rm);
    copy_strided(stats.as_strided({C}, {2}, 1), rv);
  }
  Tensor w = opt_as(a[1], DType::Float64), b = opt_as(a[2], DType::Float64);
  Tensor rm = training && !a[3].is_none() ? opt_as(a[3], DType::Float64) : Tensor();
  Tensor rv = training && !a[4].is_none() ? opt_as(a[4], DType::Float64) : Tensor();
  Tensor ss = Tensor::empty({C, 2}, ct, out.device());
  std::string A = mtype(ct);
  auto fin = kernels(device, "bnfin:" + A, [&] {
    return prelude() + "typedef " + A + " A;\n"
           "extern \"C\" __global__ void bnfin(double* st, const double* w, const double* b, double* rm, double* rv, A* ss, "
           "i64 C, i64 count, int training, double momentum, double eps) {\n"
           "  i64 c = (i64)blockIdx.x * 256 + threadIdx.x;\n  if (c >= C) return;\n"
           "  double mean = st[2 * c], var = st[2 * c + 1];\n"
           "  if (training) {\n"
           "    if (count) {\n"
           "      if (rm) rm[c] = momentum * mean / 1.0 + (1 - momentum) * rm[c];\n"
           "      if (rv) rv[c] = momentum * var / (double)(count - 1) + (1 - momentum) * rv[c];\n"
           "    }\n"
           "    var = count ? var / count : 0.0;\n  }\n"
           "  double sc = 1.0 / sqrt(var + eps) * (w ? w[c] : 1.0);\n"
           "  ss[2 * c] = (A)sc;\n  ss[2 * c + 1] = (A)((b ? b[c] : 0.0) - mean * sc);\n}\n";
  }, {"bnfin"})[0];
  {
    void* sp = stats.data_ptr();
    const void* wp = w.defined() ? w.data_ptr() : nullptr;
    const void* bp = b.defined() ? b.data_ptr() : nullptr;
    void* rmp = rm.defined() ? rm.data_ptr() : nullptr;
    void* rvp = rv.defined() ? rv.data_ptr() : nullptr;
    void* ssp = ss.data_ptr();
    int tr = training ? 1 : 0;
    void* args[] = {&sp, &wp, &bp, &rmp, &rvp, &ssp, &C, &count, &tr, &momentum, &eps};
    launch(device, fin, (unsigned)((C + kBlock - 1) / kBlock), kBlock, args);
  }
  for (auto [run, upd] : {std::pair{&a[3], &rm}, std::pair{&a[4], &rv}}) {
    if (!upd->defined()) continue;
    Tensor dst = run->tensor();
    if (dst.same(*upd)) dst.bump_version();
    else dst.copy_from(*upd);
  }
  int64_t n = out.numel();
  if (n == 0) return true;
  std::string T = ctype(dt);
  auto ap = kernels(device, "bnapply:" + T + A, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "extern \"C\" __global__ void bnap(const T* __restrict__ x, T* __restrict__ y, const A* __restrict__ ss, i64 n, i64 C, i64 S) {\n"
           "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
           "    i64 c = (i / S) % C;\n    y[i] = Cv<T>::f(cvt<A>(x[i]) * ss[2 * c] + ss[2 * c + 1]);\n  }\n}\n";
  }, {"bnap"})[0];
  const void* xp = x.data_ptr();
  void* yp = out.data_ptr();
  const void* ssp = ss.data_ptr();
  void* args[] = {&xp, &yp, &ssp, &n, &C, &S};
  int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, (int64_t)dev(device).sm_count * 32);
  launch(device, ap, (unsigned)std::max<int64_t>(blocks, 1), kBlock, args);
  return true;
}

double machine_eps(DType t) {
  switch (t) {
    case DType::Float16: return 0.0009765625;
    case DType::BFloat16: return 0.0078125;
    case DType::Float64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-07;
  }
}

bool sdpa(const Stack& a, const TensorMeta& m, Stack* result) {
  DType dt = m.dtype, ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  const Tensor& q0 = a[0].tensor();
  int64_t e = q0.sizes().back(), s = a[1].tensor().sizes().end()[-2];
  if (e == 0 || s == 0) return false;
  double scale = a[6].is_none() ? 1.0 / std::sqrt((double)e) : a[6].to_double();
  if (a[3].is_none() && a[4].to_double() == 0 && dt == DType::Float32) {  // one fused kernel
    Tensor out = empty_from_meta(m);
    if (flash_attention(q0, a[1].tensor(), a[2].tensor(), a[5].to_bool(), scale, out)) {
      *result = {Value(out)};
      return true;
    }
  }
  Tensor q = contiguous_as(q0, ct), k = contiguous_as(a[1].tensor(), ct), v = contiguous_as(a[2].tensor(), ct);
  Tensor scores = call1(Op::matmul, {q, call1(Op::transpose, {k, (int64_t)-2, (int64_t)-1})});
  scores = call1(Op::mul, {scores, scale});
  int64_t l = q.sizes().end()[-2];
  if (a[5].to_bool()) {
    Tensor causal = call1(Op::triu, {call1(Op::ones, {l, s}, {{"dtype", Value(DType::Bool)}, {"device", Value(q.device())}}),
                                     (int64_t)1});
    scores = call1(Op::masked_fill, {scores, causal, -INFINITY});
  }
  if (!a[3].is_none()) {
    Tensor mask = a[3].tensor();
    if (mask.dtype() == DType::Bool) scores = call1(Op::masked_fill, {scores, call1(Op::logical_not, {mask}), -INFINITY});
    else scores = call1(Op::add, {scores, contiguous_as(mask, ct)});
  }
  Tensor p = call1(Op::softmax, {scores, (int64_t)-1});
  // the decomposition's draw (and the CPU kernel's): one dropout over every slice's probabilities
  if (a[4].to_double() > 0) p = call1(Op::dropout, {p, a[4].to_double(), true});
  Tensor o = call1(Op::matmul, {p, v});
  Tensor out = empty_from_meta(m);
  out.copy_from(o);
  *result = {Value(out)};
  return true;
}

}  // namespace

bool nn(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::layer_norm: case Op::rms_norm: {
      const Tensor& x0 = a[0].tensor();
      DType dt = x0.dtype(), ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
      Tensor x = contiguous_as(x0, dt), out = empty_from_meta(m[0]);
      *result = {Value(out)};
      int64_t n = shape_numel(Shape(a[1].ints().begin(), a[1].ints().end()));
      int64_t rows = n ? x.numel() / n : 0;
      Tensor w = opt_as(a[2], ct), b = op == Op::layer_norm ? opt_as(a[3], ct) : Tensor();
      double eps = op == Op::layer_norm ? a[4].to_double() : a[3].is_none() ? machine_eps(dt) : a[3].to_double();
      norm_rows(op == Op::layer_norm ? 0 : 1, x, out, rows, n, w, b, eps, 1, 1, 1);
      return true;
    }
    case Op::group_norm: {
      const Tensor& x0 = a[0].tensor();
      DType dt = x0.dtype(), ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
      Tensor x = contiguous_as(x0, dt), out = empty_from_meta(m[0]);
      *result = {Value(out)};
      int64_t N = x.sizes()[0], C = x.sizes()[1], G = a[1].to_int(), S = 1;
      for (int64_t d = 2; d < x.dim(); d++) S *= x.sizes()[d];
      Tensor w = opt_as(a[2], ct), b = opt_as(a[3], ct);
      norm_rows(2, x, out, N * G, C / G * S, w, b, a[4].to_double(), G, C / G, S);
      return true;
    }
    case Op::batch_norm: return batch_norm(a, m[0], result);
    case Op::_batch_norm_backward: return batch_norm_backward(a, m, result);
    case Op::embedding: {
      const Tensor& ids = a[0].tensor();
      const Tensor& w = a[1].tensor();
      Tensor flat = contiguous_as(ids, DType::Int64);
      flat = flat.as_strided({ids.numel()}, {1}, flat.offset());
      const int64_t rows = w.sizes()[0];
      // index_select's error, said in embedding's words (now, or from a CUDA graph's check read later)
      auto as_embedding = [rows](auto&& select) {
        try {
          return select();
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::IndexError) throw;
          TC_FAIL(IndexError, "embedding(): an index is out of range for %lld embeddings (ids are 1-based): %s",
                  (long long)rows, e.what());
        }
      };
      const int checks = capture_device_checks();
      Tensor r = as_embedding([&] { return call1(Op::index_select, {w, (int64_t)1, flat}); });
      wrap_capture_device_checks(checks, [as_embedding](DeviceCheckDecoder d) -> DeviceCheckDecoder {
        return [d, as_embedding](int64_t code, int64_t detail) { as_embedding([&] { d(code, detail); }); };
      });
      *result = {Value(r.as_strided(m[0].sizes, m[0].strides, r.offset()))};
      return true;
    }
    case Op::dropout: {
      const Tensor& x = a[0].tensor();
      double p = a[1].to_double();
      if (!a[2].to_bool() || p == 0) {
        Tensor out = empty_from_meta(m[0]);
        out.copy_from(x);
        *result = {Value(out)};
        return true;
      }
      *result = {Value(dropout_cuda(x, p, m[0]))};
      return true;
    }
    case Op::scaled_dot_product_attention: return sdpa(a, m[0], result);
    case Op::cross_entropy: case Op::nll_loss: case Op::mse_loss: case Op::l1_loss: case Op::binary_cross_entropy:
    case Op::binary_cross_entropy_with_logits:
      return loss(op, a, m, result);
    case Op::interpolate: return interpolate(a, m[0], result);
    TC_FUSED_OPTIM_OPS: return fused_optim(op, a, result);
    default: return false;
  }
}

}  // namespace tc::cuda
