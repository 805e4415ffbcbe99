// Source generation and launching of elementwise kernels (see elementwise.h).
#include "cuda/elementwise.h"

#include <cstring>

#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kMaxRank = 8;
constexpr int kMaxIn = 8;  // inputs of one elementwise kernel (bit masks, broadcast table)
constexpr int kBlock = 256;

std::string key_of(const EwSpec& s) {
  std::string k = "ew:" + s.tag + "|" + ctype(s.out) + "|";
  for (auto& i : s.in) k += (i.kind == EwIn::Ptr ? std::string("P") + ctype(i.storage) : std::string("S")) + ":" + i.ctype + ",";
  k += "|";
  for (auto& p : s.params) k += p + ",";
  k += "|" + s.expr + (s.zero_div_check ? "|z" : "");
  return k;
}

int num_ptrs(const EwSpec& s) {
  int n = 0;
  for (auto& i : s.in) n += i.kind == EwIn::Ptr;
  return n;
}

// Elements per thread of the contiguous kernel: 16 bytes of the widest array.
int vec_width(const EwSpec& s) {
  size_t w = itemsize(s.out);
  for (auto& i : s.in)
    if (i.kind == EwIn::Ptr) w = std::max(w, itemsize(i.storage));
  return (int)std::max<size_t>(1, std::min<size_t>(8, 16 / w));
}

// t broadcast to `shape` reads element i of the (contiguous) result at (i / div) % mod of its own
// memory: its non-broadcast dims form one contiguous block (a row, a channel vector ...).
bool broadcast_block(const Tensor& t, const Shape& shape, int64_t* div, int64_t* mod) {
  int nd = (int)shape.size(), off = nd - (int)t.dim();
  if (off < 0) return false;
  int first = -1, last = -1;
  for (int d = 0; d < nd; d++) {
    int td = d - off;
    bool real = td >= 0 && t.sizes()[td] != 1 && shape[d] != 1;
    if (real) {
      if (td >= 0 && t.sizes()[td] != shape[d]) return false;
      if (first < 0) first = d;
      else if (last != d - 1) return false;  // a gap of broadcast dims inside the block
      last = d;
    }
  }
  if (first < 0) return false;
  int64_t expect = 1;
  for (int d = last; d >= first; d--) {
    if (t.strides()[d - off] != expect) return false;
    expect *= shape[d];
  }
  int64_t dv = 1;
  for (int d = last + 1; d < nd; d++) dv *= shape[d];
  *div = dv;
  *mod = expect;
  return true;
}

}  // namespace

PVal pval(const std::string& ct, double v, int64_t iv, bool is_int) {
  PVal p;
  auto put = [&](auto x) { std::memcpy(p.bytes, &x, sizeof x); };
  if (ct == "float") put(is_int ? (float)iv : (float)v);
  else if (ct == "double") put(is_int ? (double)iv : v);
  else if (ct == "i64") put(is_int ? (int64_t)iv : (int64_t)v);
  else if (ct == "int") put(is_int ? (int32_t)iv : (int32_t)(int64_t)v);
  else if (ct == "u8") put(is_int ? (uint8_t)iv : (uint8_t)(int64_t)v);
  else if (ct == "bool") put(is_int ? iv != 0 : v != 0);
  else TC_ASSERT(false, "pval: unknown C type");
  return p;
}

