// CUDA kernels of the creation group: constructors (empty zeros ones full eye, fill_) fill
// device memory with the value's bits (converted on the host exactly as the CPU kernel converts
// it), and the random ops draw from the same Philox stream as the CPU (tc/random.h documents the
// mapping from (seed, offset, element) to a value; these kernels implement it word for word, so
// rand/randint/bernoulli/dropout are bit-identical to the CPU and randn up to the last bit of
// double-precision libm vs CUDA math). arange and linspace compute on the host (their values
// follow PyTorch's CPU vector-lane arithmetic bit for bit) and are copied over in one transfer.
// multinomial: one thread per row checks the probabilities and builds the CPU's cumulative sums
// (double, in category order: the same roundings), one synchronisation raises a bad distribution
// before any random word is reserved (as on the CPU); then with replacement each draw searches
// its row's sums, and without replacement every category gets the CPU's exponential key
// -log(1 - u) / p and topk (smallest, ties by position) picks the samples.
#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/runtime.h"
#include "tc/random.h"

namespace tc::cuda {
namespace {

constexpr int kBlock = 256;

const char* uint_of(size_t itemsize) {
  switch (itemsize) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "u64";
  }
}

// out[0..n) = bits (contiguous), for items of `itemsize` bytes.
void fill_bits(void* out, int64_t n, size_t itemsize, uint64_t bits, int device) {
  if (n == 0) return;
  std::string U = uint_of(itemsize);
  std::string key = "fillbits:" + U;
  auto f = kernels(device, key, [&] {
    return prelude() + "typedef " + U + " U;\nextern \"C\" __global__ void fillb(U* __restrict__ out, i64 n, u64 bits) {\n"
           "  U v = (U)bits;\n  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) out[i] = v;\n}\n";
  }, {"fillb"})[0];
  int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, (int64_t)dev(device).sm_count * 32);
  void* p = out;
  void* args[] = {&p, &n, &bits};
  launch(device, f, (unsigned)std::max<int64_t>(blocks, 1), kBlock, args);
}

// The storage bits of `v` converted to dtype dt like the CPU's fill_ (scalar_as).
uint64_t scalar_bits(DType dt, const Value& v) {
  Tensor h = Tensor::empty({1}, dt);
  call(Op::fill_, bind(Op::fill_, {Value(h), v}, {}));
  uint64_t bits = 0;
  std::memcpy(&bits, h.data_ptr(), h.itemsize());
  return bits;
}

// Fills any (possibly strided) device tensor with the bits.
void fill_tensor_bits(const Tensor& t, uint64_t bits) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) return fill_bits(t.data_ptr(), t.numel(), t.itemsize(), bits, t.device().index);
  Tensor tmp = Tensor::empty({1}, t.dtype(), t.device());
  fill_bits(tmp.data_ptr(), 1, t.itemsize(), bits, t.device().index);
  copy_strided(t, tmp.as_strided(t.sizes(), Shape(t.dim(), 0), 0));
}

// ---- Philox on the device ------------------------------------------------------------------
const std::string& philox_src() {
  static const std::string s = R"CUDA(
struct PB { unsigned w[4]; };
__device__ __forceinline__ PB philox(u64 c, u64 seed) {
  unsigned c0 = (unsigned)c, c1 = (unsigned)(c >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    u64 p0 = (u64)0xD2511F53u * c0, p1 = (u64)0xCD9E8D57u * c2;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n1 = (unsigned)p1;
    unsigned n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1, n3 = (unsigned)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
  }
  PB b; b.w[0] = c0; b.w[1] = c1; b.w[2] = c2; b.w[3] = c3; return b;
}
__device__ __forceinline__ double ubits(unsigned w, int bits) { return (double)(w >> (32 - bits)) * (1.0 / (double)(1ull << bits)); }
__device__ __forceinline__ double u53(unsigned w0, unsigned w1) { return (double)((((u64)w1 << 32) | w0) >> 11) * 0x1p-53; }
)CUDA";
  return s;
}

int uniform_width(DType t) { return t == DType::Float16 ? 11 : t == DType::BFloat16 ? 8 : 24; }

