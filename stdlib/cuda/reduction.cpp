// CUDA kernels of the reduction group: sum/mean (floating, double accumulation like the CPU),
// amax/amin (NaN propagating) over any dims through one generic row reduction (kept dims first,
// reduced dims last, made contiguous; long rows split into chunks and reduced in two passes),
// and softmax/log_softmax along a dim (one block per row). The other reductions take the host
// fallback for now.
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
    std::string init = kind == "sum" ? "(A)0" : kind == "max" ? lowest_lit(acc_dt) : highest_lit(acc_dt);
    std::string comb = kind == "sum" ? "(x + y)" : is_floating(acc_dt) ? (kind == "max" ? "nan_max(x, y)" : "nan_min(x, y)")
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

bool reduction(Op op, const Stack& a, const Metas& m, Stack* result) {
  const Tensor& x = a[0].tensor();
  switch (op) {
    case Op::sum: case Op::mean: {
      DType cd = a[3].is_none() ? x.dtype() : a[3].dtype();
      if (!is_floating(cd) || !is_floating(m[0].dtype)) return false;
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      // CPU: the input converted to cd, accumulated in double
      Tensor src = x.dtype() == cd ? x : contiguous_as(x, cd);
      RowsView r = to_rows(src, dims_of(x, a[1]), cd);
      double scale = op == Op::mean ? 1.0 / (double)r.len : 1.0;
      row_reduce("sum", r.t, DType::Float64, out, r.rows, r.len, scale);
      return true;
    }
    case Op::amax: case Op::amin: {
      DType dt = x.dtype();
      if (dt == DType::Bool || m[0].dtype != dt) return false;
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
      if (!is_floating(od) || !is_floating(x.dtype())) return false;
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
    default: return false;
  }
}

}  // namespace tc::cuda
