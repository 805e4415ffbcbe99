// CPU kernels of the movement ops driven by index values or masks: index_select, gather,
// scatter, scatter_add, masked_select, nonzero. Index values arrive 1-based; they are all
// checked before any parallel loop runs, so kernels never throw from a worker.
#include <algorithm>
#include <array>
#include <limits>

#include "cpu/loops.h"
#include "cpu/movement.h"
#include "tc/parallel.h"

namespace tc::cpu {
namespace {

constexpr int64_t kSerial = std::numeric_limits<int64_t>::max() / 4;  // a grain that never splits

// Throws IndexError naming the first index value outside 1..size.
void check_index_range(const char* op, const Tensor& index, int64_t size, int64_t dim) {
  if (index.numel() == 0) return;
  int64_t bad = 0;
  bool found = false;
  Shape shape = index.dim() ? index.sizes() : Shape{1};
  Shape st = index.dim() ? broadcast_byte_strides(index, shape) : Shape{0};
  visit_dtype(index.dtype(), [&]<typename I>() {
    if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>) {
      strided_loop<1>(
          shape, {static_cast<char*>(index.data_ptr())}, {st},
          [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
            for (int64_t i = 0; i < n && !found; i++) {
              int64_t v = *reinterpret_cast<I*>(p[0] + i * s[0]);
              if (v < 1 || v > size) {
                found = true;
                bad = v;
              }
            }
          },
          kSerial);
    } else {
      TC_ASSERT(false, "index dtype not checked by the meta rule");
    }
  });
  TC_CHECK(!found, IndexError,
           "%s(): index %lld is out of range for dimension %lld with size %lld (indices are "
           "1-based: 1..%lld)",
           op, (long long)bad, (long long)dim + 1, (long long)size, (long long)size);
}

// Visits every position of `shape` in runs along the last dim: fn(p, s, n) gets the operands'
// pointers at a run's first element, their byte strides along the run and its length (like
// strided_loop). Threads split the work by the other dims and by blocks of the last dim, never
// along `dim`: each owns whole lines along `dim`, so scatter_add's sums cannot race. When `dim`
// is the last dim, its lines are the runs.
template <size_t N, typename F>
void for_each_run(const Shape& shape, int64_t dim, std::array<char*, N> base,
                  const std::array<Shape, N>& strides, F&& fn) {
  for (int64_t s : shape)
    if (s == 0) return;
  int64_t inner = (int64_t)shape.size() - 1, run = shape[inner];
  bool along_dim = inner == dim;
  int64_t block = along_dim ? run : std::min<int64_t>(run, 1024), len = along_dim ? 1 : shape[dim];
  Shape sizes;
  std::array<Shape, N> st;
  std::array<int64_t, N> run_st, dim_st;
  for (int64_t d = 0; d < inner; d++) {
    if (d == dim) continue;
    sizes.push_back(shape[d]);
    for (size_t k = 0; k < N; k++) st[k].push_back(strides[k][d]);
  }
  sizes.push_back((run + block - 1) / block);  // blocks of the last dim
  for (size_t k = 0; k < N; k++) {
    st[k].push_back(block * strides[k][inner]);
    run_st[k] = strides[k][inner];
    dim_st[k] = strides[k][dim];
  }
  int64_t nd = (int64_t)sizes.size(), items = shape_numel(sizes);
  parallel_for(0, items, std::max<int64_t>(1, 32768 / (block * len)), [&](int64_t b, int64_t e) {
    Shape idx(nd, 0);
    std::array<char*, N> p = base;
    for (int64_t d = nd - 1, rem = b; d >= 0; d--) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
      for (size_t k = 0; k < N; k++) p[k] += idx[d] * st[k][d];
    }
    for (int64_t item = b; item < e; item++) {
      int64_t n = std::min(block, run - idx[nd - 1] * block);
      std::array<char*, N> q = p;
      for (int64_t i = 0; i < len; i++) {
        fn(q, run_st, n);
        for (size_t k = 0; k < N; k++) q[k] += dim_st[k];
      }
      for (int64_t d = nd - 1; d >= 0; d--) {  // next item
        for (size_t k = 0; k < N; k++) p[k] += st[k][d];
        if (++idx[d] < sizes[d]) break;
        for (size_t k = 0; k < N; k++) p[k] -= st[k][d] * sizes[d];
        idx[d] = 0;
      }
    }
  });
}

