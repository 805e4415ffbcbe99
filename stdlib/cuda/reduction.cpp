// CUDA kernels of the reduction group: sum/mean (floating, double accumulation like the CPU),
// amax/amin (NaN propagating) over any dims through one generic row reduction (kept dims first,
// reduced dims last, made contiguous; long rows split into chunks and reduced in two passes),
// and softmax/log_softmax along a dim (one block per row). The other reductions take the host
// fallback for now.
#include <cmath>
#include <limits>

#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kBlock = 256;

// The input with kept dims first and reduced dims last, contiguous in dtype dt: rows x len.
struct RowsView {
  Tensor t;
  int64_t rows, len;
};
RowsView to_rows(const Tensor& x, const std::vector<bool>& red, DType dt) {
  Shape sz, st;
  int64_t rows = 1, len = 1;
  for (int64_t d = 0; d < x.dim(); d++)
    if (!red[d]) {
      sz.push_back(x.sizes()[d]);
      st.push_back(x.strides()[d]);
      rows *= x.sizes()[d];
    }
  for (int64_t d = 0; d < x.dim(); d++)
    if (red[d]) {
      sz.push_back(x.sizes()[d]);
      st.push_back(x.strides()[d]);
      len *= x.sizes()[d];
    }
  Tensor p = x.as_strided(sz, st, x.offset());
  return {contiguous_as(p, dt), rows, len};
}

std::string lowest_lit(DType t) {
  switch (t) {
    case DType::Int64: return "(-9223372036854775807LL - 1)";
    case DType::Int32: return "(-2147483647 - 1)";
    case DType::UInt8: return "((u8)0)";
    case DType::Bool: return "false";
    default: return "(-m_inf<A>())";
  }
}
std::string highest_lit(DType t) {
  switch (t) {
    case DType::Int64: return "9223372036854775807LL";
    case DType::Int32: return "2147483647";
    case DType::UInt8: return "((u8)255)";
    case DType::Bool: return "true";
    default: return "(m_inf<A>())";
  }
}

