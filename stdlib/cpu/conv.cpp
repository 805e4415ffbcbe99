// Convolutions: float32 conv1d/conv2d on AVX-512 CPUs as one implicit-im2col GEMM per group over
// all samples (conv_gemm.cpp); otherwise im2col + one GEMM per sample and group (1x1 convolutions
// read the input in place). conv_transpose2d as a GEMM per sample and group + col2im. conv1d is a
// conv2d of height 1. float16/bfloat16 compute in float32.
#include <string>
#include <vector>

#include "cpu/conv_gemm.h"
#include "cpu/linalg.h"
#include "tc/parallel.h"

namespace tc {
namespace {

// Sizes of one convolution, in the 2-D form (conv1d: H = KH = 1).
struct Conv {
  int64_t N, C, H, W;          // input; N = 1 when unbatched
  int64_t O, KH, KW, groups;   // output channels, kernel
  int64_t sh, sw, ph, pw, dh, dw;  // stride, padding at the top/left, dilation
  int64_t OH, OW;
  bool transposed;
};

std::string pair_string(int64_t a, int64_t b, bool one) {
  return one ? std::to_string(b) : std::to_string(a) + " x " + std::to_string(b);
}

Conv conv_shape(Op op, const Stack& a, Shape* out_sizes) {
  const char* name = op_name(op);
  const Tensor &x = a[0].tensor(), &w = a[1].tensor();
  bool tr = op == Op::conv_transpose2d, one = op == Op::conv1d;
  int64_t sd = one ? 1 : 2;
  TC_CHECK(x.dim() == sd + 1 || x.dim() == sd + 2, ShapeError,
           "Expected %lldD (unbatched) or %lldD (batched) input to %s, but got input of size: %s", (long long)sd + 1,
           (long long)sd + 2, name, shape_string(x.sizes()).c_str());
  TC_CHECK(w.dim() == sd + 2, ShapeError, "%s(): expected a %lldD weight, but got weight of size %s", name, (long long)sd + 2,
           shape_string(w.sizes()).c_str());
  TC_CHECK(x.dtype() == w.dtype(), DTypeError, "Input type (%s) and weight type (%s) should be the same",
           cpu::cpp_type_name(x.dtype()), cpu::cpp_type_name(w.dtype()));
  TC_CHECK(x.dtype() != DType::Bool, DTypeError, "%s(): bool tensors are not supported", name);
  IntList stride = cpu::expand_param(name, "stride", a[3].ints(), sd);
  IntList dil = cpu::expand_param(name, "dilation", a[tr ? 7 : 5].ints(), sd);
  int64_t groups = a[6].to_int();
  for (int64_t s : stride) TC_CHECK(s > 0, ValueError, "non-positive stride is not supported");
  for (int64_t d : dil) TC_CHECK(d > 0, ValueError, "dilation should be greater than zero");
  TC_CHECK(groups > 0, ValueError, "non-positive groups is not supported");

  bool batched = x.dim() == sd + 2;
  Conv c{};
  c.transposed = tr;
  c.N = batched ? x.size(0) : 1;
  c.C = x.size(batched);
  c.H = one ? 1 : x.size(-2);
  c.W = x.size(-1);
  c.KH = one ? 1 : w.size(2);
  c.KW = w.size(-1);
  c.groups = groups;
  c.sh = one ? 1 : stride[0];
  c.sw = stride.back();
  c.dh = one ? 1 : dil[0];
  c.dw = dil.back();
  Shape in_b = x.sizes();
  if (!batched) in_b.insert(in_b.begin(), 1);
  TC_CHECK(w.size(0) % groups == 0, ShapeError,
           "Given groups=%lld, expected weight to be divisible by %lld at dimension 0, but got weight of size %s instead",
           (long long)groups, (long long)groups, shape_string(w.sizes()).c_str());
  int64_t want_c = tr ? w.size(0) : w.size(1) * groups;
  TC_CHECK(c.C == want_c, ShapeError, "Given %s=%lld, weight of size %s, expected input%s to have %lld channels, but got %lld channels instead",
           tr ? "transposed" : "groups", (long long)(tr ? 1 : groups), shape_string(w.sizes()).c_str(),
           shape_string(in_b).c_str(), (long long)want_c, (long long)c.C);
  c.O = tr ? w.size(1) * groups : w.size(0);

  const char* sz = "the convolution's output size";
  int64_t eh = checked_mul(c.dh, c.KH - 1, sz), ew = checked_mul(c.dw, c.KW - 1, sz);  // dilated kernel extent - 1
  if (tr) {
    IntList pad = cpu::expand_param(name, "padding", a[4].ints(), sd);
    IntList opad = cpu::expand_param(name, "output_padding", a[5].ints(), sd);
    for (int64_t p : pad) TC_CHECK(p >= 0, ValueError, "negative padding is not supported");
    c.ph = one ? 0 : pad[0];
    c.pw = pad.back();
    int64_t oph = one ? 0 : opad[0], opw = opad.back();
    TC_CHECK((oph < c.sh || oph < c.dh) && (opw < c.sw || opw < c.dw) && oph >= 0 && opw >= 0, ValueError,
             "output padding must be smaller than either stride or dilation, but got output_padding_height: %lld "
             "output_padding_width: %lld stride_height: %lld stride_width: %lld dilation_height: %lld dilation_width: %lld",
             (long long)oph, (long long)opw, (long long)c.sh, (long long)c.sw, (long long)c.dh, (long long)c.dw);
    // (H - 1) * stride - 2 * padding + extent + output_padding + 1, checked
    auto out_size = [&](int64_t in, int64_t st, int64_t pd, int64_t e, int64_t op) {
      int64_t v = checked_add(checked_mul(in - 1, st, sz), -checked_mul(2, pd, sz), sz);
      return checked_add(checked_add(v, e, sz), op + 1, sz);
    };
    c.OH = out_size(c.H, c.sh, c.ph, eh, oph);
    c.OW = out_size(c.W, c.sw, c.pw, ew, opw);
    TC_CHECK(c.OH > 0 && c.OW > 0, ShapeError,
             "Given input size per channel: (%s). Calculated output size per channel: (%s). Output size is too small",
             pair_string(c.H, c.W, one).c_str(), pair_string(c.OH, c.OW, one).c_str());
  } else {
    int64_t ph_end, pw_end;
    if (a[4].is_string()) {
      bool same = a[4].str() == "same";
      if (same)
        for (int64_t s : stride) TC_CHECK(s == 1, ValueError, "padding='same' is not supported for strided convolutions");
      c.ph = same ? eh / 2 : 0;
      c.pw = same ? ew / 2 : 0;
      ph_end = same ? eh - c.ph : 0;
      pw_end = same ? ew - c.pw : 0;
    } else {
      IntList pad = cpu::expand_param(name, "padding", a[4].ints(), sd);
      for (int64_t p : pad) TC_CHECK(p >= 0, ValueError, "negative padding is not supported");
      c.ph = ph_end = one ? 0 : pad[0];
      c.pw = pw_end = pad.back();
    }
    int64_t hp = checked_add(checked_add(c.H, c.ph, sz), ph_end, sz), wp = checked_add(checked_add(c.W, c.pw, sz), pw_end, sz);
    TC_CHECK(hp > eh && wp > ew, ShapeError,
             "Calculated padded input size per channel: (%s). Kernel size: (%s). Kernel size can't be greater than actual input size",
             pair_string(hp, wp, one).c_str(), pair_string(eh + 1, ew + 1, one).c_str());
    c.OH = (hp - eh - 1) / c.sh + 1;
    c.OW = (wp - ew - 1) / c.sw + 1;
  }
  if (!a[2].is_none()) {
    const Tensor& b = a[2].tensor();
    TC_CHECK(b.dtype() == x.dtype(), DTypeError, "Input type (%s) and bias type (%s) should be the same",
             cpu::cpp_type_name(x.dtype()), cpu::cpp_type_name(b.dtype()));
    TC_CHECK(b.dim() == 1 && b.size(0) == c.O, ShapeError,
             "Given weight of size %s, expected bias to be 1-dimensional with %lld elements, but got bias of size %s instead",
             shape_string(w.sizes()).c_str(), (long long)c.O, shape_string(b.sizes()).c_str());
  }
  *out_sizes = batched ? Shape{c.N, c.O} : Shape{c.O};
  if (!one) out_sizes->push_back(c.OH);
  out_sizes->push_back(c.OW);
  return c;
}

// col[(ch*KH + i)*KW + j][oh*OW + ow] = x[ch][oh*sh - ph + i*dh][ow*sw - pw + j*dw], 0 outside.
template <typename T>
void im2col(const Conv& c, const T* x, T* col) {
  int64_t KK = c.KH * c.KW, L = c.OH * c.OW;
  parallel_for(0, c.C * KK, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, L)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      int64_t ch = r / KK, i = r % KK / c.KW, j = r % c.KW;
      const T* plane = x + ch * c.H * c.W;
      T* dst = col + r * L;
      for (int64_t oh = 0; oh < c.OH; oh++) {
        int64_t ih = oh * c.sh - c.ph + i * c.dh;
        T* row = dst + oh * c.OW;
        if (ih < 0 || ih >= c.H) {
          std::fill(row, row + c.OW, T(0));
          continue;
        }
        for (int64_t ow = 0; ow < c.OW; ow++) {
          int64_t iw = ow * c.sw - c.pw + j * c.dw;
          row[ow] = iw >= 0 && iw < c.W ? plane[ih * c.W + iw] : T(0);
        }
      }
    }
  });
}

