// CPU kernels of the movement ops that copy blocks: contiguous, clone, copy_, to_device, cat,
// stack, flip, roll, repeat, tril/triu and pad. Most are one or a few Tensor::copy_from calls
// between views of the input and of the output; copy_from coalesces dims, memcpys contiguous
// runs, converts dtypes and splits large copies across threads.
#include <algorithm>
#include <string>

#include "cpu/movement.h"
#include "tc/parallel.h"

namespace tc::cpu {
namespace {

// Bytes [lo, hi) of the storage that a view can touch (empty for an empty view).
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); d++) {
    int64_t ext = (t.sizes()[d] - 1) * t.strides()[d];
    (ext < 0 ? lo : hi) += ext;
  }
  int64_t isz = (int64_t)t.itemsize();
  return {lo * isz, (hi + 1) * isz};
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.storage() || a.storage() != b.storage()) return false;
  auto [alo, ahi] = byte_span(a);
  auto [blo, bhi] = byte_span(b);
  return alo < bhi && blo < ahi;
}

// out <- value converted to out's dtype (out contiguous).
void fill(const Tensor& out, const Value& value) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    T v = value.is_double() ? static_cast<T>(static_cast<opmath_t<T>>(value.to_double()))
                            : static_cast<T>(static_cast<opmath_t<T>>(value.to_int()));
    T* p = out.data<T>();
    parallel_for(0, out.numel(), 1 << 16,
                 [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

// The input element each output position of a padded dim reads (non-constant modes).
int64_t pad_source(const std::string& mode, int64_t o, int64_t n, int64_t lo, int64_t hi) {
  int64_t i = o - lo;
  if (mode == "reflect") return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
  if (mode == "replicate") return std::clamp<int64_t>(i, 0, n - 1);
  // circular wraps within what negative padding leaves of the dim (PyTorch crops first)
  int64_t first = std::max<int64_t>(0, -lo), len = n - first - std::max<int64_t>(0, -hi);
  int64_t j = o - std::max<int64_t>(0, lo);
  return first + ((j % len) + len) % len;
}

// out <- src in square tiles when src is transposed (its last stride is not 1 but another
// dim's is) and out is contiguous of the same dtype: copying row by row would read one element
// per cache line. Returns false when that is not the case.
bool copy_transposed(const Tensor& out, const Tensor& src) {
  int64_t r = src.dim(), last = r - 1, k = -1;
  if (r < 2 || src.dtype() != out.dtype() || !out.is_contiguous() || src.numel() < 4096 ||
      src.strides()[last] == 1)
    return false;
  for (int64_t d = 0; d < last; d++)
    if (src.strides()[d] == 1 && src.sizes()[d] > 1) k = d;
  if (k < 0) return false;
  constexpr int64_t kTile = 32;
  Shape sizes, ss, os;  // the dims other than k and the last
  for (int64_t d = 0; d < last; d++) {
    if (d == k) continue;
    sizes.push_back(src.sizes()[d]);
    ss.push_back(src.strides()[d]);
    os.push_back(out.strides()[d]);
  }
  int64_t nk = src.sizes()[k], nj = src.sizes()[last], sj = src.strides()[last],
          ok = out.strides()[k];
  int64_t tiles = (nk + kTile - 1) / kTile, items = shape_numel(sizes) * tiles;
  visit_itemsize(src.itemsize(), [&]<typename U>() {
    const U* in = src.data<U>();
    U* dst = out.data<U>();
    parallel_for(0, items, std::max<int64_t>(1, 16384 / (kTile * nj)), [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; item++) {
        int64_t rem = item / tiles, i0 = item % tiles * kTile, i1 = std::min(nk, i0 + kTile),
                soff = 0, doff = 0;
        for (int64_t d = (int64_t)sizes.size() - 1; d >= 0; d--) {
          soff += rem % sizes[d] * ss[d];
          doff += rem % sizes[d] * os[d];
          rem /= sizes[d];
        }
        for (int64_t j0 = 0; j0 < nj; j0 += kTile)
          for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < std::min(nj, j0 + kTile); j++)
              dst[doff + i * ok + j] = in[soff + i + j * sj];
      }
    });
  });
  return true;
}