// out[r] (dtype O) = FIN(combine over in[r*len .. r*len+len)) for kind "sum" (times scale),
// "max", "min".
void row_reduce(const std::string& kind, const Tensor& in, DType acc_dt, const Tensor& out, int64_t rows, int64_t len,
                double scale) {
  int device = out.device().index;
  DeviceState& ds = dev(device);
  int64_t target = (int64_t)ds.sm_count * 8;
  int64_t per_row = std::max<int64_t>(1, target / std::max<int64_t>(rows, 1));
  int64_t chunk = std::max<int64_t>(kBlock * 16, (len + per_row - 1) / per_row);
  int64_t chunks = std::max<int64_t>(1, (len + chunk - 1) / chunk);
  auto build = [&](DType S, DType O, bool final) {
    std::string A = mtype(acc_dt);
    std::string init = kind == "sum" ? "(A)0" : kind == "prod" ? "(A)1" : kind == "max" ? lowest_lit(acc_dt) : highest_lit(acc_dt);
    std::string comb = kind == "sum" ? "(x + y)" : kind == "prod" ? "(x * y)" : is_floating(acc_dt) ? (kind == "max" ? "nan_max(x, y)" : "nan_min(x, y)")
                                                                        : (kind == "max" ? "(x < y ? y : x)" : "(y < x ? y : x)");
    std::string fin = kind == "sum" && final ? "acc * (A)scale" : "acc";
    std::string key = "red:" + kind + ctype(S) + ctype(O) + A + (final ? "f" : "p");
    std::string src_fn = prelude() + "typedef " + A + " A;\n__device__ __forceinline__ A comb(A x, A y) { return " +
                         comb + "; }\n" + "extern \"C\" __global__ void __launch_bounds__(256) red(const " + ctype(S) +
                         "* __restrict__ in, " + ctype(O) +
                         "* __restrict__ out, i64 len, i64 chunks, i64 chunk, double scale) {\n"
                         "  i64 bid = blockIdx.x, row = bid / chunks, c = bid % chunks;\n"
                         "  i64 b = c * chunk, e = b + chunk < len ? b + chunk : len;\n"
                         "  const " + std::string(ctype(S)) + "* p = in + row * len;\n"
                         "  A acc = " + init + ";\n"
                         "  for (i64 i = b + threadIdx.x; i < e; i += 256) acc = comb(acc, cvt<A>(p[i]));\n"
                         "  for (int o = 16; o > 0; o >>= 1) acc = comb(acc, shfl_down(acc, o));\n"
                         "  __shared__ A sm[8];\n"
                         "  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = acc;\n"
                         "  __syncthreads();\n"
                         "  if (threadIdx.x < 32) {\n"
                         "    acc = threadIdx.x < 8 ? sm[threadIdx.x] : " + init + ";\n"
                         "    for (int o = 4; o > 0; o >>= 1) acc = comb(acc, shfl_down(acc, o));\n"
                         "    if (threadIdx.x == 0) out[bid] = Cv<" + ctype(O) + ">::f(" + fin + ");\n"
                         "  }\n}\n";
    return kernels(device, key, [=] { return src_fn; }, {"red"})[0];
  };
  if (rows == 0) return;
  if (chunks == 1) {
    CUfunction f = build(in.dtype(), out.dtype(), true);
    void* ip = in.data_ptr();
    void* op = out.data_ptr();
    int64_t one = 1, ch = std::max<int64_t>(len, 1);
    void* args[] = {&ip, &op, &len, &one, &ch, &scale};
    launch(device, f, (unsigned)rows, kBlock, args);
    return;
  }
  Tensor part = Tensor::empty({rows * chunks}, acc_dt, out.device());
  CUfunction f1 = build(in.dtype(), acc_dt, false);
  void* ip = in.data_ptr();
  void* pp = part.data_ptr();
  double one_s = 1;
  void* a1[] = {&ip, &pp, &len, &chunks, &chunk, &one_s};
  launch(device, f1, (unsigned)(rows * chunks), kBlock, a1);
  CUfunction f2 = build(acc_dt, out.dtype(), true);
  void* op = out.data_ptr();
  int64_t one = 1, ch2 = chunks;
  void* a2[] = {&pp, &op, &chunks, &one, &ch2, &scale};
  launch(device, f2, (unsigned)rows, kBlock, a2);
}

std::vector<bool> dims_of(const Tensor& x, const Value& v) {
  std::vector<bool> red(x.dim(), false);
  if (x.dim() == 0) return red;
  if (v.is_none() || (v.is_int_list() && v.ints().empty())) {
    red.assign(x.dim(), true);
    return red;
  }
  IntList l = v.is_int_list() ? v.ints() : IntList{v.to_int()};
  for (int64_t d : l) red[wrap_dim(d, x.dim())] = true;
  return red;
}