// Byte strides of t over `shape` (t's own sizes may be larger); a 0-dim t reads as [1].
Shape byte_strides(const Tensor& t, size_t rank) {
  if (t.dim() == 0) return Shape(rank, 0);
  Shape s = t.strides();
  for (auto& x : s) x *= (int64_t)t.itemsize();
  return s;
}

char* ptr(const Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

}  // namespace

Tensor index_select_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& self = a[0].tensor();
  int64_t d = wrap_dim(a[1].to_int(), self.dim());
  Tensor index = a[2].tensor().to(DType::Int64).contiguous();
  check_index_range("index_select", index, self.dim() ? self.sizes()[d] : 1, d);
  Tensor out = empty_from_meta(m);
  if (self.dim() == 0) {  // PyTorch: the scalar itself, whatever the number of indices
    out.copy_from(self);
    return out;
  }
  if (out.numel() == 0) return out;
  Tensor src = self.contiguous();
  int64_t n = self.sizes()[d], k = index.numel(), outer = 1, inner = 1;
  for (int64_t i = 0; i < d; i++) outer *= self.sizes()[i];
  for (int64_t i = d + 1; i < self.dim(); i++) inner *= self.sizes()[i];
  const int64_t* ix = index.data<int64_t>();
  int64_t bytes = inner * (int64_t)self.itemsize();
  const char* in = ptr(src);
  char* dst = ptr(out);
  parallel_for(0, outer * k, std::max<int64_t>(1, 65536 / bytes), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; u++) {
      int64_t o = u / k, j = u % k;
      std::memcpy(dst + u * bytes, in + (o * n + ix[j] - 1) * bytes, bytes);
    }
  });
  return out;
}

Tensor gather_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor &self = a[0].tensor(), &index = a[2].tensor();
  int64_t d = wrap_dim(a[1].to_int(), self.dim());
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  check_index_range("gather", index, self.dim() ? self.sizes()[d] : 1, d);
  Shape shape = index.dim() ? index.sizes() : Shape{1};
  Shape ss = byte_strides(self, shape.size());
  int64_t sd = ss[d];
  ss[d] = 0;  // self is read at the index values along dim
  visit_itemsize(self.itemsize(), [&]<typename U>() {
    for_each_run<3>(shape, d, {ptr(out), ptr(index), ptr(self)},
                    {byte_strides(out, shape.size()), byte_strides(index, shape.size()), ss},
                    [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
                      for (int64_t j = 0; j < n; j++) {
                        int64_t v = *reinterpret_cast<int64_t*>(p[1] + j * s[1]);
                        *reinterpret_cast<U*>(p[0] + j * s[0]) =
                            *reinterpret_cast<U*>(p[2] + j * s[2] + (v - 1) * sd);
                      }
                    });
  });
  return out;
}

