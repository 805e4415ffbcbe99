// Meta rules and CPU kernels of the "linalg" group: the matrix products (matmul, mm, bmm,
// linear, addmm, baddbmm) here; einsum, convolutions and pools in their own files.
#include "cpu/linalg.h"

namespace tc {
namespace {

using cpu::cpp_type_name;

// Matrix products do not promote: both operands must have one dtype, and not bool.
void check_mm_dtypes(const Tensor& a, const Tensor& b) {
  TC_CHECK(a.dtype() == b.dtype(), DTypeError, "expected m1 and m2 to have the same dtype, but got: %s != %s",
           cpp_type_name(a.dtype()), cpp_type_name(b.dtype()));
  TC_CHECK(a.dtype() != DType::Bool, DTypeError, "\"addmm_impl_cpu_\" not implemented for 'Bool'");
}

[[noreturn]] void cannot_multiply(int64_t r1, int64_t c1, int64_t r2, int64_t c2) {
  TC_FAIL(ShapeError, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)", (long long)r1,
          (long long)c1, (long long)r2, (long long)c2);
}

void check_matrix(const char* name, const Tensor& t, int64_t rank) {
  TC_CHECK(t.dim() == rank, ShapeError, "%s must be a %s, got %lld-D tensor", name, rank == 2 ? "matrix" : "3D tensor",
           (long long)t.dim());
}

// `self` of addmm/baddbmm must expand to `shape`, and share the products' dtype unless it is a
// Lua number.
void check_self(const Tensor& self, const Shape& shape, DType dt) {
  int64_t lead = (int64_t)shape.size() - self.dim();
  TC_CHECK(lead >= 0, ShapeError, "the number of sizes provided (%zu) must be greater or equal to the number of dimensions in the tensor (%lld)",
           shape.size(), (long long)self.dim());
  for (int64_t d = 0; d < self.dim(); d++)
    TC_CHECK(self.size(d) == shape[lead + d] || self.size(d) == 1, ShapeError,
             "the expanded size of the tensor (%lld) must match the existing size (%lld) at non-singleton dimension %lld; target sizes: %s, tensor sizes: %s",
             (long long)shape[lead + d], (long long)self.size(d), (long long)(lead + d + 1), shape_string(shape).c_str(),
             shape_string(self.sizes()).c_str());
  TC_CHECK(self.is_wrapped_number() || self.dtype() == dt, DTypeError, "self and mat2 must have the same dtype, but got %s and %s",
           dtype_name(self.dtype()), dtype_name(dt));
}

void check_scalars(const Stack& a, size_t beta_at, DType dt) {
  if (is_floating(dt)) return;
  TC_CHECK(!a[beta_at].is_double(), ValueError, "for integral input tensors, argument beta must not be a floating point number");
  TC_CHECK(!a[beta_at + 1].is_double(), ValueError, "for integral input tensors, argument alpha must not be a floating point number");
}

// sizes of matmul(a, b) under PyTorch's rules (1-D operands, broadcast batch dims).
Shape matmul_shape(const Tensor& a, const Tensor& b) {
  int64_t da = a.dim(), db = b.dim();
  TC_CHECK(da >= 1 && db >= 1, ShapeError, "both arguments to matmul need to be at least 1D, but they are %lldD and %lldD",
           (long long)da, (long long)db);
  int64_t m = a.size(da - 1), kb = b.size(db == 1 ? 0 : db - 2);
  if (da == 1 && db == 1) {
    TC_CHECK(m == kb, ShapeError, "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same number of elements, but got %lld and %lld elements respectively",
             (long long)m, (long long)kb, (long long)m, (long long)kb);
    return {};
  }
  if (da == 2 && db == 1) {
    TC_CHECK(m == kb, ShapeError, "size mismatch, got %lld, %lldx%lld,%lld", (long long)a.size(0), (long long)a.size(0),
             (long long)m, (long long)kb);
    return {a.size(0)};
  }
  if (db <= 2) {  // a's batch (if any) folds into its rows
    if (m != kb) cannot_multiply(da == 1 ? 1 : a.numel() / std::max<int64_t>(m, 1), m, kb, db == 1 ? 1 : b.size(1));
    Shape out(a.sizes().begin(), a.sizes().end() - 1);
    if (db == 2) out.push_back(b.size(1));
    return out;
  }
  Shape ba(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(da, 2));
  Shape bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ba, bb);
  int64_t nb = shape_numel(batch);
  TC_CHECK(m == kb, ShapeError, "Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but got: [%lld, %lld].",
           (long long)nb, (long long)m, (long long)nb, (long long)kb);
  Shape out = batch;
  if (da >= 2) out.push_back(a.size(da - 2));
  out.push_back(b.size(db - 1));
  return out;
}