void softmax_rows(const Tensor& in, const Tensor& out, int64_t rows, int64_t len, bool log) {
  int device = out.device().index;
  DType S = in.dtype(), O = out.dtype();
  std::string A = (S == DType::Float64 || O == DType::Float64) ? "double" : "float";
  std::string key = std::string("softmax:") + (log ? "log" : "") + ctype(S) + ctype(O) + A;
  std::string src = prelude() + "typedef " + A + " A;\n" +
                    "__device__ A block_reduce(A v, bool mx, A* sm) {\n"
                    "  for (int o = 16; o > 0; o >>= 1) { A w = shfl_down(v, o); v = mx ? (w > v || w != w ? w : v) : v + w; }\n"
                    "  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;\n  __syncthreads();\n"
                    "  if (threadIdx.x < 32) {\n    v = threadIdx.x < 8 ? sm[threadIdx.x] : (mx ? -m_inf<A>() : (A)0);\n"
                    "    for (int o = 4; o > 0; o >>= 1) { A w = shfl_down(v, o); v = mx ? (w > v || w != w ? w : v) : v + w; }\n"
                    "    if (threadIdx.x == 0) sm[8] = v;\n  }\n  __syncthreads();\n  A r = sm[8];\n  __syncthreads();\n  return r;\n}\n"
                    "extern \"C\" __global__ void __launch_bounds__(256) softmax(const " + ctype(S) + "* __restrict__ in, " +
                    ctype(O) + "* __restrict__ out, i64 len) {\n"
                    "  __shared__ A sm[9];\n  const " + ctype(S) + "* p = in + (i64)blockIdx.x * len;\n  " + ctype(O) +
                    "* q = out + (i64)blockIdx.x * len;\n"
                    "  A mx = -m_inf<A>();\n  for (i64 i = threadIdx.x; i < len; i += 256) { A v = cvt<A>(p[i]); mx = (v > mx || v != v) ? v : mx; }\n"
                    "  mx = block_reduce(mx, true, sm);\n"
                    "  A s = 0;\n  for (i64 i = threadIdx.x; i < len; i += 256) s += m_exp(cvt<A>(p[i]) - mx);\n"
                    "  s = block_reduce(s, false, sm);\n" +
                    (log ? "  A ls = m_log(s);\n  for (i64 i = threadIdx.x; i < len; i += 256) q[i] = Cv<" + std::string(ctype(O)) +
                               ">::f(cvt<A>(p[i]) - mx - ls);\n"
                         : "  for (i64 i = threadIdx.x; i < len; i += 256) q[i] = Cv<" + std::string(ctype(O)) +
                               ">::f(m_exp(cvt<A>(p[i]) - mx) / s);\n") +
                    "}\n";
  CUfunction f = kernels(device, key, [=] { return src; }, {"softmax"})[0];
  void* ip = in.data_ptr();
  void* op = out.data_ptr();
  void* args[] = {&ip, &op, &len};
  launch(device, f, (unsigned)rows, kBlock, args);
}

}  // namespace

bool reduction_more(Op op, const Stack& a, const Metas& m, Stack* result);

bool reduction(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x = a[0].tensor();
  switch (op) {
    case Op::sort: case Op::topk: return sort_topk(op, a, m, result);
    case Op::sum: case Op::mean: {
      DType cd = a[3].is_none() ? x.dtype() : a[3].dtype();
      if (is_floating(cd) != is_floating(m[0].dtype) || (op == Op::mean && !is_floating(cd))) return false;
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      // CPU: the input converted to cd, accumulated in double
      Tensor src = x.dtype() == cd ? x : contiguous_as(x, cd);
      RowsView r = to_rows(src, dims_of(x, a[1]), cd);
      double scale = op == Op::mean ? 1.0 / (double)r.len : 1.0;
      row_reduce("sum", r.t, is_floating(cd) ? DType::Float64 : DType::Int64, out, r.rows, r.len, scale);
      return true;
    }
    case Op::amax: case Op::amin: {
      DType dt = x.dtype();
      if (dt == DType::Bool) return reduction_more(op == Op::amax ? Op::any : Op::all, a, m, result);  // same kernels
      if (m[0].dtype != dt) return false;
      auto red = dims_of(x, a[1]);
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      RowsView r = to_rows(x, red, dt);
      if (r.len == 0) return false;  // the CPU kernel raises the error
      DType acc = dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt;
      row_reduce(op == Op::amax ? "max" : "min", r.t, acc, out, r.rows, r.len, 1.0);
      return true;
    }
    case Op::softmax: case Op::log_softmax: {
      DType od = m[0].dtype;
      if (!is_floating(od)) return false;
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      int64_t d = x.dim() == 0 ? 0 : wrap_dim(a[1].to_int(), x.dim());
      std::vector<bool> last(x.dim(), false);
      if (x.dim() > 0) last[d] = true;
      // CPU converts to the dtype option first
      Tensor src = x.dtype() == od ? x : contiguous_as(x, od);
      RowsView r = to_rows(src, last, od);
      Tensor tmp = r.t.is_contiguous() && x.dim() > 0 && d == x.dim() - 1 ? out : Tensor::empty({r.rows * r.len}, od, out.device());
      softmax_rows(r.t, tmp, r.rows, r.len, op == Op::log_softmax);
      if (!tmp.same(out)) {
        // out viewed in the rows order (kept dims, then d)
        Shape sz, st;
        for (int64_t k = 0; k < x.dim(); k++)
          if (k != d) {
            sz.push_back(out.sizes()[k]);
            st.push_back(out.strides()[k]);
          }
        if (x.dim() > 0) {
          sz.push_back(out.sizes()[d]);
          st.push_back(out.strides()[d]);
        }
        copy_strided(out.as_strided(sz, st, 0), tmp.as_strided(sz, contiguous_strides(sz), 0));
      }
      return true;
    }
    default: return reduction_more(op, a, m, result);
  }
}