// y[oc][ih*sh - ph + i*dh][iw*sw - pw + j*dw] += col[(oc*KH + i)*KW + j][ih*W + iw], for the
// `oc` of one group.
template <typename T>
void col2im(const Conv& c, int64_t channels, const T* col, T* y) {
  int64_t KK = c.KH * c.KW, HW = c.H * c.W;
  parallel_for(0, channels, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, KK * HW)), [&](int64_t o0, int64_t o1) {
    for (int64_t oc = o0; oc < o1; oc++) {
      T* plane = y + oc * c.OH * c.OW;
      for (int64_t k = 0; k < KK; k++) {
        int64_t i = k / c.KW, j = k % c.KW;
        const T* src = col + (oc * KK + k) * HW;
        for (int64_t ih = 0; ih < c.H; ih++) {
          int64_t oh = ih * c.sh - c.ph + i * c.dh;
          if (oh < 0 || oh >= c.OH) continue;
          for (int64_t iw = 0; iw < c.W; iw++) {
            int64_t ow = iw * c.sw - c.pw + j * c.dw;
            if (ow >= 0 && ow < c.OW) plane[oh * c.OW + ow] += src[ih * c.W + iw];
          }
        }
      }
    }
  });
}

// Output channels per group from which the implicit-GEMM path beats im2col + BLAS (depthwise and
// other thin groups stay on the GEMM-per-sample path).
constexpr int64_t kFastMinOg = 8;