std::string elementwise_source(const EwSpec& s) {
  const int V = vec_width(s);
  const std::string O = ctype(s.out);
  std::string params, ptr_params;
  std::vector<int> ptr_index(s.in.size(), -1);
  int np = 0;
  for (size_t i = 0; i < s.in.size(); i++)
    if (s.in[i].kind == EwIn::Ptr) {
      ptr_index[i] = np++;
      ptr_params += ", const " + std::string(ctype(s.in[i].storage)) + "* __restrict__ in" + std::to_string(i);
    }
  for (size_t i = 0; i < s.in.size(); i++)
    if (s.in[i].kind == EwIn::Param) params += ", " + s.in[i].ctype + " a" + std::to_string(i);
  for (size_t j = 0; j < s.params.size(); j++) params += ", " + s.params[j] + " p" + std::to_string(j);
  if (s.zero_div_check) params += ", i64* __restrict__ err";
  std::string src = prelude();
  src += "#define EXPR (" + s.expr + ")\n";
  std::string zchk = s.zero_div_check ? "    if (a1 == 0) flag_error(err, " + std::to_string(kFlagZeroDivision) + ", 0);\n" : "";
  // Contiguous kernel.
  src += "struct BD { i64 div[" + std::to_string(kMaxIn) + "]; i64 mod[" + std::to_string(kMaxIn) + "]; };\n";
  src += "extern \"C\" __global__ void __launch_bounds__(256) ew_c(" + O + "* __restrict__ out" + ptr_params + params +
         ", i64 n, unsigned bmask, int vec, unsigned dmask, BD bd) {\n";
  src += "  i64 base = ((i64)blockIdx.x * 256 + threadIdx.x) * " + std::to_string(V) + ";\n  if (base >= n) return;\n";
  // broadcast inputs read in[(i / div) % mod]: q, r of base, then stepped along the V elements
  for (size_t i = 0; i < s.in.size(); i++) {
    if (s.in[i].kind != EwIn::Ptr) continue;
    std::string I = std::to_string(i), B = std::to_string(1u << i) + "u";
    src += "  i64 r" + I + " = 0, k" + I + " = 0;\n  if (dmask & " + B + ") { i64 q = base / bd.div[" + I + "]; r" + I +
           " = base - q * bd.div[" + I + "]; k" + I + " = q % bd.mod[" + I + "]; }\n";
  }
  src += "  if (vec && base + " + std::to_string(V) + " <= n) {\n";
  for (size_t i = 0; i < s.in.size(); i++) {
    if (s.in[i].kind != EwIn::Ptr) continue;
    std::string I = std::to_string(i), T = ctype(s.in[i].storage);
    src += "    Vec<" + T + ", " + std::to_string(V) + "> x" + I + ";\n";
    src += "    if (bmask & " + std::to_string(1u << i) + "u) { " + T + " t = in" + I + "[0]; for (int j = 0; j < " +
           std::to_string(V) + "; j++) x" + I + ".v[j] = t; }\n";
    src += "    else if (dmask & " + std::to_string(1u << i) + "u) { for (int j = 0; j < " + std::to_string(V) +
           "; j++) { x" + I + ".v[j] = in" + I + "[k" + I + "]; if (++r" + I + " == bd.div[" + I + "]) { r" + I +
           " = 0; if (++k" + I + " == bd.mod[" + I + "]) k" + I + " = 0; } } }\n";
    src += "    else x" + I + " = *reinterpret_cast<const Vec<" + T + ", " + std::to_string(V) + ">*>(in" + I +
           " + base);\n";
  }
  src += "    Vec<" + O + ", " + std::to_string(V) + "> y;\n#pragma unroll\n    for (int j = 0; j < " + std::to_string(V) +
         "; j++) {\n";
  for (size_t i = 0; i < s.in.size(); i++)
    if (s.in[i].kind == EwIn::Ptr)
      src += "      " + s.in[i].ctype + " a" + std::to_string(i) + " = cvt<" + s.in[i].ctype + ">(x" +
             std::to_string(i) + ".v[j]);\n";
  src += (s.zero_div_check ? "  " + zchk : "") + "      y.v[j] = Cv<" + O + ">::f(EXPR);\n    }\n";
  src += "    *reinterpret_cast<Vec<" + O + ", " + std::to_string(V) + ">*>(out + base) = y;\n  } else {\n";
  src += "    for (int j = 0; j < " + std::to_string(V) + " && base + j < n; j++) {\n      i64 i = base + j;\n";
  for (size_t i = 0; i < s.in.size(); i++)
    if (s.in[i].kind == EwIn::Ptr) {
      std::string I = std::to_string(i);
      src += "      " + s.in[i].ctype + " a" + I + " = cvt<" + s.in[i].ctype + ">(in" + I + "[(bmask & " +
             std::to_string(1u << i) + "u) ? 0 : (dmask & " + std::to_string(1u << i) + "u) ? k" + I + " : i]);\n";
      src += "      if (dmask & " + std::to_string(1u << i) + "u) { if (++r" + I + " == bd.div[" + I + "]) { r" + I +
             " = 0; if (++k" + I + " == bd.mod[" + I + "]) k" + I + " = 0; } }\n";
    }
  src += (s.zero_div_check ? "  " + zchk : "") + "      out[i] = Cv<" + O + ">::f(EXPR);\n    }\n  }\n}\n";
  // Strided kernel.
  src += "struct St { i64 size[" + std::to_string(kMaxRank) + "]; i64 st[" + std::to_string(np + 1) + "][" +
         std::to_string(kMaxRank) + "]; };\n";
  src += "extern \"C\" __global__ void __launch_bounds__(256) ew_s(" + O + "* __restrict__ out" + ptr_params + params +
         ", i64 n, int rank, St s) {\n";
  src += "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n";
  src += "    i64 r = i, o0 = 0";
  for (int k = 1; k <= np; k++) src += ", o" + std::to_string(k) + " = 0";
  src += ";\n    for (int d = rank - 1; d >= 0; d--) {\n      i64 sz = s.size[d], c = r % sz; r /= sz;\n";
  for (int k = 0; k <= np; k++) src += "      o" + std::to_string(k) + " += c * s.st[" + std::to_string(k) + "][d];\n";
  src += "    }\n";
  for (size_t i = 0; i < s.in.size(); i++)
    if (s.in[i].kind == EwIn::Ptr)
      src += "    " + s.in[i].ctype + " a" + std::to_string(i) + " = cvt<" + s.in[i].ctype + ">(in" +
             std::to_string(i) + "[o" + std::to_string(ptr_index[i] + 1) + "]);\n";
  src += zchk + "    out[o0] = Cv<" + O + ">::f(EXPR);\n  }\n}\n";
  return src;
}

