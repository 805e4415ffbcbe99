// How a loop-IR kernel maps onto CUDA threads (cuda_codegen.h: plan_kernel, kernel_work,
// choose_shape, vector_width): the static work of a kernel, whether its index steps by one along
// the innermost outer dim (vector accesses, column sums), and whether it can be a split reduction.
#include <algorithm>

#include "cuda_codegen.h"
#include "cuda_kernel_analysis.h"

namespace tc::backends::cuda {

int arity(ScalarOp op) {
  switch (op) {
#define TC_SCALAR_OP(name, n) \
  case ScalarOp::name: return n;
#include "lower/scalar_ops.def"
#undef TC_SCALAR_OP
  }
  return 0;
}

namespace {

// How an integer value changes when the innermost outer index grows by one (the last dim of
// Kernel::outer): 0 for values that do not depend on it, 1 for `x + o_last`-like indices; nullopt
// when it is not an affine step (divisions, modulo, data-dependent). `memo`: per Val.
std::optional<int64_t> inner_step(const Kernel& k, Val v, std::vector<std::optional<std::optional<int64_t>>>& memo) {
  if (v < 0 || v >= (Val)k.instrs.size()) return std::nullopt;
  if (memo[v]) return *memo[v];
  const Instr& in = k.instrs[v];
  auto d = [&](Val x) { return inner_step(k, x, memo); };
  std::optional<int64_t> r;
  switch (in.op) {
    case Opc::ConstI: case Opc::ConstF: case Opc::SizeParam: case Opc::LoopVar: r = 0; break;
    case Opc::OuterVar: r = in.a == (Val)k.outer.size() - 1 ? 1 : 0; break;
    case Opc::Acc: case Opc::OuterAcc: break;
    case Opc::Load: {
      auto i = d(in.b);
      if (i && *i == 0) r = 0;
      break;
    }
    case Opc::Math: {
      const int n = arity(in.sop);
      std::vector<std::optional<int64_t>> ds;
      bool uniform = true;
      for (Val x : {in.a, in.b, in.c}) {
        if ((int)ds.size() == n) break;
        ds.push_back(d(x));
        uniform = uniform && ds.back() && *ds.back() == 0;
      }
      if (uniform) {
        r = 0;
        break;
      }
      if (in.ty != Ty::I64 && in.ty != Ty::I32) break;
      if (in.sop == ScalarOp::cast && ds[0]) r = ds[0];
      if (n != 2 || !ds[0] || !ds[1]) break;
      if (in.sop == ScalarOp::add) r = *ds[0] + *ds[1];
      if (in.sop == ScalarOp::sub) r = *ds[0] - *ds[1];
      if (in.sop == ScalarOp::mul) {  // a constant times a stepping value
        auto ca = *ds[0] == 0 ? eval_uniform(k, in.a, nullptr) : std::nullopt;
        auto cb = *ds[1] == 0 ? eval_uniform(k, in.b, nullptr) : std::nullopt;
        if (ca) r = *ca * *ds[1];
        else if (cb) r = *cb * *ds[0];
      }
      break;
    }
  }
  memo[v] = r;
  return r;
}

std::optional<int64_t> eval(const Kernel& k, Val v, const std::vector<int64_t>* sizes, int depth) {
  if (v < 0 || v >= (Val)k.instrs.size() || depth > 64) return std::nullopt;
  const Instr& in = k.instrs[v];
  auto ev = [&](Val x) { return eval(k, x, sizes, depth + 1); };
  switch (in.op) {
    case Opc::ConstI: return in.i;
    case Opc::ConstF: return is_float(in.ty) ? std::nullopt : std::optional<int64_t>((int64_t)in.f);
    case Opc::SizeParam:
      if (!sizes || in.a < 0 || in.a >= (int)sizes->size()) return std::nullopt;
      return (*sizes)[in.a];
    case Opc::Math: {
      if (is_float(in.ty)) return std::nullopt;
      auto a = ev(in.a);
      if (!a) return std::nullopt;
      if (in.sop == ScalarOp::cast) return in.ty == Ty::I32 ? (int64_t)(int32_t)*a : *a;
      if (in.sop == ScalarOp::neg) return -*a;
      if (arity(in.sop) != 2) return std::nullopt;
      auto b = ev(in.b);
      if (!b) return std::nullopt;
      switch (in.sop) {
        case ScalarOp::add: return *a + *b;
        case ScalarOp::sub: return *a - *b;
        case ScalarOp::mul: return *a * *b;
        case ScalarOp::div_trunc: return *b ? *a / *b : 0;
        case ScalarOp::div_floor: {
          if (!*b) return 0;
          int64_t q = *a / *b;
          if (*a % *b != 0 && ((*a < 0) != (*b < 0))) q--;
          return q;
        }
        case ScalarOp::mod: {
          if (!*b) return 0;
          int64_t r = *a % *b;
          if (r != 0 && ((r < 0) != (*b < 0))) r += *b;
          return r;
        }
        case ScalarOp::minimum: return std::min(*a, *b);
        case ScalarOp::maximum: return std::max(*a, *b);
        default: return std::nullopt;
      }
    }
    default: return std::nullopt;
  }
}

}  // namespace

std::vector<char> after_reductions(const Kernel& k) {
  std::vector<char> after(k.instrs.size(), 0);
  for (Val v = 0; v < (Val)k.instrs.size(); v++) {
    const Instr& in = k.instrs[v];
    auto dep = [&](Val x) { return x >= 0 && x < v && after[x]; };
    if (in.op == Opc::Acc) after[v] = 1;
    if (in.op == Opc::Load) after[v] = dep(in.b);
    if (in.op == Opc::Math) after[v] = dep(in.a) || dep(in.b) || dep(in.c);
  }
  return after;
}

VectorAccesses vector_accesses(const Kernel& k) {
  VectorAccesses va;
  std::vector<std::optional<std::optional<int64_t>>> memo(k.instrs.size());
  auto one = [&](Val idx) {
    auto s = inner_step(k, idx, memo);
    return s && *s == 1;
  };
  auto see = [&](int buffer) {
    const int b = (int)itemsize(k.buffers.at(buffer).dtype);
    va.min_bytes = std::min(va.min_bytes, b), va.max_bytes = std::max(va.max_bytes, b);
  };
  for (size_t i = 0; i < k.body.size(); i++) {
    const Stmt& st = k.body[i];
    for (Val v : st.body) {
      const Instr& in = k.instrs.at(v);
      // loads of a written buffer stay element by element (before the group's stores, as now)
      if (in.op == Opc::Load && !k.buffers.at(in.a).written && one(in.b)) {
        va.loads.insert(v);
        see(in.a);
      }
    }
    for (size_t j = 0; j < st.stores.size(); j++)
      if (one(st.stores[j].index)) {
        va.stores.insert({(int)i, (int)j});
        see(st.stores[j].buffer);
      }
  }
  return va;
}

std::optional<int64_t> eval_uniform(const Kernel& k, Val v, const std::vector<int64_t>* sizes) {
  return eval(k, v, sizes, 0);
}

std::optional<KernelWork> kernel_work(const Kernel& k, const std::vector<int64_t>* sizes) {
  KernelWork w;
  for (Val e : k.outer) {
    auto x = eval_uniform(k, e, sizes);
    if (!x) return std::nullopt;
    w.outer *= std::max<int64_t>(0, *x);
  }
  for (const Stmt& s : k.body) {
    if (s.kind != Stmt::Kind::Loop) continue;
    w.has_loops = true;
    int64_t r = 1;
    for (Val e : s.extents) {
      auto x = eval_uniform(k, e, sizes);
      if (!x) return std::nullopt;
      r *= std::max<int64_t>(0, *x);
    }
    w.row = std::max(w.row, r);
  }
  return w;
}

constexpr int64_t kWarpRow = 4096;  // rows up to this long: a warp each

// Whether `k` can be a split reduction (KernelShape::split): Loops that only reduce (no arg
// reductions, no ordered fma, no stores), none reading what an earlier one reduced (layer_norm's
// variance reads its mean: no), between Code stmts (their stores run after every Loop, in the
// last block), and no buffer both read and written (a tile's last block writes while other tiles
// still read).
bool splittable(const Kernel& k) {
  if (k.two_level()) return false;
  const std::vector<char> after = after_reductions(k);
  int loops = 0;
  for (const Stmt& s : k.body) {
    if (s.kind != Stmt::Kind::Loop) continue;
    loops++;
    if (!s.stores.empty() || s.reductions.empty() || s.extents.empty()) return false;
    for (const lower::Reduction& r : s.reductions)
      if (r.op == ReduceOp::ArgMax || r.op == ReduceOp::ArgMin || r.ordered_fma) return false;
    for (Val v : s.body)
      if (after.at(v)) return false;
    for (Val e : s.extents)
      if (after.at(e)) return false;
  }
  for (const Instr& in : k.instrs)
    if (in.op == Opc::Load && k.buffers.at(in.a).written) return false;
  return loops > 0;
}

namespace {

// Whether the loads of `k`'s Loops step by 0 or 1 from one outer iteration (row) to the next, at
// least one by 1: neighbouring rows read neighbouring elements (sums over leading dims).
bool loads_step_across_rows(const Kernel& k) {
  std::vector<std::optional<std::optional<int64_t>>> memo(k.instrs.size());
  bool one = false;
  for (const Stmt& st : k.body) {
    if (st.kind != Stmt::Kind::Loop) continue;
    for (Val v : st.body) {
      const Instr& in = k.instrs.at(v);
      if (in.op != Opc::Load) continue;
      const std::optional<int64_t> s = inner_step(k, in.b, memo);
      if (!s || (*s != 0 && *s != 1)) return false;
      one |= *s == 1;
    }
  }
  return one;
}

}  // namespace

std::vector<KernelShape> plan_kernel(const Kernel& k, bool noalias) {
  KernelShape sh;
  sh.noalias = noalias;
  bool loops = false;
  for (const Stmt& s : k.body) loops |= s.kind == Stmt::Kind::Loop;
  std::optional<KernelWork> w = kernel_work(k, nullptr);
  if (w) sh.index32 = w->outer < (int64_t(1) << 31);
  if (!loops) {  // vector accesses, else unrolled, where it pays (large static sizes): it costs NVRTC time
    if (w && w->outer >= (int64_t(1) << 18) && !k.two_level()) {
      sh.vec = noalias ? vector_width(k) : 1;
      sh.unroll = sh.vec > 1 ? 1 : 4;
    }
    return {sh};
  }
  if (!w) {  // row length known only at launch: a warp per row, or a block per row for long rows
    KernelShape block = sh;
    sh.threads_per_row = 32;
    block.threads_per_row = block.block = 256;
    return {sh, block};
  }
  if (w->outer <= kSplitTile && w->row >= 16384 && w->outer * w->row >= (int64_t(1) << 20) && splittable(k)) {
    sh.split = (int)std::clamp<int64_t>(w->outer * w->row / (sh.block * 64), 1, kSplitBlocks);
    return {sh};
  }
  // Column sums (many rows whose loads step by one from row to row): a warp per row would read
  // one element per 32-byte sector. Tiles of kSplitTile rows, each thread ~16 iterations (H100s,
  // [2048, 768] summed over dim 1, device time with TC_CUDA_PROFILE: 7.6 us, against 12.8 for a
  // warp per column; ~8 iterations with the loop unrolled by 8 took 8.4 us on a faster H100).
  const int64_t tiles = (w->outer + kSplitTile - 1) / kSplitTile, per = sh.block / kSplitTile;
  if (w->outer > kSplitTile && tiles <= kSplitBlocks && w->row >= 64 && w->outer * w->row >= (int64_t(1) << 16) &&
      splittable(k) && loads_step_across_rows(k)) {
    const int64_t most = std::min({kSplitSlots / w->outer, kSplitBlocks / tiles, std::max<int64_t>(1, w->row / (per * 4))});
    sh.split = (int)(tiles * std::clamp<int64_t>(w->outer * w->row / (sh.block * 16) / tiles, 1, most));
    return {sh};
  }
  if (w->row <= 16) return {sh};
  if (w->row <= kWarpRow) {
    sh.threads_per_row = 32;
    return {sh};
  }
  sh.block = w->row >= 65536 || w->outer < 264 ? 1024 : 256;
  sh.threads_per_row = sh.block;
  return {sh};
}

int vector_width(const Kernel& k) {
  if (k.two_level() || k.outer.empty()) return 1;
  for (const Stmt& s : k.body)
    if (s.kind == Stmt::Kind::Loop) return 1;
  const VectorAccesses va = vector_accesses(k);
  if (va.loads.empty() && va.stores.empty()) return 1;
  int v = std::min(8, 16 / va.min_bytes);
  while (v > 1 && v * va.max_bytes > 32) v /= 2;
  if (k.outer.size() > 1) {  // the group must not cross a row of the innermost dim
    std::optional<int64_t> e = eval_uniform(k, k.outer.back(), nullptr);
    if (!e) return 1;
    while (v > 1 && *e % v != 0) v /= 2;
  }
  return v < 2 ? 1 : v;
}

int choose_shape(const std::vector<KernelShape>& shapes, const KernelWork& w) {
  return shapes.size() > 1 && !shapes[1].variant && w.row > kWarpRow ? 1 : 0;
}

bool checks_index_values(const Kernel& k) {
  for (const Instr& in : k.instrs)
    if (in.op == Opc::Math && in.sop == ScalarOp::flag_if) return true;
  return false;
}

}  // namespace tc::backends::cuda
