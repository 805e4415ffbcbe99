// 2-D pooling: max_pool2d, avg_pool2d and their adaptive forms over [N,C,H,W] or [C,H,W] input,
// planes in parallel; float32/float64 max and avg pools separably (rows, then columns), the rest one
// window per output element. Max propagates NaN like PyTorch. And _max_pool2d_backward, max_pool2d's
// input gradient (one window argmax per output element).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/linalg.h"
#include "tc/parallel.h"

namespace tc {
namespace {

struct Pool {
  int64_t planes, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode, count_include_pad;
  int64_t divisor;  // 0: none
};

// PyTorch's pooling_output_shape: floor or ceil, and the last window must start inside the
// input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil) {
  const char* what = "the pooling output size";  // huge kernel sizes, dilations or strides overflow
  int64_t num = checked_add(checked_add(in - 1, checked_mul(2, p, what), what), -checked_mul(d, k - 1, what), what);
  if (ceil) num = checked_add(num, s - 1, what);
  int64_t out = num / s - (num % s < 0) + 1;  // floor division
  if (ceil && out > 1 && (out - 1) * s >= in + p) out--;  // out <= 1 never drops (and cannot overflow)
  return out;
}

Pool pool_shape(Op op, const Stack& a, Shape* out_sizes) {
  const char* name = op_name(op);
  const Tensor& x = a[0].tensor();
  bool adaptive = op == Op::adaptive_avg_pool2d || op == Op::adaptive_max_pool2d;
  TC_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, "%s(): Expected 3D or 4D tensor, but got %s", name,
           shape_string(x.sizes()).c_str());
  for (int64_t d = x.dim() - 3; d < x.dim(); d++)
    TC_CHECK(x.size(d) > 0, ShapeError,
             "%s(): Expected input to have non-zero size for non-batch dimensions, but input has sizes %s with dimension %lld being empty",
             name, shape_string(x.sizes()).c_str(), (long long)d + 1);
  TC_CHECK(x.dtype() != DType::Bool, DTypeError, "\"%s\" not implemented for 'Bool'", name);
  Pool p{};
  p.planes = x.numel() / (x.size(-1) * x.size(-2));
  p.H = x.size(-2);
  p.W = x.size(-1);
  if (adaptive) {
    IntList os = cpu::expand_param(name, "output_size", a[1].ints(), 2);
    TC_CHECK(os[0] >= 0 && os[1] >= 0, ValueError, "%s(): elements of output_size must be greater than or equal to 0", name);
    p.OH = os[0];
    p.OW = os[1];
  } else {
    bool is_max = op == Op::max_pool2d;
    const auto [k, s, pad, d] = cpu::pool_window(name, a, 1, is_max);
    TC_CHECK(k[0] > 0 && k[1] > 0, ValueError, "kernel size should be greater than zero, but got kH: %lld kW: %lld",
             (long long)k[0], (long long)k[1]);
    TC_CHECK(s[0] > 0 && s[1] > 0, ValueError, "stride should be greater than zero, but got dH: %lld dW: %lld",
             (long long)s[0], (long long)s[1]);
    TC_CHECK(d[0] > 0 && d[1] > 0, ValueError, "dilation should be greater than zero, but got dilationH: %lld dilationW: %lld",
             (long long)d[0], (long long)d[1]);
    for (int i = 0; i < 2; i++)
      TC_CHECK(pad[i] >= 0 && pad[i] <= k[i] / 2, ValueError, "pad should be at most half of kernel size, but got pad=%lld and kernel_size=%lld",
               (long long)pad[i], (long long)k[i]);
    p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.ph = pad[0], p.pw = pad[1], p.dh = d[0], p.dw = d[1];
    p.ceil_mode = a[is_max ? 5 : 4].to_bool();
    if (!is_max) {
      p.count_include_pad = a[5].to_bool();
      p.divisor = a[6].is_none() ? 0 : a[6].to_int();
      TC_CHECK(a[6].is_none() || p.divisor != 0, ValueError, "divisor must be not zero");
    }
    p.OH = pooled_size(p.H, p.kh, p.ph, p.sh, p.dh, p.ceil_mode);
    p.OW = pooled_size(p.W, p.kw, p.pw, p.sw, p.dw, p.ceil_mode);
    int64_t c = x.dim() == 4 ? x.size(1) : x.size(0);
    TC_CHECK(p.OH >= 1 && p.OW >= 1, ShapeError, "Given input size: (%lldx%lldx%lld). Calculated output size: (%lldx%lldx%lld). Output size is too small",
             (long long)c, (long long)p.H, (long long)p.W, (long long)c, (long long)p.OH, (long long)p.OW);
  }
  *out_sizes = x.sizes();
  (*out_sizes)[x.dim() - 2] = p.OH;
  (*out_sizes)[x.dim() - 1] = p.OW;
  return p;
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<opmath_t<T>>) return std::isnan(static_cast<opmath_t<T>>(v));
  return false;
}