// kind: "uniform" (a = from, b = to, c = the largest value below `to`), "normal" (a = mean,
// b = std), "int" (a = low as i64 bits, b = range as u64 bits), "bernoulli" (a = p, or per
// element probabilities in `prob`), "dropout" (a = p_keep, b = scale; `prob` = the input).
void random_fill(const std::string& kind, const Tensor& out, double a, double b, double c, int64_t ia = 0,
                 uint64_t ib = 0, const Tensor& aux = Tensor()) {
  int64_t n = out.numel();
  if (n == 0) return;
  int device = out.device().index;
  DType dt = out.dtype();
  bool f64 = dt == DType::Float64;
  int W = 1;
  if (kind == "uniform" || kind == "normal") W = f64 ? 2 : 1;
  if (kind == "int") W = ib > (1ull << 32) ? 2 : 1;
  RngState st = philox_reserve((uint64_t)n * W);
  int per_block = 4 / W;
  std::string T = ctype(dt), AUX = aux.defined() ? ctype(aux.dtype()) : "float";
  std::string key = "rand:" + kind + ":" + T + ":" + AUX + ":" + std::to_string(W);
  auto f = kernels(device, key, [&] {
    std::string s = prelude() + philox_src() + "typedef " + T + " T;\ntypedef " + AUX + " X;\n";
    s += "extern \"C\" __global__ void rnd(T* __restrict__ out, const X* __restrict__ aux, i64 n, u64 seed, u64 boff, "
         "double a, double b, double c, i64 ia, u64 ib) {\n";
    s += "  i64 j = (i64)blockIdx.x * 256 + threadIdx.x;\n  const int P = " + std::to_string(per_block) +
         ";\n  i64 first = j * P;\n  if (first >= n) return;\n  PB w = philox(boff + (u64)j, seed);\n";
    if (kind == "uniform") {
      s += "  for (int k = 0; k < P && first + k < n; k++) {\n";
      s += f64 ? "    double u = u53(w.w[2 * k], w.w[2 * k + 1]);\n"
               : "    double u = ubits(w.w[k], " + std::to_string(uniform_width(dt)) + ");\n";
      s += "    T v = Cv<T>::f(fma(u, b - a, a));\n    if ((double)ld(v) >= b && a < b) v = Cv<T>::f(c);\n"
           "    out[first + k] = v;\n  }\n";
    } else if (kind == "normal") {
      s += "  double z[4];\n";
      s += std::string("  for (int pair = 0; pair < ") + (f64 ? "1" : "2") + "; pair++) {\n";
      s += f64 ? "    double u1 = u53(w.w[0], w.w[1]), u2 = u53(w.w[2], w.w[3]);\n"
               : "    double u1 = ubits(w.w[2 * pair], 24), u2 = ubits(w.w[2 * pair + 1], 24);\n";
      s += "    double r = sqrt(-2.0 * log(1.0 - u1)), th = 6.283185307179586 * u2;\n"
           "    z[2 * pair] = r * cos(th); z[2 * pair + 1] = r * sin(th);\n  }\n"
           "  for (int k = 0; k < P && first + k < n; k++) out[first + k] = Cv<T>::f(fma(z[k], b, a));\n";
    } else if (kind == "int") {
      bool isf = is_floating(dt);
      s += "  for (int k = 0; k < P && first + k < n; k++) {\n";
      s += W == 2 ? "    u64 x = ((u64)w.w[2 * k + 1] << 32) | w.w[2 * k];\n" : "    u64 x = w.w[k];\n";
      s += "    i64 v = (i64)((u64)ia + x % ib);\n";
      s += isf ? "    out[first + k] = Cv<T>::f((double)v);\n" : "    out[first + k] = Cv<T>::f(v);\n";
      s += "  }\n";
    } else if (kind == "bernoulli") {
      s += "  for (int k = 0; k < P && first + k < n; k++) {\n"
           "    double p = aux ? (double)ld(aux[first + k]) : a;\n"
           "    out[first + k] = Cv<T>::f((double)w.w[k] * 0x1p-32 < p ? 1.0 : 0.0);\n  }\n";
    } else {  // dropout: out = T(A(x) * (A(keep) * scale)), A the opmath type
      s += "  typedef " + std::string(mtype(dt)) + " A;\n"
           "  for (int k = 0; k < P && first + k < n; k++) {\n"
           "    A keep = (double)w.w[k] * 0x1p-32 < a ? (A)1 : (A)0;\n"
           "    out[first + k] = Cv<T>::f(cvt<A>(aux[first + k]) * (keep * (A)b));\n  }\n";
    }
    s += "}\n";
    return s;
  }, {"rnd"})[0];
  void* op = out.data_ptr();
  void* xp = aux.defined() ? aux.data_ptr() : nullptr;
  uint64_t seed = st.seed, boff = st.offset / 4;
  void* args[] = {&op, &xp, &n, &seed, &boff, &a, &b, &c, &ia, &ib};
  int64_t blocks = ((n + per_block - 1) / per_block + kBlock - 1) / kBlock;
  launch(device, f, (unsigned)blocks, kBlock, args);
}

