// Row-locality of a tiny graph's steps (cuda_tiny_rows.h): every index of a written buffer
// evaluated on the host for every iteration.
#include "cuda_tiny_rows.h"

#include <map>
#include <optional>
#include <string>

#include "cuda_codegen.h"

namespace tc::backends::cuda {

using lower::Buffer;
using lower::Instr;
using lower::Opc;
using lower::ScalarOp;
using lower::Stmt;
using lower::Ty;
using lower::Val;

namespace {

constexpr int64_t kMaxChecks = 1 << 20;  // index evaluations per graph before giving up (answer 0)

// Integer index values of one kernel at one outer (and loop) iteration; nullopt for what is not
// integer arithmetic on sizes and iteration variables (loads, accumulators, float math).
struct IndexEval {
  const lower::Kernel& k;
  const std::vector<int64_t>& sizes;
  std::vector<int64_t> outer, loop;

  std::optional<int64_t> at(Val v, int depth = 0) const {
    if (v < 0 || v >= (Val)k.instrs.size() || depth > 64) return std::nullopt;
    const Instr& in = k.instrs[v];
    if (in.ty == Ty::F32 || in.ty == Ty::F64) return std::nullopt;
    switch (in.op) {
      case Opc::ConstI: return in.i;
      case Opc::SizeParam:
        if (in.a < 0 || in.a >= (int)sizes.size()) return std::nullopt;
        return sizes[in.a];
      case Opc::OuterVar:
        if (in.a < 0 || in.a >= (int)outer.size()) return std::nullopt;
        return outer[in.a];
      case Opc::LoopVar:
        if (in.a < 0 || in.a >= (int)loop.size()) return std::nullopt;
        return loop[in.a];
      case Opc::Math: return math(in, depth);
      default: return std::nullopt;
    }
  }

