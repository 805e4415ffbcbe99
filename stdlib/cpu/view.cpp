// Meta rules of the view ops and their one kernel: a view is the input's storage seen through
// the sizes, strides and offset the meta rule computed (device independent).
#include <algorithm>
#include <cstdint>
#include <optional>

#include "tc/ops.h"

namespace tc {
namespace {

TensorMeta view_meta(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return TensorMeta{std::move(sizes), std::move(strides), offset, t.dtype(), t.device(), 0};
}

// Resolves one -1 in a requested shape against numel.
Shape infer_size(const char* op, const IntList& req, int64_t numel) {
  Shape out(req.begin(), req.end());
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); i++) {
    if (out[i] == -1) {
      TC_CHECK(infer < 0, ShapeError, "%s(): only one dimension can be inferred (-1)", op);
      infer = (int64_t)i;
    } else {
      TC_CHECK(out[i] >= 0, ShapeError, "%s(): invalid shape dimension %lld", op, (long long)out[i]);
      known = checked_mul(known, out[i], op);
    }
  }
  if (infer >= 0) {
    TC_CHECK(known != 0 && numel % known == 0, ShapeError, "shape '%s' is invalid for input of size %lld",
             shape_string(out).c_str(), (long long)numel);
    out[infer] = numel / known;
  }
  TC_CHECK(shape_numel(out) == numel, ShapeError, "shape '%s' is invalid for input of size %lld",
           shape_string(out).c_str(), (long long)numel);
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without copying, if possible (PyTorch's
// computeStride: dims are grouped into chunks that are contiguous with each other).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  if (sizes.empty()) return Shape(shape.size(), 1);
  int64_t numel = shape_numel(sizes);
  if (numel == 0) return contiguous_strides(shape);
  Shape out(shape.size());
  int64_t view_d = (int64_t)shape.size() - 1;
  int64_t chunk_base_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = (int64_t)sizes.size() - 1; d >= 0; d--) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

int64_t wrap_index(const char* op, int64_t index, int64_t size, int64_t dim) {
  // 1-based; negative from the end (-1 is the last)
  if (index >= 1 && index <= size) return index - 1;
  if (index < 0 && index >= -size) return size + index;
  TC_FAIL(IndexError, "%s(): index %lld is out of bounds for dimension %lld with size %lld (indices are 1-based)",
          op, (long long)index, (long long)dim + 1, (long long)size);
}

// unbind/split/chunk of a huge view (a stride-0 expand of 2^62) would build a list of 2^62
// tensors: an error up front instead of exhausting memory. A Lua table holds at most 2^31 - 1,
// and each result costs about kResultBytes (its TensorImpl, sizes, strides and Lua value).
void check_result_count(const char* op, int64_t n) {
  constexpr int64_t kMaxResults = INT32_MAX, kResultBytes = 512;
  TC_CHECK(n <= kMaxResults, OutOfMemoryError, "%s() would return %lld tensors, more than a list can hold (%lld)", op,
           (long long)n, (long long)kMaxResults);
  const int64_t budget = Storage::cpu_budget();
  TC_CHECK(n <= budget / kResultBytes, OutOfMemoryError,
           "%s() would return %lld tensors: about %lld bytes of tensor objects, more than the %lld bytes of CPU memory "
           "left",
           op, (long long)n, (long long)(n * kResultBytes), (long long)budget);
}

Metas split_metas(const Tensor& t, int64_t d, const IntList& sizes) {
  Metas out;
  int64_t start = 0;
  for (int64_t len : sizes) {
    Shape sz = t.sizes();
    sz[d] = len;
    out.push_back(view_meta(t, sz, t.strides(), t.offset() + start * t.strides()[d]));
    start += len;
  }
  return out;
}

}  // namespace