// The largest value of dtype dt below `to` (as the CPU's largest_below), as a double.
double largest_below(DType dt, double to) {
  Tensor h = Tensor::empty({1}, dt);
  Tensor hv = Tensor::scalar(to);
  h.copy_from(hv);
  for (int guard = 0; guard < 64 && h.item_double() >= to; guard++) {
    if (dt == DType::Float64) {
      h.data<double>()[0] = std::nextafter(h.data<double>()[0], -INFINITY);
    } else if (dt == DType::Float32) {
      h.data<float>()[0] = std::nextafterf(h.data<float>()[0], -INFINITY);
    } else {
      uint16_t b;
      std::memcpy(&b, h.data_ptr(), 2);
      b = (b & 0x7fff) == 0 ? 0x8001 : (b & 0x8000) ? b + 1 : b - 1;
      std::memcpy(h.data_ptr(), &b, 2);
    }
  }
  return h.item_double();
}

// In-place random ops write a contiguous buffer, then place it into a strided self.
template <typename F>
Stack in_place(const Tensor& self, F&& fill) {
  if (self.is_contiguous()) {
    fill(self);
    Tensor(self).bump_version();
  } else {
    Tensor tmp = Tensor::empty(self.sizes(), self.dtype(), self.device());
    fill(tmp);
    Tensor(self).copy_from(tmp);
  }
  return {Value(self)};
}

