// CUDA kernels of the movement group. The block-copy ops (contiguous clone copy_ to_device cat
// stack flip roll repeat, constant pad) reuse the CPU group's kernels, which only build views and
// call Tensor::copy_from: on CUDA tensors every one of those copies is the device's strided copy
// kernel. tril/triu, reflect/replicate/circular pad and the index-driven ops (index_select,
// gather, scatter, scatter_add; 1-based index values checked on the device: an out-of-range value
// sets the device error word and becomes an IndexError) have their own kernels. masked_select
// and nonzero stay on the host fallback: their output size depends on the data, so they would
// need a device-wide count and a synchronisation anyway.
#include <cstring>

#include "cpu/movement.h"
#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kRank = 8;

const char* uint_of(size_t itemsize) {
  switch (itemsize) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "u64";
  }
}

unsigned grid_for(int64_t n, int device) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, (int64_t)dev(device).sm_count * 32));
}

// tril/triu on a contiguous copy: zero the elements outside the band.
void tri_zero(const Tensor& out, bool tril, int64_t k) {
  int64_t n = out.numel();
  if (n == 0) return;
  int device = out.device().index;
  std::string U = uint_of(out.itemsize());
  auto f = kernels(device, std::string("tri:") + U, [&] {
    return prelude() + "typedef " + U + " U;\n"
           "extern \"C\" __global__ void tri(U* out, i64 n, i64 rows, i64 cols, i64 k, int lower) {\n"
           "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
           "    i64 c = i % cols, r = (i / cols) % rows;\n"
           "    bool zero = lower ? c > r + k : c < r + k;\n"
           "    if (zero) out[i] = (U)0;\n  }\n}\n";
  }, {"tri"})[0];
  int64_t rows = out.sizes()[out.dim() - 2], cols = out.sizes()[out.dim() - 1];
  int lower = tril ? 1 : 0;
  void* p = out.data_ptr();
  void* args[] = {&p, &n, &rows, &cols, &k, &lower};
  launch(device, f, grid_for(n, device), kBlock, args);
}

struct PadGeo {
  int64_t osize[kRank], ist[kRank], isize[kRank], lo[kRank], hi[kRank];
};

// reflect / replicate / circular pad: every output element reads one input element.
void pad_indexed(const Tensor& self, const IntList& pad, const std::string& mode, const Tensor& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  int device = out.device().index;
  int rank = (int)self.dim();
  TC_CHECK(rank <= kRank, NotImplementedError, "pad on CUDA supports at most %d dims", kRank);
  PadGeo g{};
  for (int d = 0; d < rank; d++) {
    g.osize[d] = out.sizes()[d];
    g.ist[d] = self.strides()[d];
    g.isize[d] = self.sizes()[d];
  }
  std::vector<bool> padded(rank, false);
  for (size_t j = 0; j < pad.size() / 2; j++) {
    int d = rank - 1 - (int)j;
    g.lo[d] = pad[2 * j];
    g.hi[d] = pad[2 * j + 1];
    padded[d] = true;
  }
  unsigned pmask = 0;
  for (int d = 0; d < rank; d++) pmask |= padded[d] ? 1u << d : 0;
  int m = mode == "reflect" ? 0 : mode == "replicate" ? 1 : 2;
  std::string U = uint_of(out.itemsize());
  auto f = kernels(device, std::string("padi:") + U, [&] {
    return prelude() + "typedef " + U + " U;\n"
           "struct G { i64 osize[8], ist[8], isize[8], lo[8], hi[8]; };\n"
           "__device__ i64 src_of(int mode, i64 o, i64 n, i64 lo, i64 hi) {\n"
           "  i64 i = o - lo;\n"
           "  if (mode == 0) return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;\n"
           "  if (mode == 1) return i < 0 ? 0 : i > n - 1 ? n - 1 : i;\n"
           "  i64 first = lo < 0 ? -lo : 0, len = n - first - (hi < 0 ? -hi : 0);\n"
           "  i64 j = o - (lo > 0 ? lo : 0);\n  return first + ((j % len) + len) % len;\n}\n"
           "extern \"C\" __global__ void padi(const U* in, U* out, i64 n, int rank, unsigned pmask, int mode, G g) {\n"
           "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
           "    i64 r = i, off = 0;\n"
           "    for (int d = rank - 1; d >= 0; d--) {\n"
           "      i64 c = r % g.osize[d]; r /= g.osize[d];\n"
           "      if (pmask & (1u << d)) c = src_of(mode, c, g.isize[d], g.lo[d], g.hi[d]);\n"
           "      off += c * g.ist[d];\n    }\n"
           "    out[i] = in[off];\n  }\n}\n";
  }, {"padi"})[0];
  const void* ip = self.data_ptr();
  void* op = out.data_ptr();
  void* args[] = {&ip, &op, &n, &rank, &pmask, &m, &g};
  launch(device, f, grid_for(n, device), kBlock, args);
}

