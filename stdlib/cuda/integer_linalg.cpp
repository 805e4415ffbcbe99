// The linalg cases that cuBLAS and cuDNN do not take (called first by linalg()): integer
// products (mm, bmm, matmul, addmm, baddbmm, linear) and convolutions, and linear with a 1-D
// weight in any dtype. PyTorch's CUDA refuses integer products; the CPU computes them with
// wrapping arithmetic in the tensor's type, so these simple kernels (one thread per output
// element) accumulate in 64-bit unsigned arithmetic and truncate: the same value modulo 2^bits
// in any order. Integer pools run on linalg.cpp's pool kernel (int64 window sums, truncating).
#include "cpu/linalg.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

// A batched matrix operand: element (b, i, j) at data + b*sb + i*sr + j*sc (elements).
struct Operand {
  Tensor t;
  int64_t sb, sr, sc;
};

// t on the device `d` (a wrapped number or CPU 0-dim tensor is copied over).
Tensor on_device(const Tensor& t, Device d) {
  if (t.device() == d) return t;
  Tensor c = Tensor::empty(t.sizes(), t.dtype(), d);
  c.copy_from(t);
  return c;
}

// C (contiguous [B, M, N]) = alpha * A @ B + beta * C, beta == 0 ignoring C.
void igemm(const Tensor& C, int64_t B, int64_t M, int64_t N, int64_t K, const Operand& a, const Operand& b, int64_t alpha,
           int64_t beta) {
  int64_t n = B * M * N;
  if (n == 0) return;
  int device = C.device().index;
  std::string T = ctype(C.dtype());
  auto f = kernels(device, "igemm:" + T, [&] {
    return prelude() + "typedef " + T + " T;\n"
           "struct G { i64 M, N, K, asb, asr, asc, bsb, bsr, bsc; };\n"
           "extern \"C\" __global__ void igemm(const T* __restrict__ A, const T* __restrict__ B, T* C, i64 n, G g, i64 alpha, i64 beta) {\n"
           "  for (i64 idx = (i64)blockIdx.x * 256 + threadIdx.x; idx < n; idx += (i64)gridDim.x * 256) {\n"
           "    i64 j = idx % g.N, i = idx / g.N % g.M, b = idx / (g.M * g.N);\n"
           "    const T* ar = A + b * g.asb + i * g.asr;\n    const T* bc = B + b * g.bsb + j * g.bsc;\n"
           "    u64 acc = 0;\n"
           "    for (i64 k = 0; k < g.K; k++) acc += (u64)(i64)ar[k * g.asc] * (u64)(i64)bc[k * g.bsr];\n"
           "    acc *= (u64)alpha;\n"
           "    if (beta != 0) acc += (u64)beta * (u64)(i64)C[idx];\n"
           "    C[idx] = (T)acc;\n  }\n}\n";
  }, {"igemm"})[0];
  struct G {
    int64_t M, N, K, asb, asr, asc, bsb, bsr, bsc;
  } g{M, N, K, a.sb, a.sr, a.sc, b.sb, b.sr, b.sc};
  const void* ap = a.t.data_ptr();
  const void* bp = b.t.data_ptr();
  void* cp = C.data_ptr();
  void* args[] = {&ap, &bp, &cp, &n, &g, &alpha, &beta};
  launch(device, f, grid_for(n, device), 256, args);
}

Operand mat(const Tensor& t) { return {t, 0, t.strides()[0], t.strides()[1]}; }
Operand batched(const Tensor& t) { return {t, t.strides()[0], t.strides()[1], t.strides()[2]}; }

// out = src broadcast (the epilogue base of addmm/baddbmm/linear's bias).
void init_out(const Tensor& out, const Tensor& src) {
  Tensor s = on_device(src, out.device());
  Shape st(out.dim(), 0);
  int64_t off = out.dim() - s.dim();
  for (int64_t d = 0; d < s.dim(); d++) st[d + off] = s.sizes()[d] == 1 ? 0 : s.strides()[d];
  copy_strided(out, s.as_strided(out.sizes(), st, s.offset()));
}

// t ([*batch, r, c], batch broadcastable to bshape) as a batched operand over numel(bshape).
Operand expand_batch(const Tensor& t, const Shape& bshape, int64_t r, int64_t c) {
  if (t.dim() == 2) return {t, 0, t.strides()[0], t.strides()[1]};
  Shape sz = bshape, st(bshape.size() + 2, 0);
  sz.push_back(r);
  sz.push_back(c);
  int64_t off = (int64_t)sz.size() - t.dim();
  for (int64_t d = 0; d < t.dim(); d++) st[d + off] = t.sizes()[d] == 1 && d < t.dim() - 2 ? 0 : t.strides()[d];
  Tensor e = Tensor::empty(sz, t.dtype(), t.device());
  copy_strided(e, t.as_strided(sz, st, t.offset()));
  return {e, r * c, c, 1};
}

