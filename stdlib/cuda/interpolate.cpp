// interpolate on CUDA ("nearest" and "bilinear", [N, C, H, W], any strides): the source index and
// weight tables along each dim are computed on the host exactly as the CPU kernel does
// (stdlib/cpu/nn_interpolate.cpp, PyTorch's rules), uploaded, and one kernel gathers.
#include <cmath>
#include <cstring>
#include <optional>

#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

template <typename A>
A scale_value(const std::optional<double>& scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? A(1.0 / *scale) : A(in) / A(out);
}

// Per output index along one dim: i0, i1 (int64) and weights l0, l1 (A); nearest uses i0 only.
template <typename A>
void tables(bool bilinear, bool align, int64_t in, int64_t out, const std::optional<double>& scale,
            std::vector<int64_t>& i0, std::vector<int64_t>& i1, std::vector<A>& l0, std::vector<A>& l1) {
  i0.resize(out);
  i1.resize(out);
  l0.resize(out);
  l1.resize(out);
  if (!bilinear) {
    float s = scale_value<float>(scale, in, out);
    for (int64_t o = 0; o < out; o++)
      i0[o] = i1[o] = out == in       ? o
                      : out == 2 * in ? o >> 1
                                      : std::min((int64_t)std::floor((float)o * s), in - 1);
    return;
  }
  A s = align ? (out > 1 ? A(in - 1) / A(out - 1) : A(0)) : scale_value<A>(scale, in, out);
  for (int64_t o = 0; o < out; o++) {
    A src = align ? s * A(o) : A(std::max((double)s * ((double)o + 0.5) - 0.5, 0.0));
    i0[o] = (int64_t)src;
    i1[o] = i0[o] + (i0[o] < in - 1 ? 1 : 0);
    l1[o] = std::min(src - A(i0[o]), A(1));
    l0[o] = A(1) - l1[o];
  }
}

template <typename V>
Tensor upload(const std::vector<V>& v, DType dt, Device d) {
  Tensor h = Tensor::empty({(int64_t)v.size()}, dt);
  std::memcpy(h.data_ptr(), v.data(), v.size() * sizeof(V));
  Tensor g = Tensor::empty({(int64_t)v.size()}, dt, d);
  g.copy_from(h);
  return g;
}

}  // namespace

bool interpolate(const Stack& a, const TensorMeta& m, Stack* result) {
  const Tensor& x = a[0].tensor();
  bool bilinear = a[3].str() == "bilinear";
  if (x.dim() != 4 || (bilinear && !is_floating(x.dtype()))) return false;
  bool align = !a[4].is_none() && a[4].to_bool();
  std::optional<double> sc[2];
  if (!a[2].is_none()) {
    const FloatList& sf = a[2].floats();
    for (int i = 0; i < 2; i++) sc[i] = sf[sf.size() == 1 ? 0 : i];
  }
  Tensor out = empty_from_meta(m);
  *result = {Value(out)};
  if (out.numel() == 0) return true;
  int device = out.device().index;
  int64_t ih = x.sizes()[2], iw = x.sizes()[3], oh = m.sizes[2], ow = m.sizes[3];
  bool dbl = x.dtype() == DType::Float64;
  std::vector<int64_t> h0, h1, w0, w1;
  Tensor lh0, lh1, lw0, lw1;
  if (dbl) {
    std::vector<double> a0, a1, b0, b1;
    tables<double>(bilinear, align, ih, oh, sc[0], h0, h1, a0, a1);
    tables<double>(bilinear, align, iw, ow, sc[1], w0, w1, b0, b1);
    lh0 = upload(a0, DType::Float64, out.device()), lh1 = upload(a1, DType::Float64, out.device());
    lw0 = upload(b0, DType::Float64, out.device()), lw1 = upload(b1, DType::Float64, out.device());
  } else {
    std::vector<float> a0, a1, b0, b1;
    tables<float>(bilinear, align, ih, oh, sc[0], h0, h1, a0, a1);
    tables<float>(bilinear, align, iw, ow, sc[1], w0, w1, b0, b1);
    lh0 = upload(a0, DType::Float32, out.device()), lh1 = upload(a1, DType::Float32, out.device());
    lw0 = upload(b0, DType::Float32, out.device()), lw1 = upload(b1, DType::Float32, out.device());
  }
  Tensor ih0 = upload(h0, DType::Int64, out.device()), ih1 = upload(h1, DType::Int64, out.device());
  Tensor iw0 = upload(w0, DType::Int64, out.device()), iw1 = upload(w1, DType::Int64, out.device());
  std::string T = ctype(x.dtype()), A = dbl ? "double" : "float";
  auto f = kernels(device, "interpolate:" + T, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "struct S { i64 s0, s1, s2, s3, c, oh, ow; };\n"
           "extern \"C\" __global__ void interp(const T* __restrict__ x, T* __restrict__ y, i64 total, S s, int bilinear,\n"
           "    const i64* h0, const i64* h1, const i64* w0, const i64* w1, const A* lh0, const A* lh1, const A* lw0, const A* lw1) {\n"
           "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < total; e += (i64)gridDim.x * 256) {\n"
           "    i64 j = e % s.ow, r = e / s.ow, h = r % s.oh, nc = r / s.oh, ch = nc % s.c, n = nc / s.c;\n"
           "    const T* p = x + n * s.s0 + ch * s.s1;\n"
           "    if (!bilinear) { y[e] = p[h0[h] * s.s2 + w0[j] * s.s3]; continue; }\n"
           "    const T* r0 = p + h0[h] * s.s2; const T* r1 = p + h1[h] * s.s2;\n"
           "    i64 a0 = w0[j] * s.s3, a1 = w1[j] * s.s3;\n"
           "    A v = lh0[h] * (lw0[j] * (A)ld(r0[a0]) + lw1[j] * (A)ld(r0[a1])) +\n"
           "          lh1[h] * (lw0[j] * (A)ld(r1[a0]) + lw1[j] * (A)ld(r1[a1]));\n"
           "    y[e] = Cv<T>::f(v);\n  }\n}\n";
  }, {"interp"})[0];
  struct S {
    int64_t s0, s1, s2, s3, c, oh, ow;
  } s{x.strides()[0], x.strides()[1], x.strides()[2], x.strides()[3], x.sizes()[1], oh, ow};
  const void* xp = (const char*)x.data_ptr();
  void* yp = out.data_ptr();
  int64_t total = out.numel();
  int bl = bilinear ? 1 : 0;
  const void *p0 = ih0.data_ptr(), *p1 = ih1.data_ptr(), *p2 = iw0.data_ptr(), *p3 = iw1.data_ptr();
  const void *q0 = lh0.data_ptr(), *q1 = lh1.data_ptr(), *q2 = lw0.data_ptr(), *q3 = lw1.data_ptr();
  void* args[] = {&xp, &yp, &total, &s, &bl, &p0, &p1, &p2, &p3, &q0, &q1, &q2, &q3};
  launch(device, f, grid_for(total, device, 256, 64),
         256, args);
  return true;
}

}  // namespace tc::cuda