// A view of t (rank 1 or more) with a unit dim inserted at `at` (0 or rank).
Tensor unsqueeze(const Tensor& t, int64_t at) {
  Shape s = t.sizes(), st = t.strides();
  int64_t stride = at < t.dim() ? s[at] * st[at] : 1;
  s.insert(s.begin() + at, 1);
  st.insert(st.begin() + at, std::max<int64_t>(stride, 1));
  return t.as_strided(s, st, t.offset());
}

// The transposed view [in, out] of a linear weight [out, in] (or [in, 1] of a 1-D weight).
Tensor weight_t(const Tensor& w) {
  if (w.dim() == 1) return unsqueeze(w, 1);
  return w.as_strided({w.size(1), w.size(0)}, {w.stride(1), w.stride(0)}, w.offset());
}

Shape linear_shape(const Tensor& x, const Tensor& w) {
  TC_CHECK(x.dim() >= 1, ShapeError, "linear(): input must have at least 1 dimension, got a 0-D tensor");
  TC_CHECK(w.dim() == 1 || w.dim() == 2, ShapeError, "linear(): weight must be 1-D or 2-D, got %lld-D", (long long)w.dim());
  int64_t in = x.size(-1), win = w.size(-1);
  if (in != win)
    cannot_multiply(x.numel() / std::max<int64_t>(in, 1), in, win, w.dim() == 2 ? w.size(0) : 1);
  Shape out(x.sizes().begin(), x.sizes().end() - 1);
  if (w.dim() == 2) out.push_back(w.size(0));
  return out;
}

// Runs matmul(a, b) into out (contiguous, shape matmul_shape(a, b)) as alpha*a@b + beta*out.
void matmul_kernel(const Tensor& out, Tensor a, Tensor b, double alpha, double beta) {
  if (a.dim() == 1) a = unsqueeze(a, 0);
  if (b.dim() == 1) b = unsqueeze(b, 1);
  // out seen as [*batch, n, p], with the unit dims that matmul drops for 1-D operands
  Shape full = broadcast_shapes(Shape(a.sizes().begin(), a.sizes().end() - 2), Shape(b.sizes().begin(), b.sizes().end() - 2));
  full.push_back(a.size(-2));
  full.push_back(b.size(-1));
  cpu::matmul_into(out.as_strided(full, contiguous_strides(full), out.offset()), a, b, alpha, beta);
}

}  // namespace

