// Meta rules of the "movement" group of ops.def (copies and data rearrangement) and the CPU
// dispatch to its kernels (movement_copy.cpp, movement_index.cpp).
#include "cpu/movement.h"

#include <string>

namespace tc {
namespace {

TensorMeta alias_meta(const Tensor& t) {
  return TensorMeta{t.sizes(), t.strides(), t.offset(), t.dtype(), t.device(), 0};
}
TensorMeta new_meta(const Tensor& like, const Shape& sizes, DType dtype) {
  return contiguous_meta(sizes, dtype, like.device());
}

// PyTorch's gather/scatter treat a 0-dim tensor as 1-D of size 1.
int64_t nonempty_dim(const Tensor& t) {
  return std::max<int64_t>(t.dim(), 1);
}
int64_t nonempty_size(const Tensor& t, int64_t d) {
  return t.dim() == 0 ? 1 : t.sizes()[d];
}

// True if a dim of size > 1 has stride 0: writing to `t` would write some elements twice.
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); d++)
    if (t.sizes()[d] > 1 && t.strides()[d] == 0) return true;
  return false;
}

Metas cat_meta(const TensorList& ts, int64_t dim) {
  TC_CHECK(!ts.empty(), ValueError, "cat(): expected a non-empty list of tensors");
  const Tensor* first = nullptr;
  for (size_t i = 0; i < ts.size(); i++) {
    TC_CHECK(ts[i].dim() > 0, ShapeError,
             "cat(): zero-dimensional tensor (at position %zu) cannot be concatenated", i + 1);
    if (!first && !cpu::cat_skips(ts[i])) first = &ts[i];
  }
  DType dtype = result_type(ts);
  if (!first) return {new_meta(ts[0], {0}, dtype)};
  int64_t d = wrap_dim(dim, first->dim());
  Shape out = first->sizes();
  out[d] = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const Tensor& t = ts[i];
    if (cpu::cat_skips(t)) continue;
    TC_CHECK(t.dim() == first->dim(), ShapeError,
             "cat(): tensors must have the same number of dimensions: got %lld and %lld",
             (long long)first->dim(), (long long)t.dim());
    for (int64_t k = 0; k < t.dim(); k++)
      TC_CHECK(k == d || t.sizes()[k] == out[k], ShapeError,
               "cat(): sizes of tensors must match except in dimension %lld: expected size %lld "
               "but got size %lld "
               "for tensor %zu in the list (shapes %s and %s)",
               (long long)d + 1, (long long)out[k], (long long)t.sizes()[k], i + 1,
               shape_string(first->sizes()).c_str(), shape_string(t.sizes()).c_str());
    out[d] = checked_add(out[d], t.sizes()[d], "cat(): the size of the result");
  }
  return {new_meta(*first, out, dtype)};
}

Metas stack_meta(const TensorList& ts, int64_t dim) {
  TC_CHECK(!ts.empty(), ValueError, "stack(): expected a non-empty list of tensors");
  for (size_t i = 1; i < ts.size(); i++)
    TC_CHECK(
        ts[i].sizes() == ts[0].sizes(), ShapeError,
        "stack(): expects each tensor to be equal size, but got %s at entry 1 and %s at entry %zu",
        shape_string(ts[0].sizes()).c_str(), shape_string(ts[i].sizes()).c_str(), i + 1);
  int64_t d = wrap_dim(dim, ts[0].dim() + 1);
  Shape out = ts[0].sizes();
  out.insert(out.begin() + d, (int64_t)ts.size());
  return {new_meta(ts[0], out, result_type(ts))};
}

Metas flip_meta(const Tensor& t, const IntList& dims) {
  std::vector<bool> seen(std::max<int64_t>(t.dim(), 1), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, t.dim());
    TC_CHECK(!seen[w], ShapeError, "flip(): dim %lld appears multiple times in the list of dims",
             (long long)w + 1);
    seen[w] = true;
  }
  return {new_meta(t, t.sizes(), t.dtype())};
}

