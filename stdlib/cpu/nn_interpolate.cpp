// interpolate of the nn group: "nearest" and "bilinear" resizing of [N, C, H, W] input, with
// PyTorch 1.13's source-index rules (scale_factor given: the kernel uses 1/scale_factor, not
// in/out).
#include "cpu/nn.h"

namespace tc::cpu {
namespace {

struct Resize {
  bool bilinear, align_corners;
  int64_t out[2];
  std::optional<double> scale[2];  // the user's scale factors, if given
};

Resize parse_resize(const Stack& a) {
  const Tensor& x = a[0].tensor();
  const std::string& mode = a[3].str();
  TC_CHECK(mode == "nearest" || mode == "bilinear", NotImplementedError,
           "interpolate(): mode \"%s\" is not supported (supported: \"nearest\", \"bilinear\")",
           mode.c_str());
  Resize r;
  r.bilinear = mode == "bilinear";
  TC_CHECK(r.bilinear || a[4].is_none(), ValueError,
           "interpolate(): align_corners option can only be set with the interpolating modes: "
           "linear | bilinear | bicubic | trilinear");
  r.align_corners = !a[4].is_none() && a[4].to_bool();
  TC_CHECK(x.dim() == 4, NotImplementedError,
           "interpolate(): only 4-D input [N, C, H, W] is supported, got input of shape %s",
           shape_string(x.sizes()).c_str());
  TC_CHECK(a[1].is_none() || a[2].is_none(), ValueError,
           "interpolate(): only one of size or scale_factor should be defined");
  TC_CHECK(!a[1].is_none() || !a[2].is_none(), ValueError,
           "interpolate(): either size or scale_factor should be defined");
  if (!a[1].is_none()) {
    const IntList& size = a[1].ints();
    TC_CHECK(size.size() == 1 || size.size() == 2, ValueError,
             "interpolate(): input and output must have the same number of spatial dimensions, but "
             "got input with spatial dimensions of %s and output size of %s",
             shape_string({x.sizes()[2], x.sizes()[3]}).c_str(),
             shape_string(Shape(size.begin(), size.end())).c_str());
    for (int i = 0; i < 2; i++) r.out[i] = size[size.size() == 1 ? 0 : i];
  } else {
    const FloatList& sf = a[2].floats();
    TC_CHECK(sf.size() == 1 || sf.size() == 2, ValueError,
             "interpolate(): input and output must have the same number of spatial dimensions, but "
             "got input with spatial dimensions of %s and %zu scale factors",
             shape_string({x.sizes()[2], x.sizes()[3]}).c_str(), sf.size());
    for (int i = 0; i < 2; i++) {
      r.scale[i] = sf[sf.size() == 1 ? 0 : i];
      double o = std::floor((double)x.sizes()[2 + i] * *r.scale[i]);
      TC_CHECK(o > -0x1p63 && o < 0x1p63, ShapeError,  // also nan; the cast past int64 is undefined
               "interpolate(): scale factor %g makes an output size (%g) that does not fit int64", *r.scale[i], o);
      r.out[i] = (int64_t)o;
    }
  }
  TC_CHECK(x.sizes()[2] > 0 && x.sizes()[3] > 0 && r.out[0] > 0 && r.out[1] > 0, ShapeError,
           "interpolate(): input and output sizes should be greater than 0, but got input (H: "
           "%lld, W: %lld) output (H: %lld, W: %lld)",
           (long long)x.sizes()[2], (long long)x.sizes()[3], (long long)r.out[0],
           (long long)r.out[1]);
  return r;
}

// 1/scale_factor when one was given, else in/out (PyTorch's compute_scales_value).
template <typename A>
A scale_value(const std::optional<double>& scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? A(1.0 / *scale) : A(in) / A(out);
}

std::vector<int64_t> nearest_index(int64_t in, int64_t out, const std::optional<double>& scale) {
  std::vector<int64_t> idx(out);
  float s = scale_value<float>(scale, in, out);
  for (int64_t o = 0; o < out; o++)
    idx[o] = out == in       ? o
             : out == 2 * in ? o >> 1
                             : std::min((int64_t)std::floor((float)o * s), in - 1);
  return idx;
}

// Source indices i0, i1 and weights l0, l1 of every output index along one dim.
template <typename A>
struct Linear {
  std::vector<int64_t> i0, i1;
  std::vector<A> l0, l1;
  Linear(int64_t in, int64_t out, bool align, const std::optional<double>& scale)
      : i0(out), i1(out), l0(out), l1(out) {
    A s = align ? (out > 1 ? A(in - 1) / A(out - 1) : A(0)) : scale_value<A>(scale, in, out);
    for (int64_t o = 0; o < out; o++) {
      A src = align ? s * A(o) : A(std::max((double)s * ((double)o + 0.5) - 0.5, 0.0));
      i0[o] = (int64_t)src;
      i1[o] = i0[o] + (i0[o] < in - 1 ? 1 : 0);
      l1[o] = std::min(src - A(i0[o]), A(1));
      l0[o] = A(1) - l1[o];
    }
  }
};

}  // namespace

TensorMeta interpolate_meta(const Stack& a) {
  const Tensor& x = a[0].tensor();
  Resize r = parse_resize(a);
  if (r.bilinear) check_floating("interpolate", "input for mode \"bilinear\"", x);
  TC_CHECK(x.dtype() != DType::Bool, DTypeError, "interpolate(): bool input is not supported");
  return contiguous_meta({x.sizes()[0], x.sizes()[1], r.out[0], r.out[1]}, x.dtype(), x.device());
}

Tensor interpolate_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& x = a[0].tensor();
  Resize r = parse_resize(a);
  Tensor out = empty_from_meta(m);
  int64_t c = x.sizes()[1], ih = x.sizes()[2], iw = x.sizes()[3], oh = r.out[0], ow = r.out[1];
  const Shape& st = x.strides();
  int64_t rows = x.sizes()[0] * c * oh;
  if (!r.bilinear) {
    std::vector<int64_t> hi = nearest_index(ih, oh, r.scale[0]),
                         wi = nearest_index(iw, ow, r.scale[1]);
    visit_dtype(x.dtype(), [&]<typename T>() {
      const T* px = x.data<T>();
      T* po = out.data<T>();
      parallel_for(0, rows, row_grain(ow), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; row++) {
          int64_t nc = row / oh, n = nc / c, ch = nc % c;
          const T* src = px + n * st[0] + ch * st[1] + hi[row % oh] * st[2];
          for (int64_t j = 0; j < ow; j++) po[row * ow + j] = src[wi[j] * st[3]];
        }
      });
    });
    return out;
  }
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = opmath_t<T>;
    Linear<A> lh(ih, oh, r.align_corners, r.scale[0]), lw(iw, ow, r.align_corners, r.scale[1]);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(0, rows, row_grain(ow), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; row++) {
        int64_t nc = row / oh, n = nc / c, ch = nc % c, h = row % oh;
        const T* plane = px + n * st[0] + ch * st[1];
        const T *r0 = plane + lh.i0[h] * st[2], *r1 = plane + lh.i1[h] * st[2];
        for (int64_t j = 0; j < ow; j++) {
          int64_t w0 = lw.i0[j] * st[3], w1 = lw.i1[j] * st[3];
          A v = lh.l0[h] * (lw.l0[j] * A(r0[w0]) + lw.l1[j] * A(r0[w1])) +
                lh.l1[h] * (lw.l0[j] * A(r1[w0]) + lw.l1[j] * A(r1[w1]));
          po[row * ow + j] = T(v);
        }
      }
    });
  });
  return out;
}

}  // namespace tc::cpu