bool product(Op op, const Stack& a, const Tensor& out) {
  switch (op) {
    case Op::mm: case Op::addmm: {
      const Tensor& x = a[op == Op::mm ? 0 : 1].tensor();
      const Tensor& y = a[op == Op::mm ? 1 : 2].tensor();
      int64_t beta = op == Op::addmm ? a[3].to_int() : 0, alpha = op == Op::addmm ? a[4].to_int() : 1;
      if (beta != 0) init_out(out, a[0].tensor());
      igemm(out, 1, x.sizes()[0], y.sizes()[1], x.sizes()[1], mat(x), mat(y), alpha, beta);
      return true;
    }
    case Op::bmm: case Op::baddbmm: {
      const Tensor& x = a[op == Op::bmm ? 0 : 1].tensor();
      const Tensor& y = a[op == Op::bmm ? 1 : 2].tensor();
      int64_t beta = op == Op::baddbmm ? a[3].to_int() : 0, alpha = op == Op::baddbmm ? a[4].to_int() : 1;
      if (beta != 0) init_out(out, a[0].tensor());
      igemm(out, x.sizes()[0], x.sizes()[1], y.sizes()[2], x.sizes()[2], batched(x), batched(y), alpha, beta);
      return true;
    }
    case Op::matmul: {
      Tensor x = a[0].tensor(), y = a[1].tensor();
      if (x.dim() == 1) x = x.as_strided({1, x.sizes()[0]}, {0, x.strides()[0]}, x.offset());
      if (y.dim() == 1) y = y.as_strided({y.sizes()[0], 1}, {y.strides()[0], 0}, y.offset());
      int64_t m = x.sizes()[x.dim() - 2], k = x.sizes()[x.dim() - 1], n = y.sizes()[y.dim() - 1];
      Shape bshape = broadcast_shapes(Shape(x.sizes().begin(), x.sizes().end() - 2), Shape(y.sizes().begin(), y.sizes().end() - 2));
      igemm(out, shape_numel(bshape), m, n, k, expand_batch(x, bshape, m, k), expand_batch(y, bshape, k, n), 1, 0);
      return true;
    }
    case Op::linear: {  // x [..., K] @ w.T (w [N, K] or [K]) + bias
      const Tensor& x = a[0].tensor();
      const Tensor& w = a[1].tensor();
      int64_t k = x.sizes().back(), n = w.dim() == 2 ? w.sizes()[0] : 1, rows = x.numel() / std::max<int64_t>(k, 1);
      Tensor xc = contiguous_as(x, x.dtype());
      Operand wt = w.dim() == 2 ? Operand{w, 0, w.strides()[1], w.strides()[0]} : Operand{w, 0, w.strides()[0], 0};
      if (!a[2].is_none()) init_out(out, a[2].tensor());
      igemm(out, 1, rows, n, k, Operand{xc, 0, k, 1}, wt, 1, a[2].is_none() ? 0 : 1);
      return true;
    }
    default: return false;
  }
}