struct IdxGeo {
  int64_t size[kRank];  // the iteration shape
  int64_t a[kRank];     // gather/index_select: self strides; scatter: out strides
  int64_t ix[kRank];    // index strides
  int64_t s[kRank];     // scatter: src strides
};

// kind 0: gather / index_select: out[i] (contiguous over the iteration shape) = self[c with
//   c[dim] = index - 1]. kind 1: scatter, 2: scatter_add: out[c with c[dim] = index - 1] = src[c]
//   (or the value `val`). Index values outside 1..dimsize flag the device error word.
void index_kernel(int kind, const Tensor& base, const Tensor& index, const Tensor& src, const Tensor& out,
                  const IdxGeo& g, int rank, int dim, int64_t dimsize, int64_t n, uint64_t valbits, bool use_val,
                  const char* opname) {
  if (n == 0) return;
  int device = out.device().index;
  std::string T = kind == 2 ? ctype(out.dtype()) : uint_of(out.itemsize());
  std::string I = ctype(index.dtype());
  std::string key = "idx:" + std::to_string(kind) + T + I;
  auto f = kernels(device, key, [&] {
    std::string s = prelude() + "typedef " + T + " T;\ntypedef " + I + " I;\n"
                    "struct G { i64 size[8], a[8], ix[8], s[8]; };\n";
    if (kind == 2) {
      s += "__device__ __forceinline__ void addto(float* p, float v) { atomicAdd(p, v); }\n"
           "__device__ __forceinline__ void addto(double* p, double v) { atomicAdd(p, v); }\n"
           "__device__ __forceinline__ void addto(int* p, int v) { atomicAdd(p, v); }\n"
           "__device__ __forceinline__ void addto(i64* p, i64 v) { atomicAdd((unsigned long long*)p, (unsigned long long)v); }\n";
    }
    s += "extern \"C\" __global__ void idx(const T* base, const I* index, const T* src, T* out, i64 n, int rank, int dim, "
         "i64 dimsize, G g, T val, int use_val, i64* err) {\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
         "    i64 r = i, oa = 0, oi = 0, os = 0, cd = 0;\n"
         "    for (int d = rank - 1; d >= 0; d--) {\n"
         "      i64 c = r % g.size[d]; r /= g.size[d];\n"
         "      oi += c * g.ix[d]; os += c * g.s[d];\n"
         "      if (d != dim) oa += c * g.a[d];\n    }\n"
         "    i64 v = (i64)index[oi];\n"
         "    if (v < 1 || v > dimsize) { flag_error(err, 1, v); continue; }\n"
         "    oa += (v - 1) * g.a[dim];\n";
    if (kind == 0) s += "    out[i] = base[oa];\n";
    else if (kind == 1) s += "    out[oa] = use_val ? val : src[os];\n";
    else s += "    addto(out + oa, src[os]);\n";
    s += "  }\n}\n";
    return s;
  }, {"idx"})[0];
  const void* bp = base.defined() ? base.data_ptr() : nullptr;
  const void* ip = index.data_ptr();
  const void* sp = src.defined() ? src.data_ptr() : nullptr;
  void* op = out.data_ptr();
  int uv = use_val ? 1 : 0;
  void* err = reinterpret_cast<void*>(dev(device).error_word);
  void* args[] = {&bp, &ip, &sp, &op, &n, &rank, &dim, &dimsize, const_cast<IdxGeo*>(&g), &valbits, &uv, &err};
  launch(device, f, grid_for(n, device), kBlock, args);
  int64_t bad = 0;
  if (take_device_error(device, &bad))
    TC_FAIL(IndexError, "%s(): index %lld is out of range for dimension %lld with size %lld (indices are 1-based: 1..%lld)",
            opname, (long long)bad, (long long)dim + 1, (long long)dimsize, (long long)dimsize);
}

// sizes/strides of t seen with rank r (a 0-dim tensor reads as [1]).
int64_t sz(const Tensor& t, int d) { return t.dim() == 0 ? 1 : t.sizes()[d]; }
int64_t st(const Tensor& t, int d) { return t.dim() == 0 ? 0 : t.strides()[d]; }

}  // namespace