Tensor pad_indexed(const Tensor& self, const IntList& pad, const std::string& mode,
                   const TensorMeta& m) {
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  int64_t r = self.dim(), k = (int64_t)pad.size() / 2;
  // map[d][o]: element offset in self of output position o along dim d (0 for unpadded dims)
  std::vector<std::vector<int64_t>> map(r);
  for (int64_t j = 0; j < k; j++) {
    int64_t d = r - 1 - j;
    map[d].resize(out.sizes()[d]);
    for (int64_t o = 0; o < out.sizes()[d]; o++)
      map[d][o] =
          pad_source(mode, o, self.sizes()[d], pad[2 * j], pad[2 * j + 1]) * self.strides()[d];
  }
  if (map[r - 1].empty()) {  // the last dim is not padded: identity map
    map[r - 1].resize(out.sizes()[r - 1]);
    for (int64_t o = 0; o < out.sizes()[r - 1]; o++) map[r - 1][o] = o * self.strides()[r - 1];
  }
  int64_t width = out.sizes()[r - 1], rows = out.numel() / width;
  visit_itemsize(self.itemsize(), [&]<typename U>() {
    const U* in = self.data<U>();
    U* dst = out.data<U>();
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / width), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; row++) {
        int64_t off = 0, rem = row;
        for (int64_t d = r - 2; d >= 0; d--) {
          int64_t c = rem % out.sizes()[d];
          rem /= out.sizes()[d];
          off += map[d].empty() ? c * self.strides()[d] : map[d][c];
        }
        U* o = dst + row * width;
        for (int64_t x = 0; x < width; x++) o[x] = in[off + map[r - 1][x]];
      }
    });
  });
  return out;
}

}  // namespace

Tensor contiguous_kernel(const Stack& a, const TensorMeta& m) {
  if (m.view_of == 0) return a[0].tensor();
  return clone_kernel(a, m);
}

Tensor clone_kernel(const Stack& a, const TensorMeta& m) {
  Tensor out = empty_from_meta(m);
  if (out.device().is_cpu() && copy_transposed(out, a[0].tensor())) return out;
  out.copy_from(a[0].tensor());
  return out;
}

Tensor copy_kernel(const Stack& a, const TensorMeta&) {
  Tensor self = a[0].tensor(), src = a[1].tensor();
  if (same_view(self, src)) {
    self.bump_version();
    return self;
  }
  if (may_overlap(self, src)) src = src.clone();  // reading while writing the same memory
  self.copy_from(src);
  return self;
}

Tensor to_device_kernel(const Stack& a, const TensorMeta& m) {
  if (m.view_of == 0) return a[0].tensor();
  return clone_kernel(a, m);  // copy_from reports a DeviceError for a device that is not available
}

Tensor cat_kernel(const Stack& a, const TensorMeta& m) {
  const TensorList& ts = a[0].tensors();
  Tensor out = empty_from_meta(m);
  auto first = std::find_if(ts.begin(), ts.end(), [](const Tensor& t) { return !cat_skips(t); });
  if (out.numel() == 0 || first == ts.end()) return out;
  int64_t d = wrap_dim(a[1].to_int(), first->dim()), start = 0;
  for (const Tensor& t : ts) {
    if (cat_skips(t)) continue;
    out.as_strided(t.sizes(), out.strides(), start * out.strides()[d]).copy_from(t);
    start += t.sizes()[d];
  }
  return out;
}

Tensor stack_kernel(const Stack& a, const TensorMeta& m) {
  const TensorList& ts = a[0].tensors();
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  int64_t d = wrap_dim(a[1].to_int(), ts[0].dim() + 1);
  Shape st = out.strides();
  st.erase(st.begin() + d);
  for (size_t i = 0; i < ts.size(); i++)
    out.as_strided(ts[i].sizes(), st, (int64_t)i * out.strides()[d]).copy_from(ts[i]);
  return out;
}

Tensor flip_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& self = a[0].tensor();
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  Shape st = self.strides();
  int64_t off = self.offset();
  for (int64_t d : a[1].ints()) {
    if (self.dim() == 0) break;
    int64_t w = wrap_dim(d, self.dim());
    off += (self.sizes()[w] - 1) * st[w];
    st[w] = -st[w];
  }
  out.copy_from(self.as_strided(self.sizes(), st, off));  // negative strides walk backwards
  return out;
}

