// CUDA kernels of the movement group. The block-copy ops (contiguous clone copy_ to_device cat
// stack flip roll repeat, constant pad) reuse the CPU group's kernels, which only build views and
// call Tensor::copy_from: on CUDA tensors every one of those copies is the device's strided copy
// kernel. tril/triu, reflect/replicate/circular pad and the index-driven ops (index_select,
// gather, scatter, scatter_add; 1-based index values checked on the device: an out-of-range value
// sets the device error word and becomes an IndexError) have their own kernels; scatter_add adds
// with the native atomics, and for float16/bfloat16/uint8/bool with a compare-and-swap loop on
// the enclosing 32-bit word. masked_select and nonzero, whose output size depends on the data:
// per-chunk counts, a device-wide scan, one synchronising read of the total (PyTorch syncs too),
// then every chunk writes its hits in row-major order from its offset.
#include <cstring>

#include "cpu/movement.h"
#include "cuda/scan.h"

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
           "__device__ __forceinline__ void addto(i64* p, i64 v) { atomicAdd((unsigned long long*)p, (unsigned long long)v); }\n"
           // 1- and 2-byte types: CAS on the aligned 32-bit word holding the element
           "template <typename S> __device__ void cas_add(S* p, S v) {\n"
           "  unsigned* w = (unsigned*)((u64)p & ~(u64)3);\n"
           "  unsigned sh = (unsigned)((u64)p & 3) * 8, mask = (sizeof(S) == 1 ? 0xffu : 0xffffu) << sh;\n"
           "  unsigned old = *w, seen;\n"
           "  do {\n"
           "    seen = old;\n"
           "    S cur, sum;\n"
           "    if (sizeof(S) == 1) *(u8*)&cur = (u8)(seen >> sh); else *(unsigned short*)&cur = (unsigned short)(seen >> sh);\n"
           "    sum = Cv<S>::f(ld(cur) + ld(v));\n"
           "    unsigned b = sizeof(S) == 1 ? (unsigned)*(u8*)&sum : (unsigned)*(unsigned short*)&sum;\n"
           "    old = atomicCAS(w, seen, (seen & ~mask) | ((b << sh) & mask));\n"
           "  } while (old != seen);\n}\n"
           "__device__ __forceinline__ void addto(f16* p, f16 v) { cas_add(p, v); }\n"
           "__device__ __forceinline__ void addto(bf16* p, bf16 v) { cas_add(p, v); }\n"
           "__device__ __forceinline__ void addto(u8* p, u8 v) { cas_add(p, v); }\n"
           "__device__ __forceinline__ void addto(bool* p, bool v) { cas_add(p, v); }\n";
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
         "    if (v < 1 || v > dimsize) { flag_error(err, " + std::to_string(kFlagIndex) + ", v); continue; }\n"
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
  check_device_errors(device, [opname, dim, dimsize](int64_t code, int64_t bad) {
    if (code != kFlagIndex || (bad >= 1 && bad <= dimsize)) return;  // another check's flag
    TC_FAIL(IndexError, "%s(): index %lld is out of range for dimension %lld with size %lld (indices are 1-based: 1..%lld)",
            opname, (long long)bad, (long long)dim + 1, (long long)dimsize, (long long)dimsize);
  });
}