Tensor scatter_kernel(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor &self = a[0].tensor(), &index = a[2].tensor();
  Tensor src = a[3].tensor();
  int64_t d = wrap_dim(a[1].to_int(), self.dim());
  Tensor out = empty_from_meta(m);
  out.copy_from(self);
  if (index.numel() == 0) return out;
  check_index_range(op_name(op), index, self.dim() ? self.sizes()[d] : 1, d);
  bool value = op == Op::scatter && src.is_wrapped_number();
  if (value) src = src.to(self.dtype());
  Shape shape = index.dim() ? index.sizes() : Shape{1};
  Shape os = byte_strides(out, shape.size()),
        srcs = value ? Shape(shape.size(), 0) : byte_strides(src, shape.size());
  int64_t od = os[d];
  os[d] = 0;  // out is written at the index values along dim
  bool add = op == Op::scatter_add;
  visit_dtype(self.dtype(), [&]<typename T>() {
    for_each_run<3>(
        shape, d, {ptr(out), ptr(index), ptr(src)}, {os, byte_strides(index, shape.size()), srcs},
        [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
          for (int64_t j = 0; j < n; j++) {
            int64_t v = *reinterpret_cast<int64_t*>(p[1] + j * s[1]);
            T& dst = *reinterpret_cast<T*>(p[0] + j * s[0] + (v - 1) * od);
            T x = *reinterpret_cast<T*>(p[2] + j * s[2]);
            if (add)
              dst = static_cast<T>(static_cast<opmath_t<T>>(dst) + static_cast<opmath_t<T>>(x));
            else
              dst = x;
          }
        });
  });
  return out;
}

Tensor masked_select_kernel(const Stack& a) {
  const Tensor &self = a[0].tensor(), &mask = a[1].tensor();
  Shape shape = broadcast_shapes(self.sizes(), mask.sizes());
  Shape ss = broadcast_byte_strides(self, shape), ms = broadcast_byte_strides(mask, shape);
  int64_t count = 0;
  strided_loop<1>(
      shape, {ptr(mask)}, {ms},
      [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
        for (int64_t i = 0; i < n; i++) count += *reinterpret_cast<uint8_t*>(p[0] + i * s[0]) != 0;
      },
      kSerial);
  Tensor out = Tensor::empty({count}, self.dtype(), self.device());
  if (count == 0) return out;
  visit_itemsize(self.itemsize(), [&]<typename U>() {
    U* dst = out.data<U>();
    strided_loop<2>(
        shape, {ptr(self), ptr(mask)}, {ss, ms},
        [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
          for (int64_t i = 0; i < n; i++)
            if (*reinterpret_cast<uint8_t*>(p[1] + i * s[1]))
              *dst++ = *reinterpret_cast<U*>(p[0] + i * s[0]);
        },
        kSerial);  // serial: results come out in row-major order
  });
  return out;
}

Tensor nonzero_kernel(const Stack& a) {
  Tensor self = a[0].tensor().contiguous();
  int64_t total = self.numel(), r = self.dim();
  // Chunks of the row-major order: count each in parallel, then fill each at its prefix offset.
  int64_t chunks = std::clamp<int64_t>(total / 65536, 1, get_num_threads()),
          per = (total + chunks - 1) / chunks;
  std::vector<int64_t> counts(chunks + 1, 0);
  Tensor out;
  visit_dtype(self.dtype(), [&]<typename T>() {
    const T* x = self.data<T>();
    auto nz = [&](int64_t i) {
      return static_cast<opmath_t<T>>(x[i]) != static_cast<opmath_t<T>>(0);
    };
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; c++)
        for (int64_t i = c * per; i < std::min(total, (c + 1) * per); i++) counts[c + 1] += nz(i);
    });
    for (int64_t c = 0; c < chunks; c++) counts[c + 1] += counts[c];
    out = Tensor::empty({counts[chunks], r}, DType::Int64, self.device());
    if (counts[chunks] == 0 || r == 0) return;
    int64_t* dst = out.data<int64_t>();
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; c++) {
        int64_t begin = c * per, end = std::min(total, (c + 1) * per), row = counts[c];
        Shape idx(r, 0);
        for (int64_t d = r - 1, rem = begin; d >= 0; d--) {
          idx[d] = rem % self.sizes()[d];
          rem /= self.sizes()[d];
        }
        for (int64_t i = begin; i < end; i++) {
          if (nz(i)) {
            for (int64_t d = 0; d < r; d++) dst[row * r + d] = idx[d] + 1;
            row++;
          }
          for (int64_t d = r - 1; d >= 0 && ++idx[d] == self.sizes()[d]; d--) idx[d] = 0;
        }
      }
    });
  });
  return out;
}

}  // namespace tc::cpu