Metas roll_meta(const Tensor& t, const IntList& shifts, const Value& dims_v) {
  TC_CHECK(!shifts.empty(), ValueError, "roll(): shifts required");
  size_t ndims = dims_v.is_none() ? 0 : dims_v.ints().size();
  TC_CHECK(shifts.size() == ndims || (ndims == 0 && shifts.size() == 1), ValueError,
           "roll(): shifts and dims must align: got %zu shifts and %zu dims", shifts.size(), ndims);
  if (ndims)
    for (int64_t d : dims_v.ints()) wrap_dim(d, t.dim());
  return {new_meta(t, t.sizes(), t.dtype())};
}

Metas repeat_meta(const Tensor& t, const IntList& reps) {
  TC_CHECK((int64_t)reps.size() >= t.dim(), ShapeError,
           "repeat(): number of repeat dims (%zu) can not be smaller than the number of dimensions "
           "of the tensor (%lld)",
           reps.size(), (long long)t.dim());
  size_t lead = reps.size() - t.dim();
  Shape out(reps.size());
  for (size_t i = 0; i < reps.size(); i++) {
    TC_CHECK(reps[i] >= 0, ShapeError, "repeat(): repeats must be non-negative, got %lld",
             (long long)reps[i]);
    out[i] = checked_mul(reps[i], i < lead ? 1 : t.sizes()[i - lead], "repeat(): the size of the result");
  }
  return {new_meta(t, out, t.dtype())};
}

Metas pad_meta(const Tensor& t, const IntList& pad, const std::string& mode, double value) {
  int64_t r = t.dim(), k = (int64_t)pad.size() / 2;
  TC_CHECK(pad.size() % 2 == 0, ValueError, "pad(): padding length must be divisible by 2, got %zu",
           pad.size());
  TC_CHECK(k <= r, ValueError,
           "pad(): padding length too large: %zu values pad %lld dims but the input has %lld",
           pad.size(), (long long)k, (long long)r);
  bool constant = mode == "constant";
  if (!constant) {
    TC_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular", ValueError,
             "pad(): unknown padding mode \"%s\" (expected \"constant\", \"reflect\", "
             "\"replicate\" or \"circular\")",
             mode.c_str());
    TC_CHECK(value == 0, ValueError, "pad(): %s padding takes no value (got %g)", mode.c_str(),
             value);
    TC_CHECK(k >= 1 && k <= 3, ValueError,
             "pad(): %s padding pads the last 1, 2 or 3 dims (2, 4 or 6 values), got %zu values",
             mode.c_str(), pad.size());
    bool rank_ok = r == k + 2 || (r == k + 1 && mode != "circular");
    TC_CHECK(rank_ok, ShapeError,
             "pad(): %s padding of the last %lld dims expects a %s input, got %lld-D", mode.c_str(),
             (long long)k,
             (mode == "circular" ? std::to_string(k + 2) + "-D"
                                 : std::to_string(k + 1) + "-D or " + std::to_string(k + 2) + "-D")
                 .c_str(),
             (long long)r);
  }
  Shape out = t.sizes();
  for (int64_t j = 0; j < k; j++) {
    int64_t d = r - 1 - j, lo = pad[2 * j], hi = pad[2 * j + 1], n = out[d];
    out[d] = checked_add(checked_add(n, lo, "pad(): the padded size"), hi, "pad(): the padded size");
    TC_CHECK(
        out[d] >= 0, ShapeError,
        "pad(): dimension %lld of size %lld with padding (%lld, %lld) would have a negative size",
        (long long)d + 1, (long long)n, (long long)lo, (long long)hi);
    if (constant) continue;
    TC_CHECK(
        n > 0, ShapeError,
        "pad(): %s padding needs non-empty padded dimensions, but dimension %lld of %s is empty",
        mode.c_str(), (long long)d + 1, shape_string(t.sizes()).c_str());
    if (mode == "reflect")
      TC_CHECK(
          lo < n && hi < n, ShapeError,
          "pad(): reflect padding (%lld, %lld) must be less than the size %lld of dimension %lld",
          (long long)lo, (long long)hi, (long long)n, (long long)d + 1);
    if (mode == "circular")
      TC_CHECK(lo <= n && hi <= n && n + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0) > 0,
               ShapeError,
               "pad(): circular padding (%lld, %lld) wraps around more than once for dimension "
               "%lld of size %lld",
               (long long)lo, (long long)hi, (long long)d + 1, (long long)n);
  }
  return {new_meta(t, out, t.dtype())};
}