void run_elementwise(const EwSpec& s, const Tensor& out, const std::vector<Tensor>& ptrs, const std::vector<PVal>& vals) {
  int64_t n = out.numel();
  if (n == 0) return;
  int device = out.device().index;
  auto fns = kernels(device, key_of(s), [&] { return elementwise_source(s); }, {"ew_c", "ew_s"});
  const int np = num_ptrs(s);
  TC_ASSERT((int)ptrs.size() == np, "run_elementwise: pointer count");
  std::vector<void*> args;
  void* out_ptr = out.data_ptr();
  std::vector<void*> in_ptrs(np);
  args.push_back(&out_ptr);
  for (int k = 0; k < np; k++) {
    in_ptrs[k] = ptrs[k].data_ptr();
    args.push_back(&in_ptrs[k]);
  }
  for (auto& v : vals) args.push_back(const_cast<unsigned char*>(v.bytes));
  void* err = nullptr;
  if (s.zero_div_check) {
    err = reinterpret_cast<void*>(dev(device).error_word);
    args.push_back(&err);
  }
  // Contiguous path: out contiguous, each input contiguous of out's shape or a single element.
  bool contig = out.is_contiguous();
  unsigned bmask = 0;
  const int V = vec_width(s);
  bool vec_ok = true;
  auto aligned = [&](const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; };
  vec_ok = aligned(out_ptr, itemsize(out.dtype()) * V);
  unsigned dmask = 0;
  struct BD {
    int64_t div[kMaxIn], mod[kMaxIn];
  } bd{};
  for (int i = 0; i < kMaxIn; i++) bd.div[i] = bd.mod[i] = 1;
  {
    int k = 0;
    for (size_t i = 0; i < s.in.size(); i++) {
      if (s.in[i].kind != EwIn::Ptr) continue;
      const Tensor& t = ptrs[k++];
      if (t.numel() == 1) bmask |= 1u << i;
      else if (t.is_contiguous() && t.sizes() == out.sizes()) {
        if (!aligned(t.data_ptr(), t.itemsize() * V)) vec_ok = false;
      } else if (contig && i < (size_t)kMaxIn && broadcast_block(t, out.sizes(), &bd.div[i], &bd.mod[i])) {
        dmask |= 1u << i;
      } else {
        contig = false;
      }
    }
  }
  int64_t nn = n;
  if (contig) {
    int vec = vec_ok ? 1 : 0;
    args.push_back(&nn);
    args.push_back(&bmask);
    args.push_back(&vec);
    args.push_back(&dmask);
    args.push_back(&bd);
    int64_t blocks = (n + (int64_t)kBlock * V - 1) / ((int64_t)kBlock * V);
    launch(device, fns[0], (unsigned)blocks, kBlock, args.data());
  } else {
    // Strided: coalesce dims (drop size-1 dims; merge d-1 into d where every array is contiguous
    // across them).
    struct Dim {
      int64_t size;
      std::vector<int64_t> st;
    };
    std::vector<Dim> dims;
    const Shape& sz = out.sizes();
    int nd = (int)sz.size();
    for (int d = 0; d < nd; d++) {
      if (sz[d] == 1) continue;
      Dim dm{sz[d], {}};
      dm.st.push_back(out.strides()[d]);
      for (int k = 0; k < np; k++) {
        const Tensor& t = ptrs[k];
        int td = d - (nd - (int)t.dim());
        dm.st.push_back(td < 0 || t.sizes()[td] == 1 ? 0 : t.strides()[td]);
      }
      if (!dims.empty()) {
        Dim& prev = dims.back();
        bool merge = true;
        for (size_t k = 0; k < dm.st.size(); k++) merge &= prev.st[k] == dm.st[k] * dm.size;
        if (merge) {
          prev.size *= dm.size;
          prev.st = dm.st;
          continue;
        }
      }
      dims.push_back(dm);
    }
    TC_CHECK((int)dims.size() <= kMaxRank, NotImplementedError, "CUDA elementwise kernels support at most %d dims",
             kMaxRank);
    struct StHost {
      int64_t size[kMaxRank];
      int64_t st[9][kMaxRank];
    };
    // The device struct is St { size[8]; st[np+1][8] }: a prefix of StHost.
    StHost st{};
    for (size_t d = 0; d < dims.size(); d++) {
      st.size[d] = dims[d].size;
      for (int k = 0; k <= np; k++) st.st[k][d] = dims[d].st[k];
    }
    int rank = (int)dims.size();
    args.push_back(&nn);
    args.push_back(&rank);
    args.push_back(&st);
    int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, (int64_t)dev(device).sm_count * 64);
    launch(device, fns[1], (unsigned)std::max<int64_t>(blocks, 1), kBlock, args.data());
  }
  if (s.zero_div_check)
    check_device_errors(device, [](int64_t code, int64_t detail) {
      if (code == kFlagZeroDivision) TC_FAIL(ValueError, "ZeroDivisionError");
    });
}

}  // namespace tc::cuda
