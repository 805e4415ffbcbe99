// Scheduling: lowered values become kernels and externs. A value is computed where it is read
// (fused) unless it must be stored: graph outputs, extern operands, values read by several
// consumers whose recomputation is expensive, and reductions whose rows do not line up with the
// kernel reading them. A stored value's kernel loops over its outer dims; when the value is a
// broadcast of a reduction over the same rows (softmax, layer_norm), the kernel loops over the
// rows and computes the reductions, then the value, in loops over the reduced dims: one kernel.
#include <algorithm>
#include <set>

#include "lower_internal.h"
#include "tc/error.h"

namespace tc::lower {
namespace {

bool is_one(const SymInt& s) { return s.is_const() && s.const_value() == 1; }

struct NotFusable {};

constexpr int kMaxCost = 400;  // instructions of a lazy value before it is stored anyway
// buffers a lazy value with reductions in it reads before several readers get it stored
constexpr int kReduceLoads = 6;

SymInt numel(const std::vector<SymInt>& shape) {
  SymInt p = SymInt::of(1);
  for (const SymInt& s : shape) p = p * s;
  return p;
}

std::vector<SymInt> contiguous(const std::vector<SymInt>& shape) {
  std::vector<SymInt> st(shape.size());
  SymInt p = SymInt::of(1);
  for (size_t d = shape.size(); d-- > 0;) {
    st[d] = p;
    p = p * shape[d];
  }
  return st;
}

bool is_contiguous(const SymMeta& m) {
  if (!(m.offset == SymInt::of(0))) return false;
  std::vector<SymInt> st = contiguous(m.sizes);
  for (size_t d = 0; d < st.size(); d++)
    if (!is_one(m.sizes[d]) && !(st[d] == m.strides[d])) return false;
  return true;
}

}  // namespace

std::vector<SymInt> nhwc_layout(const std::vector<SymInt>& s) {
  return {s[1] * s[2] * s[3], SymInt::of(1), s[3] * s[1], s[1]};
}

bool nhwc_strides(const std::vector<SymInt>& shape, const std::vector<SymInt>& strides) {
  if (shape.size() != 4 || is_one(shape[1]) || (is_one(shape[2]) && is_one(shape[3]))) return false;
  const std::vector<SymInt> want = nhwc_layout(shape);
  for (int d = 0; d < 4; d++)
    if (!is_one(shape[d]) && !(strides[d] == want[d])) return false;
  return true;
}

Lowering::Lowering(const capture::Graph& before, const capture::Graph& graph, const Shapes& s,
                   const LowerOptions& o, LoweredGraph& out, const std::vector<int>& from)
    : g(graph), shapes(s), opt(o), lg(out), captured(before), origin(from) {}

int Lowering::add(LV v) {
  if (v.kind == LV::Kind::Lazy) {
    int64_t c = 1, l = 0;
    for (int d : v.deps) {
      if (lvs_[d].kind == LV::Kind::Lazy) c += lvs_[d].cost;
      l += lvs_[d].kind == LV::Kind::Lazy ? lvs_[d].loads : 1;
      v.has_reduce = v.has_reduce || lvs_[d].kind == LV::Kind::Reduce || (lvs_[d].kind == LV::Kind::Lazy && lvs_[d].has_reduce);
    }
    v.cost = int(std::min<int64_t>(c, 1 << 20));
    v.loads = int(std::min<int64_t>(l, 1 << 20));
  }
  if (opt.channels_last_call) {
    if (v.kind == LV::Kind::Buffer) v.channels_last = nhwc_strides(v.shape, v.strides);
    if (v.kind == LV::Kind::Reduce) v.channels_last = lvs_[v.input].channels_last;
    for (int d : v.deps) v.channels_last = v.channels_last || lvs_[d].channels_last;
  }
  lvs_.push_back(std::move(v));
  return int(lvs_.size()) - 1;
}

int Lowering::buffer_of(DType d, const SymInt& n, Buffer::Kind kind) {
  Buffer b;
  b.kind = kind;
  b.dtype = d;
  b.numel = n;
  lg.buffers.push_back(b);
  return int(lg.buffers.size()) - 1;
}

Val Lowering::emit(KernelBuilder& kb, int id, const Idx& idx) {
  const LV& v = lvs_[id];
  if (v.node >= 0 && std::find(kb.source_nodes.begin(), kb.source_nodes.end(), v.node) == kb.source_nodes.end())
    kb.source_nodes.push_back(v.node);
  switch (v.kind) {
    case LV::Kind::Buffer: {
      Val at = kb.size(v.offset);
      for (size_t d = 0; d < idx.size(); d++)
        at = kb.math(ScalarOp::add, at, kb.math(ScalarOp::mul, idx[d], kb.size(v.strides[d])));
      return kb.load(v.buffer, at);
    }
    case LV::Kind::Lazy: {
      // Read inside a loop, a value that computes reductions is stored first unless they all
      // fuse here (tried on a copy of the kernel): else its reductions would be stored alone and
      // its pointwise part recomputed per loop iteration.
      bool in_loop = false;
      for (Val x : idx) in_loop = in_loop || kb.level(x) == 2;
      if (v.has_reduce && in_loop && !kb.is_root(id) && !shallow_) {
        auto key = std::make_tuple(kb.roots[0], id, idx);
        auto it = fuses_.find(key);
        if (it == fuses_.end()) {
          KernelBuilder probe = kb;
          bool ok = true;
          dry_++;
          try {
            v.fn(probe, idx);
          } catch (const NotFusable&) {
            ok = false;
          } catch (...) {
            dry_--;
            throw;
          }
          dry_--;
          it = fuses_.emplace(key, ok).first;
        }
        if (!it->second) {
          if (dry_) throw NotFusable{};
          if (fuses_alone(id)) {
            realize(id);
            return emit(kb, id, idx);
          }
        }
      }
      return lvs_[id].fn(kb, idx);
    }
    case LV::Kind::Reduce:
      break;
  }
  // A reduction: fused when its kept index is exactly this kernel's outer index (the rows line
  // up), else stored by a kernel of its own.
  const LV& src = lvs_[v.input];
  Idx kept;
  std::vector<SymInt> kept_sizes;
  size_t o = 0;
  for (int d = 0; d < int(src.shape.size()); d++) {
    bool reduced = std::find(v.dims.begin(), v.dims.end(), d) != v.dims.end();
    if (reduced && v.keepdim) o++;
    if (reduced) continue;
    kept.push_back(idx[o++]);
    kept_sizes.push_back(src.shape[d]);
  }
  if (kb.final_mode()) return emit_outer_reduction(kb, id, idx);
  Idx rows;
  for (size_t k = 0; k < kept.size(); k++)
    if (!is_one(kept_sizes[k])) rows.push_back(kept[k]);
  // (a channels-last kernel's outer dims are N, H, W, C: the rows N, C, H, W in another order)
  bool fusable = int(rows.size()) == kb.num_outer();
  for (int k = 0; fusable && k < kb.num_outer(); k++)
    fusable = kb.channels_last ? std::find(rows.begin(), rows.end(), kb.outer(k)) != rows.end()
                               : rows[k] == kb.outer(k);
  if (!fusable) {
    if (dry_) throw NotFusable{};
    hint(v.node, "reduction stored by a kernel of its own: its rows do not line up with the kernel reading it");
    realize(id);
    return emit(kb, id, idx);
  }
  if (shallow_) return shallow_result(kb, v);  // fuses_alone checks only the rows of the reductions it reads directly
  auto key = std::make_pair(v.memo_id, rows);
  auto it = kb.memo.find(key);
  if (it == kb.memo.end()) {
    std::vector<SymInt> extents;
    for (int d : v.dims) extents.push_back(src.shape[d]);
    kb.open_loop(extents);
    Idx in(src.shape.size());
    size_t k = 0;
    Val lin = kb.ci(0);
    for (int d = 0; d < int(src.shape.size()); d++) {
      auto pos = std::find(v.dims.begin(), v.dims.end(), d);
      if (pos == v.dims.end()) {
        in[d] = kept[k++];
      } else {
        in[d] = kb.loop_var(int(pos - v.dims.begin()));
        lin = kb.math(ScalarOp::add, kb.math(ScalarOp::mul, lin, kb.size(src.shape[d])), in[d]);
      }
    }
    Val x = reduce_input(kb, v, emit(kb, v.input, in));
    bool arg = v.rop == ReduceOp::ArgMax || v.rop == ReduceOp::ArgMin;
    Val value = kNoVal;
    const Instr& xi = kb.instr(x);
    bool fma = v.blas_order && xi.op == Opc::Math && xi.sop == ScalarOp::mul;  // (else a folded product)
    Val r = kb.reduce(v.rop, x, arg ? lin : kNoVal, arg ? &value : nullptr, fma);
    kb.close_loop();
    it = kb.memo.emplace(key, std::make_pair(r, value)).first;
  }
  return v.take_value ? it->second.second : it->second.first;
}

// A reduction's input converted to what it accumulates: float sums and products in float64, as
// eager's kernels do (a tiny matmul's sum of products as eager's sgemm: ordered fused
// multiply-adds in the compute type), any/all as bool.
Val Lowering::reduce_input(KernelBuilder& kb, const LV& v, Val x) {
  if (v.rop == ReduceOp::Any || v.rop == ReduceOp::All) return kb.cast(x, Ty::Bool);
  if (v.rop == ReduceOp::ArgMax || v.rop == ReduceOp::ArgMin) return x;
  Ty acc = compute_type(v.dtype);
  if ((v.rop == ReduceOp::Sum || v.rop == ReduceOp::Prod) && acc == Ty::F32 && !v.blas_order) acc = Ty::F64;
  return kb.cast(x, acc);
}

// A zero of the type reduction `v` gives (fuses_alone's shallow emission).
Val Lowering::shallow_result(KernelBuilder& kb, const LV& v) {
  bool logical = v.rop == ReduceOp::Any || v.rop == ReduceOp::All;
  bool arg = (v.rop == ReduceOp::ArgMax || v.rop == ReduceOp::ArgMin) && !v.take_value;
  Ty t = logical ? Ty::Bool : arg ? Ty::I64 : compute_type(v.dtype);
  if ((v.rop == ReduceOp::Sum || v.rop == ReduceOp::Prod) && t == Ty::F32 && !v.blas_order) t = Ty::F64;
  return t == Ty::F32 || t == Ty::F64 ? kb.cf(0, t) : kb.ci(0, t);
}

// Whether reduction `v` can reduce over the outer iterations of a two-level kernel whose outer
// index space is `rows`: it reduces every dim of a value of that shape, with a reduction that
// combines in any order.
bool Lowering::outer_reducible(const LV& v, const std::vector<SymInt>& rows) const {
  if (v.kind != LV::Kind::Reduce || lvs_[v.input].shape != rows || v.blas_order || v.rop == ReduceOp::ArgMax ||
      v.rop == ReduceOp::ArgMin)
    return false;
  for (int d = 0; d < int(rows.size()); d++)
    if (!is_one(rows[d]) && std::find(v.dims.begin(), v.dims.end(), d) == v.dims.end()) return false;
  return true;
}

// In the final code of a two-level kernel: reduction `id` as an outer reduction (its input at the
// outer index), or, when it does not reduce the kernel's rows, stored by a kernel of its own.
Val Lowering::emit_outer_reduction(KernelBuilder& kb, int id, const Idx& idx) {
  const LV& v = lvs_[id];
  if (!outer_reducible(v, kb.outer_shape)) {
    if (dry_) throw NotFusable{};
    hint(v.node, "reduction stored by a kernel of its own: it does not reduce the rows of the kernel reading it");
    realize(id);
    return emit(kb, id, idx);
  }
  if (shallow_) return shallow_result(kb, v);
  auto key = std::make_pair(v.memo_id, Idx{});
  auto it = kb.memo.find(key);
  if (it != kb.memo.end()) return it->second.first;
  Idx in;
  int k = 0;
  for (const SymInt& s : kb.outer_shape) in.push_back(is_one(s) ? kb.ci(0) : kb.outer(k++));
  struct OuterLevel {  // the input is computed per outer iteration (also when emit throws)
    KernelBuilder& kb;
    explicit OuterLevel(KernelBuilder& b) : kb(b) { kb.set_final(false); }
    ~OuterLevel() { kb.set_final(true); }
  };
  Val x;
  {
    OuterLevel level(kb);
    x = reduce_input(kb, v, emit(kb, v.input, in));
  }
  Val r = kb.reduce_outer(v.rop, x);
  kb.memo.emplace(key, std::make_pair(r, kNoVal));
  return r;
}

// The rows of a two-level kernel for value `id` (empty: none). A value of one element computed
// from full reductions (sum, prod, max, min, any, all) of values of one shape, some of which
// compute row reductions themselves (cross_entropy's mean reads sum(loss) and sum(valid), loss[i]
// reads row i's logsumexp), loops over that shape's elements as its outer iterations (the row
// reductions fuse as Loops) and reduces across them: one kernel instead of one storing the
// per-row values and one reducing them. Only when every reduction fuses so (tried on a copy).
std::vector<SymInt> Lowering::two_level_rows(int id) {
  auto memo = two_level_.find(id);
  if (memo != two_level_.end()) return memo->second;
  std::vector<SymInt>& out = two_level_[id];
  const LV& v = lvs_[id];
  if (v.kind == LV::Kind::Buffer) return {};
  for (const SymInt& s : v.shape)
    if (!is_one(s)) return {};
  std::vector<int> reds;  // the reductions `id` reads directly
  find_reached(id, true, [&](int x, const LV& r) {
    if (r.kind == LV::Kind::Reduce) reds.push_back(x);
    return false;
  });
  if (reds.empty()) return {};
  const std::vector<SymInt> rows = lvs_[lvs_[reds[0]].input].shape;
  bool nested = false, empty = false, all_one = true;
  for (int r : reds) {
    if (!outer_reducible(lvs_[r], rows)) return {};
    const LV& in = lvs_[lvs_[r].input];
    nested = nested || in.kind == LV::Kind::Reduce || (in.kind == LV::Kind::Lazy && in.has_reduce);
  }
  for (const SymInt& s : rows) {
    empty = empty || (s.is_const() && s.const_value() == 0);
    all_one = all_one && is_one(s);
  }
  if (!nested || empty || all_one) return {};
  // Tried without a trace: the trial's fusion verdicts belong to its own kernel's values.
  std::map<std::tuple<int, int, Idx>, bool> saved = fuses_;
  Idx idx;
  KernelBuilder kb = two_level_kernel(id, rows, &idx);
  bool ok = false;
  try {
    ok = fuses_in(kb, id, idx, false);
  } catch (...) {
    fuses_ = std::move(saved);
    throw;
  }
  fuses_ = std::move(saved);
  if (ok) out = rows;
  return out;
}

KernelBuilder Lowering::two_level_kernel(int id, const std::vector<SymInt>& rows, Idx* idx) {
  std::vector<SymInt> outer;
  for (const SymInt& s : rows)
    if (!is_one(s)) outer.push_back(s);
  KernelBuilder kb(lg, outer);
  kb.roots = {id};
  kb.outer_shape = rows;
  kb.set_final(true);
  idx->assign(lvs_[id].shape.size(), kb.ci(0));
  return kb;
}

// A reduction whose input has the value's shape, reached through lazy values: the rows the
// value's kernel should loop over (-1: none; the kernel loops over every dim of the value).
int Lowering::find_row_reduction(int id) {
  const std::vector<SymInt>& shape = lvs_[id].shape;
  return find_reached(id, true, [&](int x, const LV& v) {
    if (v.kind != LV::Kind::Reduce || x == id) return false;
    bool rows_left = false;
    for (int d = 0; d < int(shape.size()); d++)
      if (std::find(v.dims.begin(), v.dims.end(), d) == v.dims.end() && !is_one(shape[d])) rows_left = true;
    return lvs_[v.input].shape == shape && rows_left;
  });
}

// The kernel that stores value `id`: its outer dims, and a loop over the rows' reduced dims when
// the value broadcasts a reduction over the same rows. Sets `idx` to the value's index.
// The reduced dims a kernel storing `id` loops over (empty: none; see find_row_reduction).
std::vector<int> Lowering::loop_dims_of(int id) {
  const std::vector<SymInt>& shape = lvs_[id].shape;
  int row = find_row_reduction(id);
  std::vector<int> loop_dims;
  if (row >= 0)
    for (int d : lvs_[row].dims)
      if (!is_one(shape[d])) loop_dims.push_back(d);
  return loop_dims;
}

// Whether value `id`, when stored, is stored channels-last: it reads a channels-last buffer, is
// 4-D with more than one channel and pixel, and its kernel has no row loops.
bool Lowering::stores_channels_last(int id) {
  const LV& v = lvs_[id];
  return opt.channels_last_call && v.channels_last && v.kind != LV::Kind::Buffer &&
         v.shape.size() == 4 && !is_one(v.shape[1]) &&
         !(is_one(v.shape[2]) && is_one(v.shape[3])) && loop_dims_of(id).empty();
}

// `channels_last`: the outer dims in memory order N, H, W, C (stores_channels_last), so that
// neighbouring threads write neighbouring channels.
KernelBuilder Lowering::root_kernel(int id, Idx* idx, bool channels_last) {
  if (std::vector<SymInt> rows = two_level_rows(id); !rows.empty()) return two_level_kernel(id, rows, idx);
  const std::vector<SymInt>& shape = lvs_[id].shape;
  std::vector<int> loop_dims = loop_dims_of(id);
  std::vector<SymInt> outer, loop;
  std::vector<int> where(shape.size(), -1);  // >= 0: outer dim; <= -2: loop dim
  std::vector<int> order;
  for (int d = 0; d < int(shape.size()); d++) order.push_back(d);
  if (channels_last) order = {0, 2, 3, 1};
  for (int d : order) {
    if (is_one(shape[d])) continue;
    if (std::find(loop_dims.begin(), loop_dims.end(), d) != loop_dims.end()) {
      where[d] = -2 - int(loop.size());
      loop.push_back(shape[d]);
    } else {
      where[d] = int(outer.size());
      outer.push_back(shape[d]);
    }
  }
  KernelBuilder kb(lg, outer);
  kb.roots = {id};
  kb.channels_last = channels_last;
  if (!loop.empty()) kb.open_loop(loop);
  idx->resize(shape.size());
  for (int d = 0; d < int(shape.size()); d++)
    (*idx)[d] = where[d] >= 0 ? kb.outer(where[d]) : where[d] == -1 ? kb.ci(0) : kb.loop_var(-2 - where[d]);
  return kb;
}

// Whether every reduction value `id` reads fuses into the kernel that would store it.
bool Lowering::fuses_alone(int id) {
  Idx idx;
  KernelBuilder kb = root_kernel(id, &idx, stores_channels_last(id));
  return fuses_in(kb, id, idx, true);
}

// Emits `id` into `kb` as a trial (a reduction that cannot fuse throws NotFusable instead of being
// stored; `shallow`: reductions are not expanded): whether it all fused.
bool Lowering::fuses_in(KernelBuilder& kb, int id, const Idx& idx, bool shallow) {
  struct Trial {
    int &dry, &shallow;
    bool s;
    Trial(int& d, int& sh, bool on) : dry(d), shallow(sh), s(on) { dry++, shallow += s; }
    ~Trial() { dry--, shallow -= s; }
  } trial(dry_, shallow_, shallow);
  try {
    emit(kb, id, idx);
  } catch (const NotFusable&) {
    return false;
  }
  return true;
}

void Lowering::push_kernel(KernelBuilder& kb) {
  Step step;
  Kernel k = kb.finish(&step.launch.buffers, &step.launch.sizes);
  std::string names;
  for (int n : k.source_nodes)
    if (names.size() < 40 && g.nodes[n].kind == capture::NodeKind::Op) names += std::string("_") + op_name(g.nodes[n].op);
  k.name = "k" + std::to_string(lg.kernels.size()) + names;
  for (int n : k.source_nodes) k.source_lines.push_back(g.nodes[n].line);
  lg.num_fused_nodes += int(k.source_nodes.size());
  for (int& n : k.source_nodes) n = origin[n];
  step.launch.kernel = int(lg.kernels.size());
  lg.kernels.push_back(std::move(k));
  lg.steps.push_back(std::move(step));
}

int Lowering::find_reached(int id, bool stop_at_reductions,
                           const std::function<bool(int, const LV&)>& hit) {
  std::set<int> seen;
  std::vector<int> stack = {id};
  while (!stack.empty()) {
    int x = stack.back();
    stack.pop_back();
    if (!seen.insert(x).second) continue;
    const LV& v = lvs_[x];
    if (hit(x, v)) return x;
    if (v.kind == LV::Kind::Lazy) stack.insert(stack.end(), v.deps.begin(), v.deps.end());
    if (v.kind == LV::Kind::Reduce && !stop_at_reductions) stack.push_back(v.input);
  }
  return -1;
}

// Whether value `id` reads buffer `b` (through lazy values and reductions).
bool Lowering::reads(int id, int b) {
  return find_reached(id, false, [b](int, const LV& v) { return v.kind == LV::Kind::Buffer && v.buffer == b; }) >= 0;
}

void Lowering::before_write(int b) {
  // Graph inputs may share memory (an upvalue and an argument holding one tensor): a write into
  // one is a write into every input for the values computed before it.
  const bool input = lg.buffers[b].kind == Buffer::Kind::Input;
  auto written = [&](int, const LV& v) {
    return v.kind == LV::Kind::Buffer && (v.buffer == b || (input && lg.buffers[v.buffer].kind == Buffer::Kind::Input));
  };
  for (const auto& [key, id] : value_of_)
    if (lvs_[id].kind != LV::Kind::Buffer && find_reached(id, false, written) >= 0) realize(id);
}

int Lowering::realize(int id, bool as_output) {
  realize_all({id}, as_output);
  return lvs_[id].buffer;
}

// Stores values of one shape and one row structure with one kernel (max_dim's values and
// indices, var_mean, several outputs of a graph).
void Lowering::realize_all(const std::vector<int>& ids, bool as_output) {
  if (lvs_[ids[0]].kind == LV::Kind::Buffer && ids.size() == 1) return;
  const std::vector<SymInt> shape = lvs_[ids[0]].shape;
  Idx idx;
  const bool channels_last = !as_output && stores_channels_last(ids[0]);
  KernelBuilder kb = root_kernel(ids[0], &idx, channels_last);
  kb.roots = ids;
  const std::vector<SymInt> st = channels_last ? nhwc_layout(shape) : contiguous(shape);
  std::vector<std::pair<int, int>> stored;  // (value, buffer)
  for (int id : ids) {
    if (lvs_[id].kind == LV::Kind::Buffer) continue;  // stored meanwhile (or twice in `ids`)
    Val v = emit(kb, id, idx);
    if (lvs_[id].kind == LV::Kind::Buffer) continue;
    int buf = buffer_of(lvs_[id].dtype, numel(shape), as_output ? Buffer::Kind::Output : Buffer::Kind::Temp);
    Val at = kb.ci(0);
    for (size_t d = 0; d < shape.size(); d++)
      at = kb.math(ScalarOp::add, at, kb.math(ScalarOp::mul, idx[d], kb.size(st[d])));
    kb.store(buf, at, v);
    stored.push_back({id, buf});
  }
  if (kb.open_loops()) kb.close_loop();
  if (stored.empty()) return;
  push_kernel(kb);
  for (auto [id, buf] : stored) {
    LV& out = lvs_[id];
    out.kind = LV::Kind::Buffer;
    out.buffer = buf;
    out.offset = SymInt::of(0);
    out.strides = st;
    out.fake = nullptr;
    out.fn = nullptr;
    out.channels_last = channels_last;
    if (out.node >= 0 && !channels_last)
      for (const SymMeta& m : shapes.of_node[out.node])
        if (m.sizes == shape && m.dtype == out.dtype && is_contiguous(m)) out.fake = &m;
  }
}

// Index values are data: a kernel cannot raise eager's IndexError for one out of range (it clamps
// them for memory safety). So an index_select/gather/embedding is generated only behind a check:
// on a runner with device checks (LowerOptions::device_checks), `flag` gets an IndexCheck that the
// kernels reading the indices flag (flag_index); otherwise a step runs the eager op on a stand-in
// for its source (no data for index_select and embedding) and raises what eager raises. False
// when neither is possible (the runner calls no functions, dynamic sizes): the op is then an
// extern. `data` is the indexed value's shape.
bool Lowering::check_indices(int n, const std::vector<SymInt>& data, IndexFlag* flag) {
  const capture::Node& node = g.nodes[n];
  const capture::Node& from = captured.nodes[origin[n]];
  const int src_arg = 0, index_arg = node.op == Op::embedding ? 0 : 2;
  const int data_arg = node.op == Op::embedding ? 1 : src_arg;
  Stack args;
  for (const capture::NodeArg& a : node.args)
    args.push_back(a.kind == capture::NodeArg::Kind::Const ? a.constant : Value(g.fake(a.refs[0])));
  const Tensor& fake = g.fake(node.args[data_arg].refs[0]);
  const int64_t dim = node.op == Op::embedding ? 0 : wrap_dim(args[1].to_int(), fake.dim());
  Op op = node.op;
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = std::string("index check of ") + op_name(op);
  if (from.kind == capture::NodeKind::Op && (from.op == Op::nll_loss || from.op == Op::cross_entropy) &&
      node.op == Op::gather && from.args.size() > 4 && from.args[4].kind == capture::NodeArg::Kind::Const &&
      (opt.externals || opt.device_checks)) {
    // The gather of the class targets that nll_loss and cross_entropy decompose into (its indices
    // are the targets themselves, the kernel clamps them): checked with eager's rule and message,
    // ignore_index passing.
    const int64_t ignore = from.args[4].constant.to_int();
    const SymInt classes = data[dim];
    const char* name = op_name(from.op);
    auto bad_target = [name](int64_t t, int64_t classes) {
      TC_FAIL(IndexError, "%s(): target %lld is out of bounds (targets are 1-based, %lld classes)", name,
              (long long)t, (long long)classes);
    };
    if (opt.device_checks) {
      *flag = {add_index_check(n, [bad_target, classes](int64_t t, const std::vector<int64_t>& syms, Device) {
                 bad_target(t, classes.eval(syms));
               }),
               true, ignore};
      return true;
    }
    const int64_t c = fake.sizes()[dim];
    fn->call = [ignore, c, bad_target](const Stack& in) {
      Tensor t = in[0].tensor().contiguous();
      const int64_t* p = t.data<int64_t>();
      for (int64_t i = 0; i < t.numel(); i++)
        if (p[i] != ignore && (p[i] < 1 || p[i] > c)) bad_target(p[i], c);
      return std::vector<Tensor>{in[0].tensor()};
    };
  } else if (from.kind == capture::NodeKind::Op && from.op != node.op) {
    // (nll_loss's and cross_entropy's class weights at the targets: the targets' gather checks them)
    if (from.op != Op::nll_loss && from.op != Op::cross_entropy)
      hint(n, "indices made by a decomposition are not range-checked (out-of-range ones read a clamped element)");
    return true;
  } else if (opt.device_checks) {
    // The eager op on the device, on a stand-in for its source (size 1 in the other dims) and the
    // one offending value, raises eager's error for it.
    const DType dt = fake.dtype();
    const int rank = int(data.size());
    *flag = {add_index_check(n, [op, args, index_arg, data_arg, data, dim, dt, rank](
                                    int64_t v, const std::vector<int64_t>& syms, Device device) {
      Shape stand_in(rank, 1), index_shape(op == Op::gather ? rank : 1, 1);
      stand_in[dim] = data[dim].eval(syms);
      Stack a = args;
      Tensor index = Tensor::empty(index_shape, DType::Int64, device);
      index.copy_from(Tensor::scalar_int(v));
      a[data_arg] = Tensor::empty(stand_in, dt, device);
      a[index_arg] = index;
      call(op, a);
    })};
    return true;
  } else {
    if (!opt.externals || !g.dynamic_dims.empty()) return false;
    Shape stand_in = fake.sizes();
    if (node.op == Op::embedding) stand_in = {stand_in[0], 0};
    if (node.op == Op::index_select)
      for (int64_t d = 0; d < int64_t(stand_in.size()); d++)
        if (d != dim) stand_in[d] = 0;
    DType dt = fake.dtype();
    fn->call = [op, args, index_arg, data_arg, stand_in, dt](const Stack& in) {
      Stack a = args;
      a[index_arg] = in[0];
      a[data_arg] = Tensor::empty(stand_in, dt);
      call(op, a);
      return std::vector<Tensor>{in[0].tensor()};
    };
  }
  const capture::Ref& r = node.args[index_arg].refs[0];
  add_check(n, value_of_.at({r.node, r.elem >= 0 ? r.elem : r.out}), std::move(fn));
  return true;
}

// A device check of node n's index values (LoweredGraph::index_checks): its number for flag_if.
int Lowering::add_index_check(int n, std::function<void(int64_t, const std::vector<int64_t>&, Device)> raise) {
  lg.index_checks.push_back({origin[n], std::move(raise)});
  return int(lg.index_checks.size());
}

// A step that runs `fn` on value `id` (realized into a buffer first) before the kernels reading it:
// its error is node n's error, at the user's line.
void Lowering::add_check(int n, int id, std::shared_ptr<capture::ExternalFn> fn) {
  realize(id);
  const LV& v = lvs_[id];
  Step step;
  step.kind = Step::Kind::Extern;
  step.ext.op = g.nodes[n].op;
  step.ext.node = origin[n];
  step.ext.external = std::move(fn);
  step.ext.inputs = {{v.buffer, v.offset, v.shape, v.strides}};
  step.ext.output = step.ext.inputs[0];  // the value itself: checked, not written
  step.ext.arg_kinds = {Extern::kTensorArg};
  lg.steps.push_back(std::move(step));
}

// Integer division by zero: generated code cannot raise (it gives 0), eager raises ZeroDivisionError
// before computing. So the divisor `id` of an integer division is checked by a step first, with
// eager's error. False when that is not possible (the runner calls no functions): an extern then.
bool Lowering::check_divisor(int n, int id) {
  if (!opt.externals) return false;
  auto fn = std::make_shared<capture::ExternalFn>();
  fn->name = std::string("zero check of ") + op_name(g.nodes[n].op) + "'s divisor";
  fn->call = [](const Stack& in) {
    Tensor d = in[0].tensor().to(DType::Int64).contiguous();
    const int64_t* p = d.data<int64_t>();
    for (int64_t i = 0; i < d.numel(); i++) TC_CHECK(p[i] != 0, ValueError, "ZeroDivisionError");
    return std::vector<Tensor>{in[0].tensor()};
  };
  add_check(n, id, std::move(fn));
  return true;
}

void Lowering::hint(int n, const std::string& what) {
  const capture::Node& node = g.nodes[n];
  std::string h = (node.line >= 0 ? "line " + std::to_string(node.line) + ": " : "") + node.target() + " (" + node.name + "): " + what;
  if (std::find(lg.perf_hints.begin(), lg.perf_hints.end(), h) == lg.perf_hints.end()) lg.perf_hints.push_back(h);
}

std::vector<int> Lowering::add_extern(int n, bool fallback) {
  const capture::Node& node = g.nodes[n];
  if (fallback) hint(n, "runs on its eager kernel (not generated)");
  Step step;
  step.kind = Step::Kind::Extern;
  Extern& e = step.ext;
  e.op = node.op;
  e.node = origin[n];
  e.fallback = fallback;
  if (node.kind == capture::NodeKind::External) e.external = node.ext;
  bool reads_channels_last = false;
  auto value = [&](capture::Ref r) { return value_of_.at({r.node, r.elem >= 0 ? r.elem : r.out}); };
  for (size_t i = 0; i < node.args.size(); i++) {
    const capture::NodeArg& a = node.args[i];
    if (a.kind == capture::NodeArg::Kind::Const) {
      e.constants.push_back(a.constant);
      e.arg_kinds.push_back(Extern::kConstArg);
      continue;
    }
    for (capture::Ref r : a.refs) {
      int id = value(r);
      realize(id);
      if (node.kind == capture::NodeKind::Op && schema(node.op).args[i].mutated) before_write(lvs_[id].buffer);
      const LV& v = lvs_[id];
      e.inputs.push_back({v.buffer, v.offset, v.shape, v.strides});
      reads_channels_last = reads_channels_last || v.channels_last;
    }
    e.arg_kinds.push_back(a.kind == capture::NodeArg::Kind::Ref ? Extern::kTensorArg : int(a.refs.size()));
  }
  // A call writing its result channels-last instead (LowerOptions::channels_last_call).
  std::shared_ptr<const capture::ExternalFn> nhwc_call;
  if (opt.channels_last_call && shapes.of_node[n].size() == 1 &&
      shapes.of_node[n][0].sizes.size() == 4 &&
      (nhwc_call = opt.channels_last_call(node, reads_channels_last))) {
    e.external = nhwc_call;
    e.fallback = false;
  }
  // Outputs that view an input (in-place ops return their `self`) are that input's view.
  Metas metas;
  if (node.kind == capture::NodeKind::Op) {
    Stack fake_args;
    for (const capture::NodeArg& a : node.args) {
      if (a.kind == capture::NodeArg::Kind::Const) fake_args.push_back(a.constant);
      if (a.kind == capture::NodeArg::Kind::Ref) fake_args.push_back(g.fake(a.refs[0]));
      if (a.kind == capture::NodeArg::Kind::RefList) {
        TensorList l;
        for (capture::Ref r : a.refs) l.push_back(g.fake(r));
        fake_args.push_back(std::move(l));
      }
    }
    metas = infer_meta(node.op, fake_args);
  }
  std::vector<int> ids;
  for (const Value& f : node.fakes)
    TC_CHECK(f.is_tensor(), NotImplementedError, "lowering: %s returns a tensor list", node.target());
  for (size_t k = 0; k < shapes.of_node[n].size(); k++) {
    const SymMeta& m = shapes.of_node[n][k];
    if (k < metas.size() && metas[k].view_of >= 0) {
      const capture::NodeArg& a = node.args[metas[k].view_of];
      int src = value(a.refs[0]);
      LV v = lvs_[src];
      v.node = n;
      (k == 0 ? e.output : e.more_outputs.emplace_back()) = BufferView{v.buffer, v.offset, v.shape, v.strides};
      ids.push_back(add(std::move(v)));
      continue;
    }
    LV v;
    v.kind = LV::Kind::Buffer;
    v.dtype = m.dtype;
    v.shape = m.sizes;
    v.node = n;
    v.buffer = buffer_of(m.dtype, numel(m.sizes), Buffer::Kind::Temp);
    v.offset = SymInt::of(0);
    // (channels-last from such a call: the graph's metas, and so views of it, are contiguous)
    v.strides = nhwc_call ? nhwc_layout(m.sizes) : contiguous(m.sizes);
    if (!nhwc_call && is_contiguous(m)) v.fake = &m;
    BufferView out{v.buffer, v.offset, v.shape, v.strides};
    (k == 0 ? e.output : e.more_outputs.emplace_back()) = out;
    ids.push_back(add(std::move(v)));
  }
  lg.steps.push_back(std::move(step));
  return ids;
}

void Lowering::lower_node(int n) {
  const capture::Node& node = g.nodes[n];
  for (const Value& f : node.fakes) {
    const Tensor& t = f.is_tensor() ? f.tensor() : f.tensors().empty() ? Tensor() : f.tensors()[0];
    TC_CHECK(!t.defined() || t.device().type == opt.device, NotImplementedError, "lowering: tensors on %s",
             t.device().str().c_str());
  }
  TC_CHECK(node.kind != capture::NodeKind::External || opt.externals || opt.library_externals, NotImplementedError,
           "lowering: the function %s kept in the graph", node.target());
  std::vector<int> ids =
      node.kind == capture::NodeKind::External ? add_extern(n, !opt.library_externals) : lower_op(n);
  if (store_[n])
    for (int id : ids) realize(id);
  for (size_t k = 0; k < ids.size(); k++) {
    value_of_[{n, int(k)}] = ids[k];
    LV& v = lvs_[ids[k]];
    // Read by several consumers: stored when recomputing it is expensive. Values that compute
    // reductions (softmax's exp(x - max), layer_norm's x - mean) are read within their row
    // kernel and stay lazy, unless they read more than kReduceLoads buffers: a gradient summed
    // along a residual stream (a layer's norm backward plus the gradient of the layers after it)
    // would otherwise be recomputed in each reader, from every later layer's buffers (GPT-2
    // small's backward: kernels growing from 65 to 290 us, layer after layer, on an H200).
    if (uses_[n] > 1 && v.kind == LV::Kind::Lazy &&
        (v.has_reduce ? v.loads > kReduceLoads : v.cost > opt.realize_cost || v.loads > opt.realize_loads))
      realize(ids[k]);
    // Kernels stay a readable size (and emission's recursion shallow).
    else if (v.kind == LV::Kind::Lazy && v.cost > kMaxCost)
      realize(ids[k]);
  }
}

void Lowering::run() {
  uses_.assign(g.nodes.size(), 0);
  is_output_.assign(g.nodes.size(), false);
  for (const capture::Node& node : g.nodes)
    for (const capture::NodeArg& a : node.args)
      for (capture::Ref r : a.refs) uses_[r.node]++;
  for (capture::Ref r : g.outputs) is_output_[r.node] = true;
  store_.assign(g.nodes.size(), false);
  auto store_base = [&](int m) {  // back through views to the base
    while (true) {
      store_[m] = true;
      const capture::Node& v = g.nodes[m];
      if (v.kind != capture::NodeKind::Op || schema(v.op).kind != OpKind::View || v.args.empty() ||
          v.args[0].kind != capture::NodeArg::Kind::Ref)
        return;
      m = v.args[0].refs[0].node;
    }
  };
  for (int n = 0; n < int(g.nodes.size()); n++) {
    const capture::Node& node = g.nodes[n];
    if (node.kind != capture::NodeKind::Op) continue;
    const OpSchema& sc = schema(node.op);
    bool gemm = sc.kind == OpKind::Contraction && !tiny_matmul(g, n, opt);
    for (size_t i = 0; i < node.args.size() && i < sc.args.size(); i++)
      if ((sc.args[i].mutated || gemm) && node.args[i].kind == capture::NodeArg::Kind::Ref)
        store_base(node.args[i].refs[0].node);
      else if (sc.args[i].mutated && node.args[i].kind == capture::NodeArg::Kind::RefList)  // Tensor[]!
        for (capture::Ref r : node.args[i].refs) store_base(r.node);
  }
  // A graph output that views another value is returned as a view of it (eager's aliasing: a
  // write into one is seen by the other, also across the partitions of a graph).
  for (capture::Ref r : g.outputs)
    if (g.nodes[r.node].kind == capture::NodeKind::Op && schema(g.nodes[r.node].op).kind == OpKind::View)
      store_base(r.node);
  for (size_t k = 0; k < g.dynamic_dims.size(); k++) {
    auto [input, dim] = g.dynamic_dims[k];
    int sym = shapes.symbol_of[k];
    if (sym == int(lg.symbols.size())) lg.symbols.push_back({input, dim});
    else lg.tied.push_back({input, dim, sym});
  }

  for (int n = 0; n < int(g.nodes.size()); n++) {
    const capture::Node& node = g.nodes[n];
    if (node.kind != capture::NodeKind::Input) {
      lower_node(n);
      continue;
    }
    const SymMeta& m = shapes.of_node[n][0];
    SymInt extent = SymInt::of(1);
    bool empty = false;
    for (size_t d = 0; d < m.sizes.size(); d++) {
      empty = empty || (m.sizes[d].is_const() && m.sizes[d].const_value() == 0);
      extent = extent + (m.sizes[d] + SymInt::of(-1)) * m.strides[d];
    }
    LV v;
    v.kind = LV::Kind::Buffer;
    v.dtype = m.dtype;
    v.shape = m.sizes;
    v.buffer = buffer_of(m.dtype, empty ? SymInt::of(0) : extent, Buffer::Kind::Input);
    lg.buffers[v.buffer].io = int(std::find(g.inputs.begin(), g.inputs.end(), n) - g.inputs.begin());
    v.offset = SymInt::of(0);
    v.strides = m.strides;
    v.fake = &m;
    value_of_[{n, 0}] = add(std::move(v));
  }
  // A call's channels-last result (a convolution's, LowerOptions::channels_last_call) returned as
  // it is: stored contiguous by a kernel, as eager returns it (the caller may view it).
  for (capture::Ref r : g.outputs) {
    const std::pair<int, int> key = {r.node, r.elem >= 0 ? r.elem : r.out};
    const int id = value_of_.at(key);
    const LV& s = lvs_[id];
    if (s.kind != LV::Kind::Buffer || !s.channels_last || lg.buffers[s.buffer].kind != Buffer::Kind::Temp) continue;
    LV v;
    v.dtype = s.dtype;
    v.shape = s.shape;
    v.node = s.node;
    v.deps = {id};
    v.fn = [this, id](KernelBuilder& kb, const Idx& idx) { return emit(kb, id, idx); };
    value_of_[key] = add(std::move(v));
  }
  // Outputs of one shape and row structure share a kernel.
  std::vector<int> pending;
  for (capture::Ref r : g.outputs) {
    int id = value_of_.at({r.node, r.elem >= 0 ? r.elem : r.out});
    if (lvs_[id].kind != LV::Kind::Buffer && std::find(pending.begin(), pending.end(), id) == pending.end())
      pending.push_back(id);
  }
  std::vector<bool> grouped(pending.size(), false);
  for (size_t i = 0; i < pending.size(); i++) {
    if (grouped[i]) continue;
    std::vector<int> group = {pending[i]};
    std::vector<int> dims = loop_dims_of(pending[i]);
    for (size_t j = i + 1; j < pending.size(); j++)
      if (!grouped[j] && lvs_[pending[j]].shape == lvs_[pending[i]].shape && loop_dims_of(pending[j]) == dims) {
        grouped[j] = true;
        group.push_back(pending[j]);
      }
    realize_all(group, true);
  }
  for (int i = 0; i < int(g.outputs.size()); i++) {
    capture::Ref r = g.outputs[i];
    int id = value_of_.at({r.node, r.elem >= 0 ? r.elem : r.out});
    realize(id, true);
    const LV& v = lvs_[id];
    Buffer& b = lg.buffers[v.buffer];
    if (b.kind == Buffer::Kind::Temp) b.kind = Buffer::Kind::Output;
    if (b.kind == Buffer::Kind::Output && b.io < 0) b.io = i;
    lg.outputs.push_back({v.buffer, v.offset, v.shape, v.strides});
  }
}

}  // namespace tc::lower