// ---- the other reductions -----------------------------------------------------------------------
namespace {

// block-wide max/min (block_sum comes from block_sum_src)
const std::string& block_red_src() {
  static const std::string s = R"CUDA(
__device__ double bext(double v, double* sm, bool mx) {
  for (int o = 16; o > 0; o >>= 1) { double w = shfl_down(v, o); v = (mx ? w > v : w < v) || w != w ? (v != v ? v : w) : v; }
  if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < 8 ? sm[threadIdx.x] : (mx ? -m_inf<double>() : m_inf<double>());
    for (int o = 4; o > 0; o >>= 1) { double w = shfl_down(v, o); v = (mx ? w > v : w < v) || w != w ? (v != v ? v : w) : v; }
    if (threadIdx.x == 0) sm[8] = v;
  }
  __syncthreads();
  double r = sm[8];
  __syncthreads();
  return r;
}
)CUDA";
  return s;
}

// One block per row of a contiguous rows x len tensor; results in double:
//   kind 0: moments (out0 = mean, out1 = sum of squared deviations)
//   kind 1: logsumexp (out0)
//   kind 2: p-norm (out0), p in `p` (inf, -inf, 0, 1, 2 or other)
void row_stats(int kind, const Tensor& x, int64_t rows, int64_t len, const Tensor& out0, const Tensor& out1, double p) {
  int device = x.device().index;
  std::string T = ctype(x.dtype()), A = mtype(x.dtype());
  auto f = kernels(device, "rowstats:" + T, [&] {
    return prelude() + block_sum_src() + block_red_src() + "typedef " + T + " T;\ntypedef " + A + " A;\n"
           "extern \"C\" __global__ void __launch_bounds__(256) rst(const T* __restrict__ x, double* o0, double* o1, i64 n, int kind, double p) {\n"
           "  __shared__ double sm[9];\n  const T* q = x + (i64)blockIdx.x * n;\n  i64 r = blockIdx.x;\n"
           "  if (kind == 0) {\n"
           "    double t = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) t += (double)cvt<A>(q[i]);\n"
           "    double mean = block_sum(t, sm) / (double)n;\n"
           "    double s2 = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) { double d = (double)cvt<A>(q[i]) - mean; s2 += d * d; }\n"
           "    s2 = block_sum(s2, sm);\n    if (threadIdx.x == 0) { o0[r] = mean; o1[r] = s2; }\n"
           "  } else if (kind == 1) {\n"
           "    double mx = -m_inf<double>();\n"
           "    for (i64 i = threadIdx.x; i < n; i += 256) { double v = (double)cvt<A>(q[i]); mx = v > mx || v != v ? (mx != mx ? mx : v) : mx; }\n"
           "    mx = bext(mx, sm, true);\n    double sh = isinf(mx) ? 0.0 : mx;\n"
           "    double s = 0;\n    for (i64 i = threadIdx.x; i < n; i += 256) s += exp((double)cvt<A>(q[i]) - sh);\n"
           "    s = block_sum(s, sm);\n    if (threadIdx.x == 0) o0[r] = log(s) + sh;\n"
           "  } else {\n"
           "    if (isinf(p)) {\n"
           "      bool mx = p > 0;\n      double e = mx ? -m_inf<double>() : m_inf<double>();\n"
           "      for (i64 i = threadIdx.x; i < n; i += 256) { double v = fabs((double)cvt<A>(q[i])); e = (mx ? v > e : v < e) || v != v ? (e != e ? e : v) : e; }\n"
           "      e = bext(e, sm, mx);\n      if (threadIdx.x == 0) o0[r] = e;\n"
           "    } else {\n"
           "      double s = 0;\n"
           "      for (i64 i = threadIdx.x; i < n; i += 256) { double v = (double)cvt<A>(q[i]);\n"
           "        s += p == 2 ? v * v : p == 1 ? fabs(v) : p == 0 ? (v != 0 ? 1.0 : 0.0) : pow(fabs(v), p); }\n"
           "      s = block_sum(s, sm);\n"
           "      if (threadIdx.x == 0) o0[r] = p == 2 ? sqrt(s) : (p == 1 || p == 0) ? s : (n == 0 ? 0.0 : pow(s, 1.0 / p));\n"
           "    }\n  }\n}\n";
  }, {"rst"})[0];
  const void* xp = x.data_ptr();
  void* a0 = out0.data_ptr();
  void* a1 = out1.defined() ? out1.data_ptr() : nullptr;
  void* args[] = {&xp, &a0, &a1, &len, &kind, &p};
  launch(device, f, (unsigned)rows, kBlock, args);
}