// multinomial (checked by the meta rule): out int64 [rows, ns] or [ns], 1-based categories.
void multinomial(const Tensor& probs, int64_t ns, bool replacement, const Tensor& out) {
  Device d = out.device();
  int device = d.index;
  int64_t cats = probs.sizes().back(), rows = probs.dim() == 2 ? probs.sizes()[0] : 1;
  Tensor p = contiguous_as(probs, DType::Float64);
  Tensor cdf = Tensor::empty({rows, cats}, DType::Float64, d);
  auto f = kernels(device, "multinomial", [] {
    return prelude() + philox_src() +
           "extern \"C\" __global__ void mcdf(const double* __restrict__ p, double* __restrict__ cdf, i64 rows, i64 cats, i64* err) {\n"
           "  i64 r = (i64)blockIdx.x * 256 + threadIdx.x;\n  if (r >= rows) return;\n"
           "  double s = 0;\n"
           "  for (i64 c = 0; c < cats; c++) {\n"
           "    double v = p[r * cats + c];\n"
           "    if (!(v >= 0 && v <= 1.7976931348623157e308)) { flag_error(err, 1, r); return; }\n"
           "    cdf[r * cats + c] = s += v;\n  }\n"
           "  if (!(s > 0)) flag_error(err, 2, r);\n}\n"
           "extern \"C\" __global__ void mdraw(const double* __restrict__ p, const double* __restrict__ cdf, i64* __restrict__ out,\n"
           "    i64 draws, i64 ns, i64 cats, u64 seed, u64 boff) {\n"
           "  i64 k = (i64)blockIdx.x * 256 + threadIdx.x;\n  if (k >= draws) return;\n"
           "  PB w = philox(boff + (u64)(k / 2), seed);\n  int lane = 2 * (int)(k % 2);\n"
           "  i64 r = k / ns;\n  const double* row = cdf + r * cats;\n"
           "  double target = u53(w.w[lane], w.w[lane + 1]) * row[cats - 1];\n"
           "  i64 lo = 0, hi = cats;\n"
           "  while (lo < hi) { i64 mid = (lo + hi) / 2; if (row[mid] > target) hi = mid; else lo = mid + 1; }\n"
           "  i64 c = lo;\n"
           "  while (c == cats || (c > 0 && p[r * cats + c] == 0)) c--;\n"
           "  out[k] = c + 1;\n}\n"
           "extern \"C\" __global__ void mkeys(const double* __restrict__ p, double* __restrict__ key, i64 n, u64 seed, u64 boff) {\n"
           "  i64 k = (i64)blockIdx.x * 256 + threadIdx.x;\n  if (k >= n) return;\n"
           "  PB w = philox(boff + (u64)(k / 2), seed);\n  int lane = 2 * (int)(k % 2);\n"
           "  double u = u53(w.w[lane], w.w[lane + 1]), pr = p[k];\n"
           "  key[k] = pr == 0 ? m_inf<double>() : -log(1.0 - u) / pr;\n}\n";
  }, {"mcdf", "mdraw", "mkeys"});
  void* pp = p.data_ptr();
  void* cp = cdf.data_ptr();
  void* err = reinterpret_cast<void*>(dev(device).error_word);
  void* a0[] = {&pp, &cp, &rows, &cats, &err};
  launch(device, f[0], (unsigned)((rows + 255) / 256), 256, a0);
  int64_t bad = take_device_error(device, nullptr);
  TC_CHECK(bad != 1, ValueError, "multinomial(): probability tensor contains either inf, nan or element < 0");
  TC_CHECK(bad != 2, ValueError, "multinomial(): invalid multinomial distribution (sum of probabilities <= 0)");
  if (replacement) {
    int64_t draws = rows * ns;
    RngState st = philox_reserve((uint64_t)draws * 2);
    uint64_t seed = st.seed, boff = st.offset / 4;
    void* op = out.data_ptr();
    void* a1[] = {&pp, &cp, &op, &draws, &ns, &cats, &seed, &boff};
    launch(device, f[1], (unsigned)((draws + 255) / 256), 256, a1);
    return;
  }
  int64_t n = rows * cats;
  RngState st = philox_reserve((uint64_t)n * 2);
  uint64_t seed = st.seed, boff = st.offset / 4;
  void* kp = cdf.data_ptr();  // the keys replace the sums
  void* a2[] = {&pp, &kp, &n, &seed, &boff};
  launch(device, f[2], (unsigned)((n + 255) / 256), 256, a2);
  Tensor picked = call(Op::topk, bind(Op::topk, {Value(cdf), Value(ns)}, {{"largest", Value(false)}}))[1].tensor();
  copy_strided(out, picked.as_strided(out.sizes(), contiguous_strides(out.sizes()), 0));
}

}  // namespace

// dropout's kernel (nn group): the bernoulli(1 - p) stream of the CPU, fused with the scaling.
Tensor dropout_cuda(const Tensor& x, double p, const TensorMeta& m) {
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  Tensor xc = contiguous_as(x, x.dtype());
  // p == 1: the CPU draws nothing and multiplies by 0 (NaN and inf stay NaN)
  if (p == 1) {
    out.copy_from(call1(Op::mul, {xc, 0.0}));
    return out;
  }
  double scale = 1.0 / (1.0 - p);
  if (mtype(x.dtype()) == std::string("float")) scale = (float)scale;
  random_fill("dropout", out, 1.0 - p, scale, 0, 0, 0, xc);
  return out;
}