void check_index_dtype(const char* op, const Tensor& index, bool allow_int32) {
  DType dt = index.dtype();
  TC_CHECK(dt == DType::Int64 || (allow_int32 && dt == DType::Int32), DTypeError,
           "%s(): index must be an %s tensor, got %s", op, allow_int32 ? "int64 or int32" : "int64",
           dtype_name(dt));
}

Metas index_select_meta(const Tensor& self, int64_t dim, const Tensor& index) {
  check_index_dtype("index_select", index, true);
  TC_CHECK(index.dim() <= 1, ShapeError,
           "index_select(): index must be a vector or a scalar, got shape %s",
           shape_string(index.sizes()).c_str());
  int64_t d = wrap_dim(dim, self.dim());
  Shape out = self.sizes();
  if (self.dim() > 0) out[d] = index.numel();
  return {new_meta(self, out, self.dtype())};
}

Metas gather_meta(const Tensor& self, int64_t dim, const Tensor& index) {
  int64_t d = wrap_dim(dim, self.dim());
  if (index.numel() > 0) {
    check_index_dtype("gather", index, false);
    TC_CHECK(
        nonempty_dim(index) == nonempty_dim(self), ShapeError,
        "gather(): index must have the same number of dimensions as self, got shapes %s and %s",
        shape_string(index.sizes()).c_str(), shape_string(self.sizes()).c_str());
    for (int64_t k = 0; k < nonempty_dim(self); k++)
      TC_CHECK(k == d || nonempty_size(index, k) <= nonempty_size(self, k), ShapeError,
               "gather(): index %s must not be larger than self %s apart from dimension %lld",
               shape_string(index.sizes()).c_str(), shape_string(self.sizes()).c_str(),
               (long long)d + 1);
  }
  return {new_meta(self, index.sizes(), self.dtype())};
}

Metas scatter_meta(Op op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* name = op_name(op);
  int64_t d = wrap_dim(dim, self.dim());
  bool value = op == Op::scatter && src.is_wrapped_number();
  if (!value)
    TC_CHECK(src.dtype() == self.dtype(), DTypeError,
             "%s(): expected self.dtype to be equal to src.dtype, got %s and %s", name,
             dtype_name(self.dtype()), dtype_name(src.dtype()));
  if (index.numel() > 0) {
    check_index_dtype(name, index, false);
    TC_CHECK(nonempty_dim(index) == nonempty_dim(self), ShapeError,
             "%s(): index must have the same number of dimensions as self, got shapes %s and %s",
             name, shape_string(index.sizes()).c_str(), shape_string(self.sizes()).c_str());
    TC_CHECK(value || nonempty_dim(index) == nonempty_dim(src), ShapeError,
             "%s(): index must have the same number of dimensions as src, got shapes %s and %s",
             name, shape_string(index.sizes()).c_str(), shape_string(src.sizes()).c_str());
    for (int64_t k = 0; k < nonempty_dim(self); k++) {
      bool ok = (k == d || nonempty_size(index, k) <= nonempty_size(self, k)) &&
                (value || nonempty_size(index, k) <= nonempty_size(src, k));
      TC_CHECK(ok, ShapeError,
               "%s(): index %s must not be larger than self %s apart from dimension %lld, nor "
               "larger than src %s",
               name, shape_string(index.sizes()).c_str(), shape_string(self.sizes()).c_str(),
               (long long)d + 1, shape_string(src.sizes()).c_str());
    }
  }
  return {new_meta(self, self.sizes(), self.dtype())};
}

}  // namespace