// Runs fn(plane_in, plane_out) over the planes, in parallel.
template <typename T, typename F>
void each_plane(const Pool& p, const T* x, T* y, F&& fn) {
  int64_t per = std::max<int64_t>(1, p.OH * p.OW * std::max<int64_t>(1, p.kh * p.kw));
  parallel_for(0, p.planes, std::max<int64_t>(1, 32768 / per), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) fn(x + i * p.H * p.W, y + i * p.OH * p.OW);
  });
}

// The max of x over rows [h0, h1) step dh and columns [w0, w1) step dw; NaN wins.
template <typename T>
T window_max(const T* x, int64_t W, int64_t h0, int64_t h1, int64_t dh, int64_t w0, int64_t w1, int64_t dw) {
  using A = opmath_t<T>;
  A best = std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
  for (int64_t h = h0; h < h1; h += dh)
    for (int64_t w = w0; w < w1; w += dw) {
      A v = static_cast<A>(x[h * W + w]);
      if (v > best || is_nan(v)) best = v;
      if (is_nan(best)) return T(best);
    }
  return T(best);
}

// max with NaN winning, as window_max
template <typename A>
inline A max_nan(A m, A v) {
  return (v > m || v != v) ? v : m;
}

// max_pool2d / avg_pool2d of float32/float64 planes, separably: per output row, first combine
// the window's input rows column by column into `acc` (contiguous, vectorised), then each output
// combines its window's columns of `acc`. Max is exact either way; sums add rows first.
template <typename T>
void pool_separable(bool is_max, const Pool& p, const T* x, T* y) {
  int64_t per = std::max<int64_t>(1, p.OH * p.OW * p.kh * p.kw);
  parallel_for(0, p.planes, std::max<int64_t>(1, 32768 / per), [&](int64_t b, int64_t e) {
    std::vector<T> acc(p.W);
    T* ac = acc.data();
    for (int64_t pl = b; pl < e; pl++) {
      const T* in = x + pl * p.H * p.W;
      T* out = y + pl * p.OH * p.OW;
      for (int64_t oh = 0; oh < p.OH; oh++) {
        int64_t h0 = oh * p.sh - p.ph, hend;
        if (is_max) {
          hend = std::min(h0 + (p.kh - 1) * p.dh + 1, p.H);
          while (h0 < 0) h0 += p.dh;
        } else {
          hend = std::min(h0 + p.kh, p.H + p.ph);
        }
        int64_t hpad = hend - h0;  // avg: window rows including padding
        int64_t ha = std::max<int64_t>(h0, 0), hb = std::min(hend, p.H);
        if (ha >= hb)  // no input row under the window (dilated windows can skip them all)
          std::fill(ac, ac + p.W, is_max ? -std::numeric_limits<T>::infinity() : T(0));
        else
          std::copy(in + ha * p.W, in + (ha + 1) * p.W, ac);
        for (int64_t h = ha + (is_max ? p.dh : 1); h < hb; h += is_max ? p.dh : 1) {
          const T* r = in + h * p.W;
          if (is_max)
            for (int64_t w = 0; w < p.W; w++) ac[w] = max_nan(ac[w], r[w]);
          else
            for (int64_t w = 0; w < p.W; w++) ac[w] += r[w];
        }
        T* orow = out + oh * p.OW;
        if (is_max) {
          for (int64_t ow = 0; ow < p.OW; ow++) {
            int64_t w0 = ow * p.sw - p.pw, w1 = std::min(w0 + (p.kw - 1) * p.dw + 1, p.W);
            while (w0 < 0) w0 += p.dw;
            T m = -std::numeric_limits<T>::infinity();
            for (int64_t w = w0; w < w1; w += p.dw) m = max_nan(m, ac[w]);
            orow[ow] = m;
          }
        } else {
          for (int64_t ow = 0; ow < p.OW; ow++) {
            int64_t w0 = ow * p.sw - p.pw, w1 = std::min(w0 + p.kw, p.W + p.pw);
            int64_t count = hpad * (w1 - w0);
            w0 = std::max<int64_t>(w0, 0), w1 = std::min(w1, p.W);
            if (p.divisor)
              count = p.divisor;
            else if (!p.count_include_pad)
              count = (hb - ha) * (w1 - w0);
            T sum = 0;
            for (int64_t w = w0; w < w1; w++) sum += ac[w];
            orow[ow] = sum / static_cast<T>(count);
          }
        }
      }
    }
  });
}