// Integer convolutions (conv1d as H = KH = 1), one thread per output element.
void int_conv(Op op, const Stack& a, const Tensor& out) {
  const char* name = op_name(op);
  bool tr = op == Op::conv_transpose2d, one = op == Op::conv1d;
  int64_t sd = one ? 1 : 2;
  Tensor x = contiguous_as(a[0].tensor(), out.dtype()), w = contiguous_as(a[1].tensor(), out.dtype());
  Tensor bias = a[2].is_none() ? Tensor() : contiguous_as(on_device(a[2].tensor(), out.device()), out.dtype());
  bool batchd = x.dim() == sd + 2;
  IntList stride = cpu::expand_param(name, "stride", a[3].ints(), sd);
  IntList dil = cpu::expand_param(name, "dilation", a[tr ? 7 : 5].ints(), sd);
  struct CG {
    int64_t C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW;
  } g{};
  g.C = x.sizes()[batchd ? 1 : 0];
  g.H = one ? 1 : x.sizes()[x.dim() - 2];
  g.W = x.sizes()[x.dim() - 1];
  g.KH = one ? 1 : w.sizes()[2];
  g.KW = w.sizes()[w.dim() - 1];
  g.G = a[6].to_int();
  g.O = tr ? w.sizes()[1] * g.G : w.sizes()[0];
  g.sh = one ? 1 : stride[0];
  g.sw = stride.back();
  g.dh = one ? 1 : dil[0];
  g.dw = dil.back();
  g.OH = one ? 1 : out.sizes()[out.dim() - 2];
  g.OW = out.sizes()[out.dim() - 1];
  if (!tr && a[4].is_string()) {
    bool same = a[4].str() == "same";
    g.ph = same ? g.dh * (g.KH - 1) / 2 : 0;
    g.pw = same ? g.dw * (g.KW - 1) / 2 : 0;
  } else {
    IntList pad = cpu::expand_param(name, "padding", a[4].ints(), sd);
    g.ph = one ? 0 : pad[0];
    g.pw = pad.back();
  }
  int64_t n = out.numel();
  int device = out.device().index;
  std::string T = ctype(out.dtype());
  auto f = kernels(device, "iconv:" + T, [&] {
    return prelude() + "typedef " + T + " T;\n"
           "struct CG { i64 C, H, W, O, KH, KW, G, sh, sw, ph, pw, dh, dw, OH, OW; };\n"
           "extern \"C\" __global__ void iconv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,\n"
           "    T* __restrict__ y, i64 n, CG g, int tr) {\n"
           "  i64 Cg = g.C / g.G, Og = g.O / g.G;\n"
           "  for (i64 idx = (i64)blockIdx.x * 256 + threadIdx.x; idx < n; idx += (i64)gridDim.x * 256) {\n"
           "    i64 ow = idx % g.OW, oh = idx / g.OW % g.OH, o = idx / (g.OW * g.OH) % g.O, b = idx / (g.OW * g.OH * g.O);\n"
           "    i64 grp = o / Og;\n    u64 acc = bias ? (u64)(i64)bias[o] : 0;\n"
           "    for (i64 c = 0; c < Cg; c++) {\n      i64 ci = grp * Cg + c;\n"
           "      const T* xp = x + (b * g.C + ci) * g.H * g.W;\n"
           "      for (i64 i = 0; i < g.KH; i++)\n        for (i64 j = 0; j < g.KW; j++) {\n"
           "          i64 ih, iw, wi;\n"
           "          if (!tr) {\n"
           "            ih = oh * g.sh - g.ph + i * g.dh; iw = ow * g.sw - g.pw + j * g.dw;\n"
           "            wi = ((o * Cg + c) * g.KH + i) * g.KW + j;\n"
           "          } else {\n"
           "            i64 th = oh + g.ph - i * g.dh, tw = ow + g.pw - j * g.dw;\n"
           "            if (th < 0 || tw < 0 || th % g.sh || tw % g.sw) continue;\n"
           "            ih = th / g.sh; iw = tw / g.sw;\n"
           "            wi = ((ci * Og + o % Og) * g.KH + i) * g.KW + j;\n"
           "          }\n"
           "          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;\n"
           "          acc += (u64)(i64)w[wi] * (u64)(i64)xp[ih * g.W + iw];\n"
           "        }\n    }\n"
           "    y[idx] = (T)acc;\n  }\n}\n";
  }, {"iconv"})[0];
  const void* xp = x.data_ptr();
  const void* wp = w.data_ptr();
  const void* bp = bias.defined() ? bias.data_ptr() : nullptr;
  void* yp = out.data_ptr();
  int t = tr ? 1 : 0;
  void* args[] = {&xp, &wp, &bp, &yp, &n, &g, &t};
  launch(device, f, grid_for(n, device), 256, args);
}

}  // namespace

// Integer mm/bmm/matmul/addmm/baddbmm/linear and conv1d/conv2d/conv_transpose2d (pools: the
// float pool kernel in linalg.cpp takes integers), and
// linear with a 1-D weight in any dtype; false (nothing done) for every other case.
bool linalg_rest(Op op, const Stack& a, const Metas& m, Stack* result) {
  if (op == Op::einsum) return false;
  DType dt = m[0].dtype;
  if (op == Op::linear && is_floating(dt) && a[1].tensor().dim() == 1) {  // x @ w (+ bias), natively
    Tensor r = call1(Op::matmul, {a[0].tensor(), a[1].tensor()});
    if (!a[2].is_none()) r = call1(Op::add, {r, a[2].tensor()});
    Tensor out = empty_from_meta(m[0]);
    out.copy_from(r);
    *result = {Value(out)};
    return true;
  }
  if (is_floating(dt)) return false;
  switch (op) {
    case Op::max_pool2d: case Op::avg_pool2d: case Op::adaptive_avg_pool2d: case Op::adaptive_max_pool2d:
      return false;  // linalg.cpp's pool kernel
    default: break;
  }
  Tensor out = empty_from_meta(m[0]);
  Tensor c = out.is_contiguous() ? out : Tensor::empty(out.sizes(), out.dtype(), out.device());
  *result = {Value(out)};
  if (c.numel() > 0) {
    switch (op) {
      case Op::conv1d: case Op::conv2d: case Op::conv_transpose2d: int_conv(op, a, c); break;
      default: product(op, a, c); break;
    }
  }
  if (!c.same(out)) out.copy_from(c);
  return true;
}

}  // namespace tc::cuda