template <typename T>
void conv_kernel(const Conv& c, DType dt, const T* x, const T* w, const T* bias, T* y) {
  int64_t G = c.groups, Cg = c.C / G, Og = c.O / G, KK = c.KH * c.KW, HW = c.H * c.W, L = c.OH * c.OW;
  if constexpr (std::is_same_v<T, float>) {
    if (!c.transposed && Og >= kFastMinOg && cpu::conv_fast_available()) {
      cpu::ConvGeom g{c.N, c.C, c.H, c.W, c.O, c.KH, c.KW, c.groups, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.OH, c.OW};
      cpu::conv2d_f32_fast(g, x, w, bias, y);
      return;
    }
  }
  bool direct = !c.transposed && KK == 1 && c.sh == 1 && c.sw == 1 && c.ph == 0 && c.pw == 0 && L == HW;
  int64_t col_size = direct ? 0 : c.transposed ? Og * KK * HW : c.C * KK * L;
  auto sample = [&](int64_t n, T* col) {
    const T* xn = x + n * c.C * HW;
    T* yn = y + n * c.O * L;
    for (int64_t o = 0; o < c.O; o++) std::fill(yn + o * L, yn + (o + 1) * L, bias ? bias[o] : T(0));
    if (c.transposed) {
      for (int64_t g = 0; g < G; g++) {  // col = W_g^T x_g, W_g = w[g*Cg:(g+1)*Cg] as [Cg, Og*KK]
        cpu::gemm(dt, cpu::Mat{w + g * Cg * Og * KK, Og * KK, Cg, 1, Og * KK}, cpu::Mat{xn + g * Cg * HW, Cg, HW, HW, 1},
                  col, HW, 1, 0);
        col2im(c, Og, col, yn + g * Og * L);
      }
      return;
    }
    if (!direct) im2col(c, xn, col);
    const T* src = direct ? xn : col;
    for (int64_t g = 0; g < G; g++)
      cpu::gemm(dt, cpu::Mat{w + g * Og * Cg * KK, Og, Cg * KK, Cg * KK, 1}, cpu::Mat{src + g * Cg * KK * L, Cg * KK, L, L, 1},
                yn + g * Og * L, L, 1, 1);
  };
  // Small per-sample GEMMs run single-threaded inside OpenBLAS: parallelise over samples then.
  int64_t work = Og * std::max<int64_t>(1, L) * Cg * KK;
  if (c.N > 1 && work <= 4 * 65536) {
    parallel_for(0, c.N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<T> col(col_size);
      for (int64_t n = n0; n < n1; n++) sample(n, col.data());
    });
  } else {
    std::vector<T> col(col_size);
    for (int64_t n = 0; n < c.N; n++) sample(n, col.data());
  }
}

}  // namespace

Metas meta_conv(Op op, const Stack& a) {
  Shape s;
  conv_shape(op, a, &s);
  const Tensor& x = a[0].tensor();
  return {contiguous_meta(s, x.dtype(), x.device())};
}

Stack cpu_conv(Op op, const Stack& a, const Metas& metas) {
  Shape s;
  Conv c = conv_shape(op, a, &s);
  Tensor out = empty_from_meta(metas[0]);
  DType dt = out.dtype(), ct = dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt;
  Tensor x = a[0].tensor().to(ct).contiguous(), w = a[1].tensor().to(ct).contiguous();
  Tensor b = a[2].is_none() ? Tensor() : a[2].tensor().to(ct).contiguous();
  Tensor y = ct == dt ? out : Tensor::empty(out.sizes(), ct);
  if (out.numel() > 0) {
    visit_dtype(ct, [&]<typename T>() {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, bool>)
        TC_ASSERT(false, "conv computes in float32 for half types; bool is rejected by the meta rule");
      else
        conv_kernel<T>(c, ct, x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, y.data<T>());
    });
  }
  if (!y.same(out)) out.copy_from(y);
  return {Value(out)};
}

}  // namespace tc