// max/min with the first index (NaN wins, first NaN; ties: first occurrence), one block per row.
void row_argext(const Tensor& x, int64_t rows, int64_t len, bool mx, const Tensor& vals, const Tensor& idx) {
  int device = x.device().index;
  std::string T = ctype(x.dtype()), A = mtype(x.dtype());
  std::string V = vals.defined() ? ctype(vals.dtype()) : T;
  auto f = kernels(device, "argext:" + T + V, [&] {
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\ntypedef " + V + " V;\n"
           "__device__ __forceinline__ bool better(A v, i64 i, A b, i64 j, bool mx) {\n"
           "  bool vn = v != v, bn = b != b;\n"
           "  if (vn || bn) return vn && (!bn || i < j);\n"
           "  if (v == b) return i < j;\n  return mx ? v > b : v < b;\n}\n"
           "extern \"C\" __global__ void __launch_bounds__(256) aext(const T* __restrict__ x, V* vals, i64* idx, i64 n, int mx) {\n"
           "  __shared__ A sv[256];\n  __shared__ i64 si[256];\n"
           "  const T* q = x + (i64)blockIdx.x * n;\n"
           "  A b = cvt<A>(q[0]);\n  i64 j = n;\n"
           "  for (i64 i = threadIdx.x; i < n; i += 256) { A v = cvt<A>(q[i]); if (j == n || better(v, i, b, j, mx)) { b = v; j = i; } }\n"
           "  sv[threadIdx.x] = b; si[threadIdx.x] = j;\n  __syncthreads();\n"
           "  for (int s = 128; s > 0; s >>= 1) {\n"
           "    if (threadIdx.x < s) { i64 j2 = si[threadIdx.x + s]; A b2 = sv[threadIdx.x + s];\n"
           "      if (j2 < n && (si[threadIdx.x] == n || better(b2, j2, sv[threadIdx.x], si[threadIdx.x], mx))) { sv[threadIdx.x] = b2; si[threadIdx.x] = j2; } }\n"
           "    __syncthreads();\n  }\n"
           "  if (threadIdx.x == 0) { if (vals) vals[blockIdx.x] = Cv<V>::f(sv[0]); if (idx) idx[blockIdx.x] = si[0] + 1; }\n}\n";
  }, {"aext"})[0];
  const void* xp = x.data_ptr();
  void* vp = vals.defined() ? vals.data_ptr() : nullptr;
  void* ip = idx.defined() ? idx.data_ptr() : nullptr;
  int m = mx ? 1 : 0;
  void* args[] = {&xp, &vp, &ip, &len, &m};
  launch(device, f, (unsigned)rows, kBlock, args);
}

