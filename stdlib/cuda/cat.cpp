// cat of contiguous CUDA tensors of the output's dtype in one launch per 32 inputs (the movement
// group's general path makes one strided copy per input: a DenseNet layer's cat of up to 30
// feature maps cost 30 launches and ~40 us of host time). Cut at the cat dimension, every input
// is `outer` rows of `row` elements that land at column `col` of the output's rows of `out_row`
// elements; each block row of the grid copies one input, in the widest unit (up to 16 bytes)
// that divides every row length, column offset and address. Anything else: false (the general
// path runs).
#include <algorithm>

#include "cuda/runtime.h"

namespace tc::cuda {
namespace {

constexpr int kMaxInputs = 32;
constexpr int kBlock = 256;

struct Piece {
  const void* src;
  int64_t row, col;  // in units
};
struct Table {
  Piece p[kMaxInputs];
};

const char* unit_type(int bytes) {
  switch (bytes) {
    case 16: return "U16";
    case 8: return "u64";
    case 4: return "unsigned";
    case 2: return "unsigned short";
    default: return "unsigned char";
  }
}

}  // namespace

bool cat_contiguous(const Stack& a, const TensorMeta& m, Stack* result) {
  const TensorList& ts = a[0].tensors();
  Tensor out = empty_from_meta(m);
  if (!out.is_contiguous()) return false;
  std::vector<const Tensor*> in;
  for (const Tensor& t : ts) {
    if (t.numel() == 0) continue;  // contributes nothing (also the legacy 1-d empty tensors)
    if (t.dtype() != out.dtype() || !t.is_contiguous() || !t.device().is_cuda() || t.dim() != out.dim()) return false;
    in.push_back(&t);
  }
  *result = {Value(out)};
  if (out.numel() == 0 || in.empty()) return true;
  int64_t d = wrap_dim(a[1].to_int(), out.dim());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; i++) outer *= out.sizes()[i];
  for (int64_t i = d + 1; i < out.dim(); i++) inner *= out.sizes()[i];
  int64_t isz = out.itemsize(), out_row = out.sizes()[d] * inner * isz;  // bytes
  // the widest unit dividing every length, offset and address
  uintptr_t bits = 16 | (uintptr_t)out_row | (uintptr_t)out.data_ptr();
  int64_t col = 0;
  for (const Tensor* t : in) {
    bits |= (uintptr_t)(t->sizes()[d] * inner * isz) | (uintptr_t)(col * inner * isz) | (uintptr_t)t->data_ptr();
    col += t->sizes()[d];
  }
  int unit = (int)(bits & -bits);
  int64_t max_units = outer * out_row / unit;
  int device = out.device().index;
  std::string U = unit_type(unit), I = max_units < (int64_t(1) << 31) ? "unsigned" : "u64";
  auto f = kernels(device, "cat:" + U + ":" + I, [&] {
    return prelude() + "struct __align__(16) U16 { unsigned a, b, c, d; };\ntypedef " + U + " U;\ntypedef " + I + " I;\n"
           "struct Piece { const U* src; i64 row, col; };\n"
           "struct Table { Piece p[" + std::to_string(kMaxInputs) + "]; };\n"
           "extern \"C\" __global__ void cat(U* __restrict__ out, i64 outer64, i64 out_row64, Table t) {\n"
           "  const Piece& p = t.p[blockIdx.y];\n"
           "  I row = (I)p.row, col = (I)p.col, out_row = (I)out_row64, n = (I)outer64 * row;\n"
           "  for (I e = (I)blockIdx.x * 256 + threadIdx.x; e < n; e += (I)gridDim.x * 256) {\n"
           "    I o = e / row;\n"
           "    out[o * out_row + col + (e - o * row)] = p.src[e];\n  }\n}\n";
  }, {"cat"})[0];
  void* op = out.data_ptr();
  int64_t out_units = out_row / unit;
  col = 0;
  for (size_t first = 0; first < in.size(); first += kMaxInputs) {
    size_t cnt = std::min<size_t>(kMaxInputs, in.size() - first);
    Table tab{};
    int64_t most = 0;
    for (size_t k = 0; k < cnt; k++) {
      const Tensor* t = in[first + k];
      int64_t row = t->sizes()[d] * inner * isz / unit;
      tab.p[k] = {t->data_ptr(), row, col};
      col += row;
      most = std::max(most, outer * row);
    }
    unsigned gx = grid_for(most, device, kBlock, 8);
    void* args[] = {&op, &outer, &out_units, &tab};
    launch3(device, f, gx, (unsigned)cnt, 1, kBlock, args);
  }
  return true;
}

}  // namespace tc::cuda