Metas meta_movement(Op op, const Stack& a) {
  switch (op) {
    case Op::contiguous: {
      const Tensor& t = a[0].tensor();
      return {t.is_contiguous() ? alias_meta(t) : new_meta(t, t.sizes(), t.dtype())};
    }
    case Op::clone:
      return {new_meta(a[0].tensor(), a[0].tensor().sizes(), a[0].tensor().dtype())};
    case Op::copy_: {
      const Tensor &self = a[0].tensor(), &src = a[1].tensor();
      TC_CHECK(broadcast_shapes(self.sizes(), src.sizes()) == self.sizes(), ShapeError,
               "copy_(): source of shape %s cannot be broadcast to destination shape %s",
               shape_string(src.sizes()).c_str(), shape_string(self.sizes()).c_str());
      TC_CHECK(!has_internal_overlap(self), ValueError,
               "copy_(): more than one element of the written-to tensor %s (strides %s) refers to "
               "a single memory "
               "location; clone() it first",
               shape_string(self.sizes()).c_str(), shape_string(self.strides()).c_str());
      return {alias_meta(self)};
    }
    case Op::to_device: {
      const Tensor& t = a[0].tensor();
      Device dev = a[1].is_none() ? default_device() : a[1].device();
      if (dev == t.device()) return {alias_meta(t)};
      return {contiguous_meta(t.sizes(), t.dtype(), dev)};
    }
    case Op::cat:
      return cat_meta(a[0].tensors(), a[1].to_int());
    case Op::stack:
      return stack_meta(a[0].tensors(), a[1].to_int());
    case Op::flip:
      return flip_meta(a[0].tensor(), a[1].ints());
    case Op::roll:
      return roll_meta(a[0].tensor(), a[1].ints(), a[2]);
    case Op::repeat:
      return repeat_meta(a[0].tensor(), a[1].ints());
    case Op::pad:
      return pad_meta(a[0].tensor(), a[1].ints(), a[2].str(), a[3].to_double());
    case Op::tril:
    case Op::triu: {
      const Tensor& t = a[0].tensor();
      TC_CHECK(t.dim() >= 2, ShapeError,
               "%s(): input tensor must have at least 2 dimensions, got shape %s", op_name(op),
               shape_string(t.sizes()).c_str());
      return {new_meta(t, t.sizes(), t.dtype())};
    }
    case Op::index_select:
      return index_select_meta(a[0].tensor(), a[1].to_int(), a[2].tensor());
    case Op::gather:
      return gather_meta(a[0].tensor(), a[1].to_int(), a[2].tensor());
    case Op::scatter:
    case Op::scatter_add:
      return scatter_meta(op, a[0].tensor(), a[1].to_int(), a[2].tensor(), a[3].tensor());
    case Op::masked_select: {
      const Tensor &self = a[0].tensor(), &mask = a[1].tensor();
      TC_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, DTypeError,
               "masked_select(): mask must be a bool (or uint8) tensor, got %s",
               dtype_name(mask.dtype()));
      broadcast_shapes(self.sizes(), mask.sizes());
      return {TensorMeta{
          {-1}, {1}, 0, self.dtype(), self.device(), -1}};  // size known after the kernel
    }
    case Op::nonzero: {
      const Tensor& t = a[0].tensor();
      return {TensorMeta{
          {-1, t.dim()}, {std::max<int64_t>(t.dim(), 1), 1}, 0, DType::Int64, t.device(), -1}};
    }
    default:
      TC_ASSERT(false, "op is not in the movement group");
  }
}

Stack cpu_movement(Op op, const Stack& a, const Metas& out) {
  const TensorMeta& m = out[0];
  switch (op) {
    case Op::contiguous:
      return {cpu::contiguous_kernel(a, m)};
    case Op::clone:
      return {cpu::clone_kernel(a, m)};
    case Op::copy_:
      return {cpu::copy_kernel(a, m)};
    case Op::to_device:
      return {cpu::to_device_kernel(a, m)};
    case Op::cat:
      return {cpu::cat_kernel(a, m)};
    case Op::stack:
      return {cpu::stack_kernel(a, m)};
    case Op::flip:
      return {cpu::flip_kernel(a, m)};
    case Op::roll:
      return {cpu::roll_kernel(a, m)};
    case Op::repeat:
      return {cpu::repeat_kernel(a, m)};
    case Op::pad:
      return {cpu::pad_kernel(a, m)};
    case Op::tril:
    case Op::triu:
      return {cpu::tri_kernel(op, a, m)};
    case Op::index_select:
      return {cpu::index_select_kernel(a, m)};
    case Op::gather:
      return {cpu::gather_kernel(a, m)};
    case Op::scatter:
    case Op::scatter_add:
      return {cpu::scatter_kernel(op, a, m)};
    case Op::masked_select:
      return {cpu::masked_select_kernel(a)};
    case Op::nonzero:
      return {cpu::nonzero_kernel(a)};
    default:
      TC_ASSERT(false, "op is not in the movement group");
  }
}

}  // namespace tc