// Inclusive prefix sums along rows (contiguous), double or wrapping int64 accumulation like the
// CPU: one block per row, each thread a contiguous segment.
void row_cumsum(const Tensor& x, const Tensor& y, int64_t rows, int64_t len) {
  int device = x.device().index;
  DType dt = x.dtype();
  std::string T = ctype(dt), A = mtype(dt);
  bool fl = is_floating(dt);
  std::string ACC = fl ? "double" : "u64";
  auto f = kernels(device, "cumsum:" + T, [&] {
    std::string load = fl ? "(double)cvt<A>(q[i])" : "(u64)(i64)q[i]";
    std::string store = fl ? "Cv<T>::f((A)acc)" : "(T)(i64)acc";
    return prelude() + "typedef " + T + " T;\ntypedef " + A + " A;\ntypedef " + ACC + " C;\n"
           "extern \"C\" __global__ void __launch_bounds__(256) csum(const T* __restrict__ x, T* __restrict__ y, i64 n) {\n"
           "  __shared__ C part[256];\n  const T* q = x + (i64)blockIdx.x * n;\n  T* o = y + (i64)blockIdx.x * n;\n"
           "  i64 seg = (n + 255) / 256, b = threadIdx.x * seg, e = b + seg < n ? b + seg : n;\n"
           "  C s = 0;\n  for (i64 i = b; i < e; i++) s += " + load + ";\n"
           "  part[threadIdx.x] = s;\n  __syncthreads();\n"
           "  if (threadIdx.x == 0) { C run = 0; for (int t = 0; t < 256; t++) { C v = part[t]; part[t] = run; run += v; } }\n"
           "  __syncthreads();\n"
           "  C acc = part[threadIdx.x];\n"
           "  for (i64 i = b; i < e; i++) { acc += " + load + "; o[i] = " + store + "; }\n}\n";
  }, {"csum"})[0];
  const void* xp = x.data_ptr();
  void* yp = y.data_ptr();
  void* args[] = {&xp, &yp, &len};
  launch(device, f, (unsigned)rows, kBlock, args);
}

// Sets every element of out (any layout) to v.
void fill_like(const Tensor& out, int64_t v) {
  Tensor one = Tensor::empty({1}, out.dtype(), out.device());
  fill(one, (double)v, v, !is_floating(out.dtype()));
  copy_strided(out, one.as_strided(out.sizes(), Shape(out.dim(), 0), 0));
}

// Places a rows-ordered (kept dims, then dim d) contiguous result back into out's layout.
void restore_dim(const Tensor& out, const Tensor& tmp, int64_t d) {
  Shape sz, st;
  for (int64_t k = 0; k < out.dim(); k++)
    if (k != d) {
      sz.push_back(out.sizes()[k]);
      st.push_back(out.strides()[k]);
    }
  if (out.dim() > 0) {
    sz.push_back(out.sizes()[d]);
    st.push_back(out.strides()[d]);
  }
  copy_strided(out.as_strided(sz, st, out.offset()), tmp.as_strided(sz, contiguous_strides(sz), 0));
}

}  // namespace