template <typename T>
void pool_kernel(Op op, const Pool& p, const T* x, T* y) {
  using A = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;
  auto sum = [&](const T* in, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    A s = 0;
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) s += static_cast<A>(in[h * p.W + w]);
    return s;
  };
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == Op::max_pool2d || op == Op::avg_pool2d) {
      pool_separable<T>(op == Op::max_pool2d, p, x, y);
      return;
    }
  }
  switch (op) {
    case Op::max_pool2d:
      each_plane(p, x, y, [&](const T* in, T* out) {
        for (int64_t oh = 0; oh < p.OH; oh++) {
          int64_t h0 = oh * p.sh - p.ph, h1 = std::min(h0 + (p.kh - 1) * p.dh + 1, p.H);
          while (h0 < 0) h0 += p.dh;
          for (int64_t ow = 0; ow < p.OW; ow++) {
            int64_t w0 = ow * p.sw - p.pw, w1 = std::min(w0 + (p.kw - 1) * p.dw + 1, p.W);
            while (w0 < 0) w0 += p.dw;
            out[oh * p.OW + ow] = window_max(in, p.W, h0, h1, p.dh, w0, w1, p.dw);
          }
        }
      });
      break;
    case Op::avg_pool2d:
      each_plane(p, x, y, [&](const T* in, T* out) {
        for (int64_t oh = 0; oh < p.OH; oh++) {
          int64_t h0 = oh * p.sh - p.ph, h1 = std::min(h0 + p.kh, p.H + p.ph);
          int64_t hpad = h1 - h0;
          h0 = std::max<int64_t>(h0, 0), h1 = std::min(h1, p.H);
          for (int64_t ow = 0; ow < p.OW; ow++) {
            int64_t w0 = ow * p.sw - p.pw, w1 = std::min(w0 + p.kw, p.W + p.pw);
            int64_t count = hpad * (w1 - w0);
            w0 = std::max<int64_t>(w0, 0), w1 = std::min(w1, p.W);
            if (p.divisor)
              count = p.divisor;
            else if (!p.count_include_pad)
              count = (h1 - h0) * (w1 - w0);
            out[oh * p.OW + ow] = T(sum(in, h0, h1, w0, w1) / static_cast<A>(count));
          }
        }
      });
      break;
    case Op::adaptive_avg_pool2d:
    case Op::adaptive_max_pool2d:
      each_plane(p, x, y, [&](const T* in, T* out) {
        for (int64_t oh = 0; oh < p.OH; oh++) {
          int64_t h0 = oh * p.H / p.OH, h1 = ((oh + 1) * p.H + p.OH - 1) / p.OH;
          for (int64_t ow = 0; ow < p.OW; ow++) {
            int64_t w0 = ow * p.W / p.OW, w1 = ((ow + 1) * p.W + p.OW - 1) / p.OW;
            out[oh * p.OW + ow] = op == Op::adaptive_max_pool2d
                                      ? window_max(in, p.W, h0, h1, 1, w0, w1, 1)
                                      : T(sum(in, h0, h1, w0, w1) / static_cast<A>((h1 - h0) * (w1 - w0)));
          }
        }
      });
      break;
    default: TC_ASSERT(false, "not a pooling op");
  }
}

