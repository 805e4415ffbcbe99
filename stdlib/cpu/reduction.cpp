// Meta rules of the "reduction" group of ops.def, its kernel dispatch, and the layout helpers
// of reduction_rows.h. The kernels live in reduction_{accumulate,statistics,extremes,scan,sort}.cpp.
#include "cpu/reduction_rows.h"

namespace tc {
namespace cpu {

std::vector<bool> reduced_dims(const char* op, const Tensor& t, const Value& dims) {
  int64_t r = t.dim();
  std::vector<bool> red(r, dims.is_none() || dims.ints().empty());
  if (dims.is_none()) return red;
  for (int64_t d : dims.ints()) {
    int64_t w = wrap_dim(d, r);
    if (r == 0) continue;
    TC_CHECK(!red[w], ShapeError, "%s(): dim %lld appears multiple times in the list of dims",
             op, (long long)w + 1);
    red[w] = true;
  }
  return red;
}

Rows as_rows(const Tensor& t, const std::vector<bool>& last) {
  Shape sz, st;
  int64_t rows = 1, len = 1;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t d = 0; d < t.dim(); d++) {
      if (last[d] != (pass == 1)) continue;
      sz.push_back(t.sizes()[d]);
      st.push_back(t.strides()[d]);
      (pass ? len : rows) *= t.sizes()[d];
    }
  return {t.as_strided(sz, st, t.offset()).contiguous(), rows, len};
}

std::optional<Columns> as_columns(const Tensor& t, const std::vector<bool>& reduced) {
  if (!t.is_contiguous() || t.numel() == 0) return std::nullopt;
  int64_t outer = 1, len = 1, inner = 1;
  int state = 0;  // 0: before the reduced block, 1: in it, 2: after it
  for (int64_t d = 0; d < t.dim(); d++) {
    int64_t n = t.sizes()[d];
    if (n == 1) continue;
    if (reduced[d]) {
      if (state == 2) return std::nullopt;  // a second reduced block
      state = 1;
      len *= n;
    } else {
      if (state == 1) state = 2;
      (state == 0 ? outer : inner) *= n;
    }
  }
  if (inner < kMinInner) return std::nullopt;
  return Columns{t, outer, len, inner};
}

Rows dim_last_rows(const Tensor& t, int64_t d) {
  std::vector<bool> last(t.dim(), false);
  if (t.dim() > 0) last[d] = true;
  return as_rows(t, last);
}

Tensor restore_dim(const Tensor& tmp, int64_t d) {
  int64_t r = tmp.dim();
  if (r == 0 || d == r - 1) return tmp;
  Shape sizes = tmp.sizes();  // original order: move the last dim back to d
  sizes.insert(sizes.begin() + d, sizes.back());
  sizes.pop_back();
  Tensor out = Tensor::empty(sizes, tmp.dtype(), tmp.device());
  Shape st = out.strides();  // out's strides seen in tmp's order
  int64_t sd = st[d];
  st.erase(st.begin() + d);
  st.push_back(sd);
  out.as_strided(tmp.sizes(), st, 0).copy_from(tmp);
  return out;
}

}  // namespace cpu

namespace {

TensorMeta reduce_meta(const Tensor& t, const std::vector<bool>& red, bool keepdim, DType dt) {
  Shape sz;
  for (int64_t d = 0; d < t.dim(); d++) {
    if (!red[d])
      sz.push_back(t.sizes()[d]);
    else if (keepdim)
      sz.push_back(1);
  }
  return contiguous_meta(sz, dt, t.device());
}

void check_nonempty(const char* op, const Tensor& t, const std::vector<bool>& red) {
  for (int64_t d = 0; d < t.dim(); d++)
    TC_CHECK(!red[d] || t.sizes()[d] > 0, IndexError,
             "%s(): expected reduction dim %lld to have non-zero size (input shape %s)", op, (long long)d + 1,
             shape_string(t.sizes()).c_str());
}

void check_floating(const char* op, DType dt, const char* what) {
  TC_CHECK(is_floating(dt), DTypeError, "%s(): %s must be a floating point dtype, got %s", op, what, dtype_name(dt));
}

std::vector<bool> one_dim(const Tensor& t, int64_t d) {
  std::vector<bool> red(t.dim(), false);
  if (t.dim() > 0) red[d] = true;
  return red;
}

}  // namespace