Metas meta_linalg(Op op, const Stack& a) {
  switch (op) {
    case Op::matmul: {
      const Tensor &x = a[0].tensor(), &y = a[1].tensor();
      Shape s = matmul_shape(x, y);
      check_mm_dtypes(x, y);
      return {contiguous_meta(s, x.dtype(), x.device())};
    }
    case Op::mm: {
      const Tensor &x = a[0].tensor(), &y = a[1].tensor();
      check_matrix("self", x, 2);
      check_matrix("mat2", y, 2);
      if (x.size(1) != y.size(0)) cannot_multiply(x.size(0), x.size(1), y.size(0), y.size(1));
      check_mm_dtypes(x, y);
      return {contiguous_meta({x.size(0), y.size(1)}, x.dtype(), x.device())};
    }
    case Op::bmm:
    case Op::baddbmm: {
      bool add = op == Op::baddbmm;
      const Tensor &x = a[add].tensor(), &y = a[add + 1].tensor();
      check_matrix("batch1", x, 3);
      check_matrix("batch2", y, 3);
      TC_CHECK(y.size(0) == x.size(0) && y.size(1) == x.size(2), ShapeError,
               "Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but got: [%lld, %lld].",
               (long long)x.size(0), (long long)x.size(2), (long long)y.size(0), (long long)y.size(1));
      check_mm_dtypes(x, y);
      Shape s{x.size(0), x.size(1), y.size(2)};
      if (add) {
        check_self(a[0].tensor(), s, x.dtype());
        check_scalars(a, 3, x.dtype());
      }
      return {contiguous_meta(s, x.dtype(), x.device())};
    }
    case Op::addmm: {
      const Tensor &x = a[1].tensor(), &y = a[2].tensor();
      check_matrix("mat1", x, 2);
      check_matrix("mat2", y, 2);
      if (x.size(1) != y.size(0)) cannot_multiply(x.size(0), x.size(1), y.size(0), y.size(1));
      check_mm_dtypes(x, y);
      Shape s{x.size(0), y.size(1)};
      check_self(a[0].tensor(), s, x.dtype());
      check_scalars(a, 3, x.dtype());
      return {contiguous_meta(s, x.dtype(), x.device())};
    }
    case Op::linear: {
      const Tensor &x = a[0].tensor(), &w = a[1].tensor();
      Shape s = linear_shape(x, w);
      check_mm_dtypes(x, w);
      if (!a[2].is_none()) check_self(a[2].tensor(), s, x.dtype());
      return {contiguous_meta(s, x.dtype(), x.device())};
    }
    case Op::einsum: return meta_einsum(a);
    case Op::conv1d:
    case Op::conv2d:
    case Op::conv_transpose2d: return meta_conv(op, a);
    case Op::_conv2d_weight_backward: return meta_conv2d_weight_backward(a);
    case Op::_max_pool2d_backward: return meta_max_pool2d_backward(a);
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d:
    case Op::adaptive_max_pool2d: return meta_pool(op, a);
    default: TC_ASSERT(false, "op is not in the linalg group");
  }
}

Stack cpu_linalg(Op op, const Stack& a, const Metas& metas) {
  switch (op) {
    case Op::einsum: return cpu_einsum(a, metas);
    case Op::conv1d:
    case Op::conv2d:
    case Op::conv_transpose2d: return cpu_conv(op, a, metas);
    case Op::_conv2d_weight_backward: return cpu_conv2d_weight_backward(a, metas);
    case Op::_max_pool2d_backward: return cpu_max_pool2d_backward(a, metas);
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d:
    case Op::adaptive_max_pool2d: return cpu_pool(op, a, metas);
    default: break;
  }
  Tensor out = empty_from_meta(metas[0]);
  switch (op) {
    case Op::matmul:
    case Op::mm:
    case Op::bmm: matmul_kernel(out, a[0].tensor(), a[1].tensor(), 1, 0); break;
    case Op::addmm:
    case Op::baddbmm: {
      double beta = a[3].to_double(), alpha = a[4].to_double();
      if (beta != 0) out.copy_from(a[0].tensor());
      matmul_kernel(out, a[1].tensor(), a[2].tensor(), alpha, beta);
      break;
    }
    case Op::linear: {
      bool bias = !a[2].is_none();
      if (bias) out.copy_from(a[2].tensor());
      matmul_kernel(out, a[0].tensor(), weight_t(a[1].tensor()), 1, bias ? 1 : 0);
      break;
    }
    default: TC_ASSERT(false, "op is not in the linalg group");
  }
  return {Value(out)};
}

}  // namespace tc