// The compaction of masked_select and nonzero over a contiguous `flags` tensor (element i is a hit
// when its value is nonzero): the number of hits, then for each hit in row-major order either
// vals[i] (masked_select: out has the hits' values) or its 1-based coordinates in `sizes`
// (nonzero: out is hits x rank). One host synchronisation reads the total.
struct Sizes {
  int64_t s[kRank];
};
Tensor compact(const Tensor& flags, const Tensor& vals, const Shape& sizes, bool coords) {
  Device d = flags.device();
  int device = d.index;
  int64_t total = flags.numel(), rank = (int64_t)sizes.size(), chunks = (total + 2047) / 2048;
  std::string F = ctype(flags.dtype()), U = vals.defined() ? uint_of(vals.itemsize()) : "u8";
  auto f = kernels(device, "compact:" + F + ":" + U, [&] {
    return prelude() + block_exclusive_src() + "typedef " + F + " F;\ntypedef " + U + " U;\n"
           "struct Sizes { i64 s[8]; };\n"
           "__device__ __forceinline__ bool hit(const F* f, i64 i) { return ld(f[i]) != 0; }\n"
           "extern \"C\" __global__ void __launch_bounds__(256) ccount(const F* __restrict__ f, i64 n, i64* __restrict__ counts) {\n"
           "  i64 base = (i64)blockIdx.x * 2048, c = 0, total;\n"
           "  for (int k = 0; k < 8; k++) { i64 i = base + k * 256 + threadIdx.x; if (i < n && hit(f, i)) c++; }\n"
           "  block_exclusive(c, &total);\n"
           "  if (threadIdx.x == 0) counts[blockIdx.x] = total;\n}\n"
           "extern \"C\" __global__ void __launch_bounds__(256) cwrite(const F* __restrict__ f, i64 n, const i64* __restrict__ offs,\n"
           "    const U* __restrict__ vals, U* __restrict__ out, i64* __restrict__ coords, int rank, Sizes sz) {\n"
           "  i64 base = (i64)blockIdx.x * 2048 + threadIdx.x * 8, c = 0, total;\n"
           "  for (int k = 0; k < 8; k++) c += base + k < n && hit(f, base + k);\n"
           "  i64 at = block_exclusive(c, &total) + offs[blockIdx.x];\n"
           "  for (int k = 0; k < 8; k++) {\n"
           "    i64 i = base + k;\n"
           "    if (i >= n || !hit(f, i)) continue;\n"
           "    if (vals) out[at] = vals[i];\n"
           "    else for (i64 r = i, q = rank - 1; q >= 0; q--) { coords[at * rank + q] = r % sz.s[q] + 1; r /= sz.s[q]; }\n"
           "    at++;\n  }\n}\n";
  }, {"ccount", "cwrite"});
  Tensor counts = Tensor::empty({chunks + 1}, DType::Int64, d);
  fill(counts, 0, 0, true);
  const void* fp = flags.data_ptr();
  void* cp = counts.data_ptr();
  void* a1[] = {&fp, &total, &cp};
  launch(device, f[0], (unsigned)chunks, 256, a1);
  exclusive_scan(cp, chunks + 1, device);
  Tensor h = Tensor::empty({1}, DType::Int64);
  h.copy_from(counts.as_strided({1}, {1}, chunks));
  int64_t hits = h.data<int64_t>()[0];
  Tensor out = coords ? Tensor::empty({hits, rank}, DType::Int64, d) : Tensor::empty({hits}, vals.dtype(), d);
  if (hits == 0 || (coords && rank == 0)) return out;
  Sizes sz{};
  for (int64_t q = 0; q < rank; q++) sz.s[q] = sizes[q];
  const void* vp = coords ? nullptr : vals.data_ptr();
  void* op = coords ? nullptr : out.data_ptr();
  void* ip = coords ? out.data_ptr() : nullptr;
  int r = (int)rank;
  void* a2[] = {&fp, &total, &cp, &vp, &op, &ip, &r, &sz};
  launch(device, f[1], (unsigned)chunks, 256, a2);
  return out;
}

// t broadcast to `shape`, contiguous (t itself when it already is).
Tensor expand_contiguous(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape && t.is_contiguous()) return t;
  Tensor c = Tensor::empty(shape, t.dtype(), t.device());
  copy_strided(c, t);
  return c;
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
      Tensor c = out.is_contiguous() ? out : Tensor::empty(out.sizes(), out.dtype(), out.device());
      c.copy_from(a[0].tensor());
      tri_zero(c, op == Op::tril, a[1].to_int());
      if (!c.same(out)) out.copy_from(c);
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
      if (self.dim() > kRank) return false;
      int dim = (int)wrap_dim(a[1].to_int(), self.dim());
      const Tensor& index = a[2].tensor();
      Tensor out = empty_from_meta(m[0]);
      *result = {Value(out)};
      IdxGeo g{};
      int rank = (int)std::max<int64_t>(self.dim(), 1);  // a 0-dim self reads as [1]
      for (int d = 0; d < rank; d++) {
        g.size[d] = sz(out, d);
        g.a[d] = st(self, d);
        g.ix[d] = d == dim ? st(index, 0) : 0;
      }
      if (out.numel() == 0) {
        if (index.numel() == 0) return true;
      }
      index_kernel(0, self, index, Tensor(), out, g, rank, dim, sz(self, dim), out.numel(), 0, false, "index_select");
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
      Tensor out = empty_from_meta(m[0]);
      out.copy_from(self);
      *result = {Value(out)};
      if (index.numel() == 0) return true;
      int rank = (int)std::max<int64_t>(self.dim(), 1);
      if (rank > kRank) return false;
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
    case Op::masked_select: {
      const Tensor &self = a[0].tensor(), &mask = a[1].tensor();
      Shape shape = broadcast_shapes(self.sizes(), mask.sizes());
      if ((int64_t)shape.size() > kRank) return false;
      Device dv = self.device().is_cuda() ? self.device() : mask.device();
      auto on_device = [&](const Tensor& t) {  // a CPU 0-dim operand
        if (t.device() == dv) return t;
        Tensor c = Tensor::empty(t.sizes(), t.dtype(), dv);
        c.copy_from(t);
        return c;
      };
      *result = {Value(compact(expand_contiguous(on_device(mask), shape), expand_contiguous(on_device(self), shape), shape, false))};
      return true;
    }
    case Op::nonzero: {
      const Tensor& self = a[0].tensor();
      if (self.dim() > kRank) return false;
      *result = {Value(compact(contiguous_as(self, self.dtype()), Tensor(), self.sizes(), true))};
      return true;
    }
    default: return false;
  }
}

}  // namespace tc::cuda