bool creation(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::fill_: {
      const Tensor& self = a[0].tensor();
      fill_tensor_bits(self, scalar_bits(self.dtype(), a[1]));
      Tensor(self).bump_version();
      *result = {Value(self)};
      return true;
    }
    case Op::uniform_: {
      const Tensor& self = a[0].tensor();
      double from = a[1].to_double(), to = a[2].to_double();
      double top = largest_below(self.dtype(), to);
      *result = in_place(self, [&](const Tensor& t) { random_fill("uniform", t, from, to, top); });
      return true;
    }
    case Op::normal_: {
      const Tensor& self = a[0].tensor();
      *result = in_place(self, [&](const Tensor& t) { random_fill("normal", t, a[1].to_double(), a[2].to_double(), 0); });
      return true;
    }
    default: break;
  }
  Tensor out = empty_from_meta(m[0]);
  switch (op) {
    case Op::empty: break;
    case Op::zeros: fill_bits(out.data_ptr(), out.numel(), out.itemsize(), 0, out.device().index); break;
    case Op::ones: fill_bits(out.data_ptr(), out.numel(), out.itemsize(), scalar_bits(out.dtype(), Value((int64_t)1)),
                             out.device().index); break;
    case Op::full:
      fill_bits(out.data_ptr(), out.numel(), out.itemsize(), scalar_bits(out.dtype(), a[1]), out.device().index);
      break;
    case Op::eye: {
      int device = out.device().index;
      fill_bits(out.data_ptr(), out.numel(), out.itemsize(), 0, device);
      int64_t rows = m[0].sizes[0], cols = m[0].sizes[1], k = std::min(rows, cols);
      if (k > 0) {
        // the diagonal: a strided view of stride cols + 1
        Tensor diag = out.as_strided({k}, {cols + 1}, 0);
        fill_tensor_bits(diag, scalar_bits(out.dtype(), Value((int64_t)1)));
      }
      break;
    }
    case Op::arange: case Op::linspace: {
      // host values (PyTorch's lane arithmetic), one transfer
      Metas hm = m;
      hm[0].device = Device{};
      Stack ha = a;
      size_t dev_at = op == Op::arange ? 4 : 4;
      ha[dev_at] = Value(Device{});
      Tensor h = cpu_creation(op, ha, hm)[0].tensor();
      if (out.numel()) out.copy_from(h);
      break;
    }
    case Op::multinomial: multinomial(a[0].tensor(), a[1].to_int(), a[2].to_bool(), out); break;
    case Op::rand: random_fill("uniform", out, 0.0, 1.0, largest_below(out.dtype(), 1.0)); break;
    case Op::randn: random_fill("normal", out, 0.0, 1.0, 0); break;
    case Op::randint: {
      int64_t low = a[0].to_int(), high = a[1].to_int();
      random_fill("int", out, 0, 0, 0, low, (uint64_t)high - (uint64_t)low);
      break;
    }
    case Op::bernoulli: {
      if (a[1].is_none()) {
        const Tensor& p = a[0].tensor();
        Tensor pc = contiguous_as(p, DType::Float64);
        // probabilities outside [0, 1] (or NaN) are an error, as on the CPU
        Tensor bad = call1(Op::logical_or, {call1(Op::lt, {pc, 0.0}), call1(Op::gt, {pc, 1.0})});
        bad = call1(Op::logical_or, {bad, call1(Op::isnan, {pc})});
        if (pc.numel() && call1(Op::any, {bad}).item_int()) {
          Tensor hp = Tensor::empty(pc.sizes(), DType::Float64);
          hp.copy_from(pc);
          for (int64_t i = 0; i < hp.numel(); i++) {
            double v = hp.data<double>()[i];
            TC_CHECK(v >= 0 && v <= 1, ValueError, "bernoulli(): probabilities must be in [0, 1], got %g at element %lld", v,
                     (long long)i);
          }
        }
        random_fill("bernoulli", out, 0, 0, 0, 0, 0, pc);
      } else {
        random_fill("bernoulli", out, a[1].to_double(), 0, 0);
      }
      break;
    }
    default: return false;
  }
  const ArgSpec& last = schema(op).args.back();
  if (last.name == "requires_grad" && a.back().to_bool()) out.set_requires_grad(true);
  *result = {Value(out)};
  return true;
}

}  // namespace tc::cuda