// The position in window order (kh-major) of the window's maximum at output (oh, ow), as the
// decomposition's max_dim over the padded windows picks it: the first largest, positions outside
// the plane counting as -inf, the first NaN winning.
template <typename A, typename T>
int64_t window_argmax(const Pool& p, const T* in, int64_t oh, int64_t ow) {
  A best = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < p.kh; i++)
    for (int64_t j = 0; j < p.kw; j++) {
      int64_t h = oh * p.sh - p.ph + i * p.dh, w = ow * p.sw - p.pw + j * p.dw;
      A v = h >= 0 && h < p.H && w >= 0 && w < p.W ? static_cast<A>(in[h * p.W + w]) : -std::numeric_limits<A>::infinity();
      if (at < 0 || v > best || (v != v && best == best)) best = v, at = i * p.kw + j;
    }
  return at;
}

// gx (the input's plane layout) from g (the output's): each input element sums the gradients of
// the windows whose maximum it is, in window order.
template <typename T>
void max_pool_backward_kernel(const Pool& p, const T* g, const T* x, T* gx) {
  using A = opmath_t<T>;
  parallel_for(0, p.planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const T *in = x + pl * p.H * p.W, *go = g + pl * p.OH * p.OW;
      std::vector<A> acc(size_t(p.H * p.W), A(0));
      for (int64_t oh = 0; oh < p.OH; oh++)
        for (int64_t ow = 0; ow < p.OW; ow++) {
          int64_t at = window_argmax<A>(p, in, oh, ow);
          int64_t h = oh * p.sh - p.ph + at / p.kw * p.dh, w = ow * p.sw - p.pw + at % p.kw * p.dw;
          if (h >= 0 && h < p.H && w >= 0 && w < p.W) acc[size_t(h * p.W + w)] += static_cast<A>(go[oh * p.OW + ow]);
        }
      for (int64_t k = 0; k < p.H * p.W; k++) gx[pl * p.H * p.W + k] = T(acc[size_t(k)]);
    }
  });
}

// _max_pool2d_backward(grad_out, self, kernel_size, stride, padding, dilation, ceil_mode): the pool's
// geometry from self and the rest; grad_out of the pool's output shape.
Pool max_pool_backward_shape(const Stack& a) {
  const Tensor &g = a[0].tensor(), &x = a[1].tensor();
  TC_CHECK(is_floating(x.dtype()) && g.dtype() == x.dtype(), DTypeError,
           "_max_pool2d_backward(): expected grad_out and self of one floating dtype, got %s and %s",
           dtype_name(g.dtype()), dtype_name(x.dtype()));
  Shape s;
  Pool p = pool_shape(Op::max_pool2d, Stack(a.begin() + 1, a.end()), &s);
  TC_CHECK(g.sizes() == s, ShapeError, "_max_pool2d_backward(): expected grad_out of shape %s (the pool's output for self %s), got %s",
           shape_string(s).c_str(), shape_string(x.sizes()).c_str(), shape_string(g.sizes()).c_str());
  return p;
}

}  // namespace

Metas meta_max_pool2d_backward(const Stack& a) {
  max_pool_backward_shape(a);
  const Tensor& x = a[1].tensor();
  return {contiguous_meta(x.sizes(), x.dtype(), x.device())};
}

Stack cpu_max_pool2d_backward(const Stack& a, const Metas& metas) {
  Pool p = max_pool_backward_shape(a);
  Tensor out = empty_from_meta(metas[0]);
  if (out.numel() == 0) return {Value(out)};
  Tensor g = a[0].tensor().contiguous(), x = a[1].tensor().contiguous();
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<opmath_t<T>>)
      max_pool_backward_kernel<T>(p, g.data<T>(), x.data<T>(), out.data<T>());
    else
      TC_ASSERT(false, "integers are rejected by the meta rule");
  });
  return {Value(out)};
}

Metas meta_pool(Op op, const Stack& a) {
  Shape s;
  pool_shape(op, a, &s);
  const Tensor& x = a[0].tensor();
  return {contiguous_meta(s, x.dtype(), x.device())};
}

Stack cpu_pool(Op op, const Stack& a, const Metas& metas) {
  Shape s;
  Pool p = pool_shape(op, a, &s);
  Tensor out = empty_from_meta(metas[0]);
  if (out.numel() == 0) return {Value(out)};
  Tensor x = a[0].tensor().contiguous();
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>)
      TC_ASSERT(false, "bool is rejected by the meta rule");
    else
      pool_kernel<T>(op, p, x.data<T>(), out.data<T>());
  });
  return {Value(out)};
}

}  // namespace tc