bool reduction_more(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x = a[0].tensor();
  switch (op) {
    case Op::var: case Op::std: case Op::var_mean: {
      if (!is_floating(x.dtype())) return false;
      RowsView r = to_rows(x, dims_of(x, a[1]), x.dtype());
      Tensor mean = Tensor::empty({r.rows}, DType::Float64, x.device()), m2 = Tensor::empty({r.rows}, DType::Float64, x.device());
      if (r.len == 0) {  // mean NaN, variance 0 / 0
        fill(mean, NAN, 0, false);
        fill(m2, 0, 0, false);
      } else {
        row_stats(0, r.t, r.rows, r.len, mean, m2, 0);
      }
      double div = std::max(0.0, (double)r.len - a[2].to_double());
      Tensor var = call1(Op::div, {m2, div});
      if (op == Op::std) var = call1(Op::sqrt, {var});
      Tensor o0 = empty_from_meta(m[0]);
      copy_strided(o0, var.as_strided(o0.sizes(), contiguous_strides(o0.sizes()), 0));
      *result = {Value(o0)};
      if (op == Op::var_mean) {
        Tensor o1 = empty_from_meta(m[1]);
        copy_strided(o1, mean.as_strided(o1.sizes(), contiguous_strides(o1.sizes()), 0));
        result->push_back(Value(o1));
      }
      return true;
    }
    case Op::logsumexp: case Op::norm: {
      bool lse = op == Op::logsumexp;
      DType od = m[0].dtype;
      if (!is_floating(od)) return false;
      Tensor src = lse ? contiguous_as(x, od) : x;
      if (!is_floating(src.dtype())) return false;
      RowsView r = to_rows(src, dims_of(x, a[lse ? 1 : 2]), src.dtype());
      Tensor acc = Tensor::empty({r.rows}, DType::Float64, x.device());
      double p = lse ? 0 : a[1].is_double() ? a[1].to_double() : (double)a[1].to_int();
      if (r.len == 0) {  // an empty sum: norm 0 (any p), logsumexp -inf
        fill(acc, lse ? -INFINITY : 0, 0, false);
      } else {
        row_stats(lse ? 1 : 2, r.t, r.rows, r.len, acc, Tensor(), p);
      }
      Tensor o = empty_from_meta(m[0]);
      copy_strided(o, acc.as_strided(o.sizes(), contiguous_strides(o.sizes()), 0));
      *result = {Value(o)};
      return true;
    }
    case Op::prod: {
      DType cd = a[3].is_none() ? x.dtype() : a[3].dtype();
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      Tensor src = x.dtype() == cd ? x : contiguous_as(x, cd);
      RowsView r = to_rows(src, dims_of(x, a[1]), cd);
      if (r.len == 0) {
        copy_strided(out, call1(Op::ones, {IntList{1}}, {{"dtype", Value(out.dtype())}, {"device", Value(out.device())}})
                              .as_strided(out.sizes(), Shape(out.dim(), 0), 0));
        return true;
      }
      row_reduce("prod", r.t, is_floating(cd) ? DType::Float64 : DType::Int64, out, r.rows, r.len, 1.0);
      return true;
    }
    case Op::any: case Op::all: {
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      RowsView r = to_rows(contiguous_as(x, DType::Bool), dims_of(x, a[1]), DType::Bool);
      if (r.len == 0) {  // any of nothing is false, all of nothing true
        fill_like(out, op == Op::all ? 1 : 0);
        return true;
      }
      row_reduce(op == Op::any ? "max" : "min", r.t, DType::Int32, out, r.rows, r.len, 1.0);
      return true;
    }
    case Op::argmax: case Op::argmin: case Op::max_dim: case Op::min_dim: {
      bool mx = op == Op::argmax || op == Op::max_dim;
      bool vals = op == Op::max_dim || op == Op::min_dim;
      std::vector<bool> red(x.dim(), false);
      if (x.dim() > 0) {
        if (a[1].is_none()) red.assign(x.dim(), true);
        else red[wrap_dim(a[1].to_int(), x.dim())] = true;
      }
      RowsView r = to_rows(x, red, x.dtype());
      if (r.len == 0) return false;  // the CPU raises
      Tensor v = vals ? empty_from_meta(m[0]) : Tensor();
      Tensor i = empty_from_meta(m[vals ? 1 : 0]);
      if (i.numel() == 0) {
        *result = vals ? Stack{Value(v), Value(i)} : Stack{Value(i)};
        return true;
      }
      Tensor vt = vals ? Tensor::empty({r.rows}, v.dtype(), x.device()) : Tensor();
      Tensor it = Tensor::empty({r.rows}, DType::Int64, x.device());
      row_argext(r.t, r.rows, r.len, mx, vt, it);
      if (vals) copy_strided(v, vt.as_strided(v.sizes(), contiguous_strides(v.sizes()), 0));
      copy_strided(i, it.as_strided(i.sizes(), contiguous_strides(i.sizes()), 0));
      *result = vals ? Stack{Value(v), Value(i)} : Stack{Value(i)};
      return true;
    }
    case Op::cumsum: {
      DType od = m[0].dtype;
      if (od == DType::Bool) return false;
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      int64_t d = x.dim() == 0 ? 0 : wrap_dim(a[1].to_int(), x.dim());
      std::vector<bool> last(x.dim(), false);
      if (x.dim() > 0) last[d] = true;
      RowsView r = to_rows(contiguous_as(x, od), last, od);
      Tensor tmp = Tensor::empty({r.rows * r.len}, od, x.device());
      row_cumsum(r.t, tmp, r.rows, r.len);
      restore_dim(out, tmp, d);
      return true;
    }
    default: return false;
  }
}

}  // namespace tc::cuda