  std::optional<int64_t> math(const Instr& in, int depth) const {
    auto a = at(in.a, depth + 1);
    if (!a) return std::nullopt;
    switch (in.sop) {
      case ScalarOp::neg: return -*a;
      case ScalarOp::abs: return *a < 0 ? -*a : *a;
      case ScalarOp::cast: return in.ty == Ty::Bool ? *a != 0 : *a;
      case ScalarOp::logical_not: return *a == 0;
      case ScalarOp::where: {
        auto b = at(in.b, depth + 1), c = at(in.c, depth + 1);
        if (!b || !c) return std::nullopt;
        return *a ? *b : *c;
      }
      default: break;
    }
    auto b = at(in.b, depth + 1);
    if (!b) return std::nullopt;
    switch (in.sop) {
      case ScalarOp::add: return *a + *b;
      case ScalarOp::sub: return *a - *b;
      case ScalarOp::mul: return *a * *b;
      case ScalarOp::div_trunc: return *b ? std::optional<int64_t>(*a / *b) : std::nullopt;
      case ScalarOp::div_floor: {
        if (!*b) return std::nullopt;
        int64_t q = *a / *b;
        if (*a % *b != 0 && ((*a < 0) != (*b < 0))) q--;
        return q;
      }
      case ScalarOp::mod: {
        if (!*b) return std::nullopt;
        int64_t r = *a % *b;
        if (r != 0 && ((r < 0) != (*b < 0))) r += *b;
        return r;
      }
      case ScalarOp::minimum: return std::min(*a, *b);
      case ScalarOp::maximum: return std::max(*a, *b);
      case ScalarOp::eq: return *a == *b;
      case ScalarOp::ne: return *a != *b;
      case ScalarOp::lt: return *a < *b;
      case ScalarOp::le: return *a <= *b;
      case ScalarOp::gt: return *a > *b;
      case ScalarOp::ge: return *a >= *b;
      case ScalarOp::logical_and: return *a && *b;
      case ScalarOp::logical_or: return *a || *b;
      default: return std::nullopt;
    }
  }
};

// The extents' product and each extent (nullopt when one is not known on the host).
std::optional<int64_t> extents(const lower::Kernel& k, const std::vector<Val>& vals, const std::vector<int64_t>& sizes,
                               std::vector<int64_t>* ext) {
  int64_t n = 1;
  for (Val e : vals) {
    auto x = eval_uniform(k, e, &sizes);
    if (!x) return std::nullopt;
    ext->push_back(std::max<int64_t>(0, *x));
    n *= ext->back();
  }
  return n;
}

// Flat iteration `i` as indices along `ext` (the last fastest).
void unflatten(int64_t i, const std::vector<int64_t>& ext, std::vector<int64_t>* idx) {
  idx->assign(ext.size(), 0);
  for (size_t d = ext.size(), r = (size_t)i; d-- > 0;) {
    (*idx)[d] = (int64_t)(r % (size_t)ext[d]);
    r /= (size_t)ext[d];
  }
}

// Whether every access of one launch to a written graph buffer (`written_param` per kernel
// buffer parameter) stays in the row of its outer iteration. `checks` counts evaluations.
bool launch_is_row_local(const lower::Kernel& k, const std::vector<int64_t>& sizes, const std::vector<bool>& written_param,
                         int64_t row, int64_t* checks) {
  if (k.two_level()) return false;
  for (Val v : k.preamble)
    if (k.instrs[v].op == Opc::Load) return false;
  IndexEval ev{k, sizes, {}, {}};
  std::vector<int64_t> ext;
  const std::optional<int64_t> n_outer = extents(k, k.outer, sizes, &ext);
  if (!n_outer) return false;
  // one iteration's accesses (the body's loads and the stmt's stores) in the row [lo, lo + row)
  auto accesses_ok = [&](const Stmt& st, int64_t lo) {
    auto in_row = [&](int param, Val index) {
      if (!written_param[param]) return true;
      ++*checks;
      auto e = ev.at(index);
      return e && *e >= lo && *e < lo + row;
    };
    for (Val v : st.body) {
      const Instr& in = k.instrs[v];
      if (in.op == Opc::Load && !in_row(in.a, in.b)) return false;
    }
    for (const lower::Store& s : st.stores)
      if (!in_row(s.buffer, s.index)) return false;
    return true;
  };
  for (int64_t f = 0; f < *n_outer; f++) {
    unflatten(f, ext, &ev.outer);
    const int64_t lo = f / row * row;
    for (const Stmt& st : k.body) {
      if (*checks > kMaxChecks) return false;
      if (st.kind == Stmt::Kind::Code) {
        ev.loop.clear();
        if (!accesses_ok(st, lo)) return false;
        continue;
      }
      std::vector<int64_t> lext;
      const std::optional<int64_t> n = extents(k, st.extents, sizes, &lext);
      if (!n) return false;
      for (int64_t i = 0; i < *n; i++) {
        unflatten(i, lext, &ev.loop);
        if (!accesses_ok(st, lo)) return false;
      }
    }
  }
  return true;
}

}  // namespace

int tiny_warp_row(const lower::LoweredGraph& g) {
  if (!g.symbols.empty() || g.steps.empty()) return 0;
  const std::vector<int64_t> none;
  // graph buffers some step writes
  std::vector<bool> written(g.buffers.size(), false);
  for (const lower::Step& s : g.steps) {
    if (s.kind != lower::Step::Kind::Launch) return 0;
    const lower::Kernel& k = g.kernels[s.launch.kernel];
    for (size_t j = 0; j < s.launch.buffers.size(); j++)
      if (k.buffers[j].written) written[s.launch.buffers[j]] = true;
  }
  // written graph inputs may alias other inputs; Temps sharing arena bytes must overlay exactly
  for (size_t b = 0; b < g.buffers.size(); b++) {
    const Buffer& x = g.buffers[b];
    if (written[b] && x.kind == Buffer::Kind::Input) return 0;
    if (x.kind != Buffer::Kind::Temp) continue;
    const int64_t xe = x.offset + x.numel.eval(none) * (int64_t)itemsize(x.dtype);
    for (size_t c = b + 1; c < g.buffers.size(); c++) {
      const Buffer& y = g.buffers[c];
      if (y.kind != Buffer::Kind::Temp || (!written[b] && !written[c])) continue;
      const int64_t ye = y.offset + y.numel.eval(none) * (int64_t)itemsize(y.dtype);
      const bool overlap = x.offset < ye && y.offset < xe;
      if (overlap && (x.offset != y.offset || itemsize(x.dtype) != itemsize(y.dtype))) return 0;
    }
  }
  // the row: the first step's innermost outer extent
  const lower::Step& first = g.steps[0];
  std::vector<int64_t> sizes0 = lower::eval_all(first.launch.sizes, none);
  const lower::Kernel& k0 = g.kernels[first.launch.kernel];
  if (k0.outer.empty()) return 0;
  auto row = eval_uniform(k0, k0.outer.back(), &sizes0);
  if (!row || *row < 1 || *row > 32) return 0;
  // each distinct (kernel, sizes, written parameters) once
  std::map<std::string, bool> seen;
  int64_t checks = 0;
  for (const lower::Step& s : g.steps) {
    std::vector<int64_t> sizes = lower::eval_all(s.launch.sizes, none);
    std::string key = std::to_string(s.launch.kernel);
    for (int64_t v : sizes) key += " " + std::to_string(v);
    std::vector<bool> wp;
    key += " |";
    for (int b : s.launch.buffers) {
      wp.push_back(written[b]);
      key += wp.back() ? "w" : "r";
    }
    auto [it, fresh] = seen.emplace(key, false);
    if (fresh) it->second = launch_is_row_local(g.kernels[s.launch.kernel], sizes, wp, *row, &checks);
    if (!it->second) return 0;
  }
  return (int)*row;
}

}  // namespace tc::backends::cuda