Tensor roll_kernel(const Stack& a, const TensorMeta& m) {
  Tensor self = a[0].tensor(), out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  const IntList& shifts = a[1].ints();
  Tensor src = self, dst = out;
  Shape shift(std::max<int64_t>(self.dim(), 1), 0);
  if (a[2].is_none() || a[2].ints().empty()) {  // roll the flattened tensor
    src = self.contiguous();
    src = src.as_strided({src.numel()}, {1}, src.offset());
    dst = out.as_strided({out.numel()}, {1}, 0);
    shift[0] = shifts[0];
  } else if (self.dim() > 0) {
    for (size_t i = 0; i < shifts.size(); i++)
      shift[wrap_dim(a[2].ints()[i], self.dim())] += shifts[i];
  }
  // Every rolled dim splits into two blocks that swap places: copy the 2^k combinations.
  std::vector<int64_t> rolled;
  for (int64_t d = 0; d < src.dim(); d++) {
    int64_t n = src.sizes()[d];
    shift[d] = ((shift[d] % n) + n) % n;
    if (shift[d]) rolled.push_back(d);
  }
  for (uint64_t combo = 0; combo < (uint64_t(1) << rolled.size()); combo++) {
    Shape sizes = src.sizes();
    int64_t soff = src.offset(), doff = dst.offset();
    for (size_t j = 0; j < rolled.size(); j++) {
      int64_t d = rolled[j], n = sizes[d], s = shift[d];
      bool tail = combo >> j & 1;  // the last s elements move to the front
      sizes[d] = tail ? s : n - s;
      soff += (tail ? n - s : 0) * src.strides()[d];
      doff += (tail ? 0 : s) * dst.strides()[d];
    }
    dst.as_strided(sizes, dst.strides(), doff)
        .copy_from(src.as_strided(sizes, src.strides(), soff));
  }
  return out;
}

Tensor repeat_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& self = a[0].tensor();
  const IntList& reps = a[1].ints();
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  // out seen as [r0, s0, r1, s1, ...]; the input broadcast along every r_i
  size_t lead = reps.size() - self.dim();
  Shape sizes, ost, ist;
  for (size_t i = 0; i < reps.size(); i++) {
    int64_t n = i < lead ? 1 : self.sizes()[i - lead], s = i < lead ? 0 : self.strides()[i - lead];
    sizes.insert(sizes.end(), {reps[i], n});
    ost.insert(ost.end(), {n * out.strides()[i], out.strides()[i]});
    ist.insert(ist.end(), {0, s});
  }
  out.as_strided(sizes, ost, 0).copy_from(self.as_strided(sizes, ist, self.offset()));
  return out;
}

Tensor tri_kernel(Op op, const Stack& a, const TensorMeta& m) {
  const Tensor& self = a[0].tensor();
  int64_t k = a[1].to_int();
  Tensor out = empty_from_meta(m);
  out.copy_from(self);
  int64_t rows_per = self.sizes()[self.dim() - 2], cols = self.sizes()[self.dim() - 1];
  if (out.numel() == 0) return out;
  int64_t isz = (int64_t)out.itemsize(), rows = out.numel() / cols;
  char* base = static_cast<char*>(out.data_ptr());
  parallel_for(0, rows, std::max<int64_t>(1, 65536 / cols), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; row++) {
      int64_t i = row % rows_per;  // zero bits are 0 / 0.0 / false in every dtype
      int64_t lo = op == Op::tril ? std::clamp<int64_t>(i + k + 1, 0, cols) : 0;
      int64_t hi = op == Op::tril ? cols : std::clamp<int64_t>(i + k, 0, cols);
      if (lo < hi) std::memset(base + (row * cols + lo) * isz, 0, (hi - lo) * isz);
    }
  });
  return out;
}

Tensor pad_kernel(const Stack& a, const TensorMeta& m) {
  const Tensor& self = a[0].tensor();
  const IntList& pad = a[1].ints();
  if (a[2].str() != "constant") return pad_indexed(self, pad, a[2].str(), m);
  Tensor out = empty_from_meta(m);
  if (out.numel() == 0) return out;
  // The part of the input that survives negative padding goes inside the filled output.
  Shape sizes = self.sizes();
  int64_t soff = self.offset(), doff = 0;
  bool grows = false, empty = self.numel() == 0;
  for (size_t j = 0; j < pad.size() / 2; j++) {
    int64_t d = self.dim() - 1 - (int64_t)j, lo = pad[2 * j], hi = pad[2 * j + 1];
    sizes[d] -= std::max<int64_t>(0, -lo) + std::max<int64_t>(0, -hi);
    empty = empty || sizes[d] <= 0;
    soff += std::max<int64_t>(0, -lo) * self.strides()[d];
    doff += std::max<int64_t>(0, lo) * out.strides()[d];
    grows = grows || lo > 0 || hi > 0;
  }
  if (grows) fill(out, a[3]);
  if (!empty)
    out.as_strided(sizes, out.strides(), doff)
        .copy_from(self.as_strided(sizes, self.strides(), soff));
  return out;
}

}  // namespace tc::cpu