Metas meta_reduction(Op op, const Stack& a) {
  using cpu::reduced_dims;
  const Tensor& t = a[0].tensor();
  const char* name = op_name(op);
  DType dt = t.dtype();
  Device dev = t.device();
  switch (op) {
    case Op::sum:
    case Op::prod: {
      DType out = !a[3].is_none() ? a[3].dtype() : is_integral(dt, true) ? DType::Int64 : dt;
      return {reduce_meta(t, reduced_dims(name, t, a[1]), a[2].to_bool(), out)};
    }
    case Op::mean: {
      auto red = reduced_dims(name, t, a[1]);
      if (a[3].is_none())
        TC_CHECK(is_floating(dt), DTypeError,
                 "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
                 "dtype. Got: %s", dtype_name(dt));
      else
        TC_CHECK(is_floating(a[3].dtype()), DTypeError,
                 "mean(): could not infer output dtype. Optional dtype must be either a floating point or complex "
                 "dtype. Got: %s", dtype_name(a[3].dtype()));
      return {reduce_meta(t, red, a[2].to_bool(), a[3].is_none() ? dt : a[3].dtype())};
    }
    case Op::amax:
    case Op::amin: {
      auto red = reduced_dims(name, t, a[1]);
      check_nonempty(name, t, red);
      return {reduce_meta(t, red, a[2].to_bool(), dt)};
    }
    case Op::max_dim:
    case Op::min_dim: {
      auto red = one_dim(t, wrap_dim(a[1].to_int(), t.dim()));
      check_nonempty(op == Op::max_dim ? "max" : "min", t, red);
      TensorMeta m = reduce_meta(t, red, a[2].to_bool(), dt);
      TensorMeta i = m;
      i.dtype = DType::Int64;
      return {m, i};
    }
    case Op::argmax:
    case Op::argmin: {
      auto red = a[1].is_none() ? std::vector<bool>(t.dim(), true) : one_dim(t, wrap_dim(a[1].to_int(), t.dim()));
      check_nonempty(name, t, red);
      return {reduce_meta(t, red, a[2].to_bool(), DType::Int64)};
    }
    case Op::var:
    case Op::std:
    case Op::var_mean: {
      auto red = reduced_dims(name, t, a[1]);
      TC_CHECK(is_floating(dt), DTypeError, "%s(): std and var only support floating point dtypes, got %s", name,
               dtype_name(dt));
      TensorMeta m = reduce_meta(t, red, a[3].to_bool(), dt);
      if (op == Op::var_mean) return {m, m};
      return {m};
    }
    case Op::norm: {
      auto red = reduced_dims(name, t, a[2]);
      check_floating(name, dt, "input dtype");
      return {reduce_meta(t, red, a[3].to_bool(), dt)};
    }
    case Op::logsumexp: {
      auto red = reduced_dims(name, t, a[1]);
      return {reduce_meta(t, red, a[2].to_bool(), is_floating(dt) ? dt : default_dtype())};
    }
    case Op::any:
    case Op::all: {
      auto red = reduced_dims(name, t, a[1]);
      return {reduce_meta(t, red, a[2].to_bool(), dt == DType::UInt8 ? DType::UInt8 : DType::Bool)};
    }
    case Op::cumsum: {
      wrap_dim(a[1].to_int(), t.dim());
      DType out = !a[2].is_none() ? a[2].dtype() : is_integral(dt, true) ? DType::Int64 : dt;
      return {contiguous_meta(t.sizes(), out, dev)};
    }
    case Op::softmax:
    case Op::log_softmax: {
      wrap_dim(a[1].to_int(), t.dim());
      DType out = a[2].is_none() ? dt : a[2].dtype();
      check_floating(name, out, a[2].is_none() ? "input dtype (or the dtype option)" : "dtype option");
      return {contiguous_meta(t.sizes(), out, dev)};
    }
    case Op::sort: {
      wrap_dim(a[1].to_int(), t.dim());
      return {contiguous_meta(t.sizes(), dt, dev), contiguous_meta(t.sizes(), DType::Int64, dev)};
    }
    case Op::topk: {
      int64_t k = a[1].to_int(), d = wrap_dim(a[2].to_int(), t.dim());
      int64_t n = t.dim() == 0 ? 1 : t.sizes()[d];
      TC_CHECK(k >= 0 && k <= n, IndexError, "topk(): k (%lld) out of range for dimension %lld of size %lld",
               (long long)k, (long long)d + 1, (long long)n);
      Shape sz = t.sizes();
      if (t.dim() > 0) sz[d] = k;
      return {contiguous_meta(sz, dt, dev), contiguous_meta(sz, DType::Int64, dev)};
    }
    default:
      TC_ASSERT(false, "op is not in the reduction group");
  }
}

Stack cpu_reduction(Op op, const Stack& a, const Metas& out) {
  switch (op) {
    case Op::sum:
    case Op::mean:
    case Op::prod:
    case Op::any:
    case Op::all:
    case Op::norm: return cpu::cpu_accumulate(op, a, out);
    case Op::var:
    case Op::std:
    case Op::var_mean:
    case Op::logsumexp: return cpu::cpu_statistics(op, a, out);
    case Op::amax:
    case Op::amin:
    case Op::max_dim:
    case Op::min_dim:
    case Op::argmax:
    case Op::argmin: return cpu::cpu_extremes(op, a, out);
    case Op::cumsum:
    case Op::softmax:
    case Op::log_softmax: return cpu::cpu_scan(op, a, out);
    case Op::sort:
    case Op::topk: return cpu::cpu_sort(op, a, out);
    default:
      TC_ASSERT(false, "op is not in the reduction group");
  }
}

}  // namespace tc