Metas meta_view(Op op, const Stack& a) {
  const Tensor& t = a[0].tensor();
  const char* name = op_name(op);
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  int64_t r = t.dim();
  switch (op) {
    case Op::view:
    case Op::reshape: {
      Shape shape = infer_size(name, a[1].ints(), t.numel());
      if (auto s = view_strides(sz, st, shape)) return {view_meta(t, shape, *s, t.offset())};
      TC_CHECK(op == Op::reshape, ShapeError,
               "view size is not compatible with input tensor's size and stride (at least one dimension "
               "spans across two contiguous subspaces); use :reshape(...) instead");
      return {contiguous_meta(shape, t.dtype(), t.device())};
    }
    case Op::permute: {
      const IntList& dims = a[1].ints();
      TC_CHECK((int64_t)dims.size() == r, ShapeError, "permute(): number of dims (%zu) does not match the tensor's %lld dims",
               dims.size(), (long long)r);
      Shape s2(r), t2(r);
      std::vector<bool> seen(r, false);
      for (int64_t i = 0; i < r; i++) {
        int64_t d = wrap_dim(dims[i], r);
        TC_CHECK(!seen[d], ShapeError, "permute(): dim %lld appears more than once", (long long)d + 1);
        seen[d] = true;
        s2[i] = sz[d];
        t2[i] = st[d];
      }
      return {view_meta(t, s2, t2, t.offset())};
    }
    case Op::transpose:
    case Op::t: {
      if (op == Op::t) TC_CHECK(r <= 2, ShapeError, "t() expects a tensor with <= 2 dimensions, but self is %lldD", (long long)r);
      if (r < 2) return {view_meta(t, sz, st, t.offset())};
      int64_t d0 = op == Op::t ? 0 : wrap_dim(a[1].to_int(), r), d1 = op == Op::t ? 1 : wrap_dim(a[2].to_int(), r);
      Shape s2 = sz, t2 = st;
      std::swap(s2[d0], s2[d1]);
      std::swap(t2[d0], t2[d1]);
      return {view_meta(t, s2, t2, t.offset())};
    }
    case Op::narrow: {
      TC_CHECK(r > 0, ShapeError, "narrow() cannot be applied to a 0-dim tensor");
      int64_t d = wrap_dim(a[1].to_int(), r), len = a[3].to_int();
      int64_t start = a[2].to_int();
      int64_t s0 = start == sz[d] + 1 && len == 0 ? sz[d] : wrap_index(name, start, sz[d], d);
      TC_CHECK(len >= 0 && len <= sz[d] - s0, IndexError, "narrow(): start (%lld) + length (%lld) exceeds dimension size (%lld)",
               (long long)start, (long long)len, (long long)sz[d]);
      Shape s2 = sz;
      s2[d] = len;
      return {view_meta(t, s2, st, t.offset() + s0 * st[d])};
    }
    case Op::select: {
      TC_CHECK(r > 0, IndexError, "select() cannot be applied to a 0-dim tensor");
      int64_t d = wrap_dim(a[1].to_int(), r), i = wrap_index(name, a[2].to_int(), sz[d], d);
      Shape s2 = sz, t2 = st;
      s2.erase(s2.begin() + d);
      t2.erase(t2.begin() + d);
      return {view_meta(t, s2, t2, t.offset() + i * st[d])};
    }
    case Op::slice: {
      TC_CHECK(r > 0, IndexError, "slice() cannot be applied to a 0-dim tensor");
      int64_t d = wrap_dim(a[1].to_int(), r), n = sz[d], step = a[4].to_int();
      TC_CHECK(step > 0, ValueError, "slice step must be positive, got %lld", (long long)step);
      // inclusive Lua range: start..stop, 1-based, negatives from the end; clamped like Python
      auto norm = [&](const Value& v, int64_t dflt) {
        if (v.is_none()) return dflt;
        int64_t x = v.to_int();
        return x < 0 ? n + x : x - 1;
      };
      int64_t b = std::clamp<int64_t>(norm(a[2], 0), 0, n), e = std::clamp<int64_t>(norm(a[3], n - 1), -1, n - 1);
      int64_t len = e < b ? 0 : (e - b) / step + 1;
      Shape s2 = sz, t2 = st;
      s2[d] = len;
      t2[d] = st[d] * step;
      return {view_meta(t, s2, t2, t.offset() + (len ? b * st[d] : 0))};
    }
    case Op::expand: {
      const IntList& req = a[1].ints();
      TC_CHECK((int64_t)req.size() >= r, ShapeError, "expand(): the number of sizes provided (%zu) must be greater or equal to the number of dimensions in the tensor (%lld)",
               req.size(), (long long)r);
      size_t lead = req.size() - r;
      Shape s2(req.size()), t2(req.size());
      for (size_t i = 0; i < req.size(); i++) {
        if (i < lead) {
          TC_CHECK(req[i] >= 0, ShapeError, "expand(): -1 is not allowed in a leading, non-existing dimension");
          s2[i] = req[i];
          t2[i] = 0;
          continue;
        }
        int64_t have = sz[i - lead], want = req[i] == -1 ? have : req[i];
        TC_CHECK(have == want || have == 1, ShapeError,
                 "the expanded size of the tensor (%lld) must match the existing size (%lld) at non-singleton dimension %zu; target sizes: %s, tensor sizes: %s",
                 (long long)want, (long long)have, i + 1, shape_string(Shape(req.begin(), req.end())).c_str(), shape_string(sz).c_str());
        s2[i] = want;
        t2[i] = have == want ? st[i - lead] : 0;
      }
      return {view_meta(t, s2, t2, t.offset())};
    }
    case Op::squeeze: {
      std::vector<bool> drop(r, false);
      if (a[1].is_none()) {
        for (int64_t d = 0; d < r; d++) drop[d] = sz[d] == 1;
      } else {
        for (int64_t d : a[1].ints()) {
          int64_t w = wrap_dim(d, r);
          if (r > 0) drop[w] = sz[w] == 1;
        }
      }
      Shape s2, t2;
      for (int64_t d = 0; d < r; d++)
        if (!drop[d]) {
          s2.push_back(sz[d]);
          t2.push_back(st[d]);
        }
      return {view_meta(t, s2, t2, t.offset())};
    }
    case Op::unsqueeze: {
      int64_t d = wrap_dim(a[1].to_int(), r + 1);
      Shape s2 = sz, t2 = st;
      int64_t ns = d < r ? sz[d] * st[d] : 1;
      s2.insert(s2.begin() + d, 1);
      t2.insert(t2.begin() + d, ns);
      return {view_meta(t, s2, t2, t.offset())};
    }
    case Op::flatten: {
      if (r == 0) return {view_meta(t, {1}, {1}, t.offset())};
      int64_t s = wrap_dim(a[1].to_int(), r), e = wrap_dim(a[2].to_int(), r);
      TC_CHECK(s <= e, ShapeError, "flatten() has invalid args: start_dim cannot come after end_dim");
      Shape shape(sz.begin(), sz.begin() + s);
      int64_t m = 1;
      for (int64_t d = s; d <= e; d++) m *= sz[d];
      shape.push_back(m);
      shape.insert(shape.end(), sz.begin() + e + 1, sz.end());
      if (auto vs = view_strides(sz, st, shape)) return {view_meta(t, shape, *vs, t.offset())};
      return {contiguous_meta(shape, t.dtype(), t.device())};
    }
    case Op::detach: return {view_meta(t, sz, st, t.offset())};
    case Op::unbind: {
      TC_CHECK(r > 0, ShapeError, "unbind() cannot be applied to a 0-dim tensor");
      int64_t d = wrap_dim(a[1].to_int(), r);
      Shape s2 = sz, t2 = st;
      s2.erase(s2.begin() + d);
      t2.erase(t2.begin() + d);
      check_result_count(name, sz[d]);
      Metas out;
      for (int64_t i = 0; i < sz[d]; i++) out.push_back(view_meta(t, s2, t2, t.offset() + i * st[d]));
      return out;
    }
    case Op::split:
    case Op::chunk: {
      TC_CHECK(r > 0, ShapeError, "%s() cannot be applied to a 0-dim tensor", name);
      int64_t d = wrap_dim(a[2].to_int(), r), n = sz[d], k = a[1].to_int();
      TC_CHECK(k > 0, ValueError, "%s() expects a positive %s, got %lld", name, op == Op::split ? "split_size" : "chunks",
               (long long)k);
      int64_t piece = op == Op::split ? k : n / k + (n % k != 0);
      const int64_t divisor = std::max<int64_t>(piece, 1);  // piece is 0 only when n is
      check_result_count(name, n / divisor + (n % divisor != 0));
      IntList sizes;
      for (int64_t left = n; left > 0; left -= std::min(piece, left)) sizes.push_back(std::min(piece, left));
      if (n == 0) sizes.push_back(0);
      return split_metas(t, d, sizes);
    }
    case Op::split_with_sizes: {
      int64_t d = wrap_dim(a[2].to_int(), r), total = 0;
      check_result_count(name, (int64_t)a[1].ints().size());
      for (int64_t s : a[1].ints()) {
        TC_CHECK(s >= 0, ShapeError, "split_with_sizes(): split sizes must be non-negative, got %lld", (long long)s);
        total = checked_add(total, s, "split_with_sizes(): the sum of the sizes");
      }
      TC_CHECK(total == sz[d], ShapeError, "split_with_sizes(): sizes sum to %lld but dimension %lld has size %lld",
               (long long)total, (long long)d + 1, (long long)sz[d]);
      return split_metas(t, d, a[1].ints());
    }
    default:
      TC_ASSERT(false, "op is not in the view group");
  }
}

Stack cpu_view(Op op, const Stack& a, const Metas& out) {
  const Tensor& t = a[0].tensor();
  auto make = [&](const TensorMeta& m) {
    if (m.view_of < 0) {  // reshape/flatten of a non-viewable layout: copy, then view the copy
      Tensor c = t.clone();
      return c.as_strided(m.sizes, m.strides, 0);
    }
    Tensor v = t.as_strided(m.sizes, m.strides, m.offset);
    if (op == Op::detach) v.set_requires_grad(false);
    return v;
  };
  if (schema(op).returns == ReturnKind::List) {
    TensorList l;
    for (const TensorMeta& m : out) l.push_back(make(m));
    return {Value(l)};
  }
  return {Value(make(out[0]))};
}

}  // namespace tc