bool movement(Op op, const Stack& a, const Metas& m, Stack* result) {
  switch (op) {
    case Op::contiguous: case Op::clone: case Op::copy_: case Op::to_device: case Op::cat: case Op::stack:
    case Op::flip: case Op::roll: case Op::repeat: {
      // device-agnostic block copies (views + Tensor::copy_from)
      *result = cpu_movement(op, a, m);
      return true;
    }
    case Op::tril: case Op::triu: {
      Tensor out = empty_from_meta(m[0]);
      out.copy_from(a[0].tensor());
      if (out.is_contiguous()) tri_zero(out, op == Op::tril, a[1].to_int());
      else return false;
      *result = {Value(out)};
      return true;
    }
    case Op::pad: {
      const Tensor& self = a[0].tensor();
      const IntList& pad = a[1].ints();
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (out.numel() == 0) return true;
      if (a[2].str() != "constant") {
        pad_indexed(self, pad, a[2].str(), out);
        return true;
      }
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
      if (grows) {
        // the value as the CPU's pad fill converts it: T(opmath(value))
        const Value& v = a[3];
        Tensor h = Tensor::empty({1}, out.dtype());
        h.copy_from(v.is_double() ? Tensor::scalar(v.to_double()) : Tensor::scalar_int(v.is_bool() ? v.to_bool() : v.to_int()));
        Tensor d1 = Tensor::empty({1}, out.dtype(), out.device());
        d1.copy_from(h);
        copy_strided(out, d1.as_strided(out.sizes(), Shape(out.dim(), 0), 0));
      }
      if (!empty) out.as_strided(sizes, out.strides(), doff).copy_from(self.as_strided(sizes, self.strides(), soff));
      return true;
    }
    case Op::index_select: {
      const Tensor& self = a[0].tensor();
      if (self.dim() == 0 || self.dim() > kRank) return false;
      int dim = (int)wrap_dim(a[1].to_int(), self.dim());
      const Tensor& index = a[2].tensor();
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      IdxGeo g{};
      int rank = (int)self.dim();
      for (int d = 0; d < rank; d++) {
        g.size[d] = out.sizes()[d];
        g.a[d] = self.strides()[d];
        g.ix[d] = d == dim ? st(index, 0) : 0;
      }
      if (out.numel() == 0) {
        if (index.numel() == 0) return true;
      }
      index_kernel(0, self, index, Tensor(), out, g, rank, dim, self.sizes()[dim], out.numel(), 0, false, "index_select");
      return true;
    }
    case Op::gather: {
      const Tensor& self = a[0].tensor();
      const Tensor& index = a[2].tensor();
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      if (index.numel() == 0) return true;
      int rank = (int)std::max<int64_t>(self.dim(), 1);
      if (rank > kRank) return false;
      int dim = (int)wrap_dim(a[1].to_int(), self.dim());
      IdxGeo g{};
      for (int d = 0; d < rank; d++) {
        g.size[d] = sz(index, d);
        g.a[d] = st(self, d);
        g.ix[d] = st(index, d);
      }
      index_kernel(0, self, index, Tensor(), out, g, rank, dim, sz(self, dim), index.numel(), 0, false, "gather");
      return true;
    }
    case Op::scatter: case Op::scatter_add: {
      const Tensor& self = a[0].tensor();
      const Tensor& index = a[2].tensor();
      const Tensor& src = a[3].tensor();
      DType dt = m[0].dtype;
      if (op == Op::scatter_add && dt != DType::Float32 && dt != DType::Float64 && dt != DType::Int32 && dt != DType::Int64)
        return false;  // no native atomic add for this dtype: host fallback
      Tensor out = empty_from_meta(m[0]);
      out.copy_from(self);
      *result = {Value(out)};
      if (index.numel() == 0) return true;
      int rank = (int)std::max<int64_t>(self.dim(), 1);
      if (rank > kRank || !out.is_contiguous()) return false;
      int dim = (int)wrap_dim(a[1].to_int(), self.dim());
      bool use_val = op == Op::scatter && src.is_wrapped_number();
      uint64_t bits = 0;
      Tensor sd = src;
      if (use_val) {
        Tensor h = Tensor::empty({1}, dt);
        h.copy_from(src);
        std::memcpy(&bits, h.data_ptr(), h.itemsize());
        sd = Tensor();
      } else if (src.device().is_cpu()) {
        sd = Tensor::empty(src.sizes(), src.dtype(), out.device());
        sd.copy_from(src);
      }
      IdxGeo g{};
      for (int d = 0; d < rank; d++) {
        g.size[d] = sz(index, d);
        g.a[d] = st(out, d);
        g.ix[d] = st(index, d);
        g.s[d] = sd.defined() ? st(sd, d) : 0;
      }
      index_kernel(op == Op::scatter ? 1 : 2, Tensor(), index, sd, out, g, rank, dim, sz(self, dim), index.numel(), bits,
                   use_val, op_name(op));
      return true;
    }
    default: return false;  // masked_select, nonzero: host fallback (data-dependent sizes)
  }
}

}  // namespace tc::cuda
