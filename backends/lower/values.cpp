// Every op of ops.def as a lowered value: pointwise code, views and data movement as index
// arithmetic, reductions, creation; contractions and what lowering cannot generate become
// Externs. One switch with no default (STYLE 1): a new op must be placed here. The file is long
// because the switch covers every op of ops.def; its helpers sit above it.
#include <cmath>
#include <numeric>

#include "lower_internal.h"
#include "pointwise.h"
#include "tc/error.h"

namespace tc::lower {
namespace {

using Map = std::function<Idx(KernelBuilder&, const Idx&)>;

bool is_one(const SymInt& s) { return s.is_const() && s.const_value() == 1; }

std::vector<int> dim_list(const Value& v, int64_t rank) {
  std::vector<int> dims;
  if (v.is_none()) {
    for (int d = 0; d < rank; d++) dims.push_back(d);
  } else if (v.is_int_list()) {
    for (int64_t d : v.ints()) dims.push_back(int(wrap_dim(d, rank)));
  } else {
    dims.push_back(int(wrap_dim(v.to_int(), rank)));
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// Index of an input of shape `in` read by an output of shape `out` that it broadcasts to.
Idx broadcast(KernelBuilder& kb, const Idx& idx, const std::vector<SymInt>& in) {
  size_t lead = idx.size() - in.size();
  Idx r(in.size());
  for (size_t j = 0; j < in.size(); j++) r[j] = is_one(in[j]) ? kb.ci(0) : idx[lead + j];
  return r;
}

// Index map of a reshape: dims are matched in groups of equal products; a group of one dim on
// both sides maps directly, others go through the group's linear index.
Idx reshape_index(KernelBuilder& kb, const Idx& idx, const std::vector<SymInt>& out, const std::vector<SymInt>& in) {
  Idx r(in.size(), kNoVal);
  size_t i = 0, o = 0;
  auto skip_ones = [&]() {
    while (i < in.size() && is_one(in[i])) r[i++] = kb.ci(0);
    while (o < out.size() && is_one(out[o])) o++;
  };
  skip_ones();
  while (i < in.size() || o < out.size()) {
    size_t i0 = i, o0 = o;
    if (i < in.size() && o < out.size() && in[i] == out[o]) {
      r[i++] = idx[o++];
    } else {
      // Grow the group until the products agree (static sizes; symbolic sizes must match 1:1).
      SymInt pi = i < in.size() ? in[i++] : SymInt::of(1), po = o < out.size() ? out[o++] : SymInt::of(1);
      while (!(pi == po)) {
        TC_CHECK(pi.is_const() && po.is_const(), NotImplementedError, "lowering: reshape that merges dynamic dims");
        if (pi.const_value() < po.const_value() && i < in.size()) pi = pi * in[i++];
        else if (o < out.size()) po = po * out[o++];
        else TC_FAIL(NotImplementedError, "lowering: reshape groups do not line up");
      }
      Val lin = kb.ci(0);
      for (size_t k = o0; k < o; k++) lin = kb.math(ScalarOp::add, kb.math(ScalarOp::mul, lin, kb.size(out[k])), idx[k]);
      for (size_t k = i; k-- > i0;) {
        r[k] = kb.math(ScalarOp::mod, lin, kb.size(in[k]));
        lin = kb.math(ScalarOp::div_floor, lin, kb.size(in[k]));
      }
    }
    skip_ones();
  }
  for (Val& v : r)
    if (v == kNoVal) v = kb.ci(0);
  return r;
}

Val clamp_index(KernelBuilder& kb, Val i, const SymInt& size) {
  Val hi = kb.math(ScalarOp::sub, kb.size(size), kb.ci(1));
  return kb.math(ScalarOp::maximum, kb.math(ScalarOp::minimum, i, hi), kb.ci(0));
}

// `at`, a 1-based index value into a dim of `size`, flagged on the device when out of range
// (flag.ignore passing) for a runner with device checks.
Val flag_index(KernelBuilder& kb, Val at, const SymInt& size, const IndexFlag& flag) {
  if (!flag.id) return at;
  Val bad = kb.math(ScalarOp::logical_or, kb.math(ScalarOp::lt, at, kb.ci(1)), kb.math(ScalarOp::gt, at, kb.size(size)));
  if (flag.has_ignore) bad = kb.math(ScalarOp::logical_and, bad, kb.math(ScalarOp::ne, at, kb.ci(flag.ignore)));
  return kb.math(ScalarOp::flag_if, at, bad, kb.ci(flag.id));
}

int64_t static_size(const SymInt& s, const char* what) {
  TC_CHECK(s.is_const(), NotImplementedError, "lowering: %s over a dynamic dim", what);
  return s.const_value();
}

}  // namespace

constexpr int kLazyCatPieces = 4;

bool tiny_matmul(const capture::Graph& g, int n, const LowerOptions& opt) {
  const capture::Node& node = g.nodes[n];
  if (node.kind != capture::NodeKind::Op) return false;
  if (node.op != Op::mm && node.op != Op::bmm && node.op != Op::matmul && node.op != Op::linear) return false;
  const Tensor &x = g.fake(node.args[0].refs[0]), &y = g.fake(node.args[1].refs[0]);
  bool bias = node.op == Op::linear && node.args.size() > 2 && node.args[2].kind != capture::NodeArg::Kind::Const;
  bool shapes_ok = node.op == Op::bmm      ? x.dim() == 3 && y.dim() == 3
                   : node.op == Op::linear ? x.dim() >= 2 && y.dim() == 2 && !bias
                                           : x.dim() == 2 && y.dim() == 2;
  bool tiny = shapes_ok && g.dynamic_dims.empty() && is_floating(node.fakes[0].tensor().dtype());
  for (int64_t s : x.sizes()) tiny = tiny && s <= opt.tiny_matmul && s > 0;
  for (int64_t s : y.sizes()) tiny = tiny && s <= opt.tiny_matmul && s > 0;
  return tiny;
}

// Writes `src` (broadcast, converted) into the buffer view `view` with a kernel of its own; the
// write's result is that view.
int Lowering::store_into(int n, int view, int src) {
  realize(view);
  const LV dst = lvs_[view];
  before_write(dst.buffer);
  if (reads(src, dst.buffer)) realize(src);
  std::vector<SymInt> outer;
  for (const SymInt& s : dst.shape)
    if (!is_one(s)) outer.push_back(s);
  KernelBuilder kb(lg, outer);
  kb.roots = {view};  // the value it stores (emit keys its fusion trials by it)
  kb.source_nodes.push_back(n);
  Idx idx;
  int o = 0;
  for (const SymInt& s : dst.shape) idx.push_back(is_one(s) ? kb.ci(0) : kb.outer(o++));
  Val v = emit(kb, src, broadcast(kb, idx, lvs_[src].shape));
  Val at = kb.size(dst.offset);
  for (size_t d = 0; d < idx.size(); d++)
    at = kb.math(ScalarOp::add, at, kb.math(ScalarOp::mul, idx[d], kb.size(dst.strides[d])));
  kb.store(dst.buffer, at, kb.cast(v, compute_type(dst.dtype)));
  push_kernel(kb);
  LV out = dst;
  out.node = n;
  return add(std::move(out));
}

// Lowers node n; returns a value per flat output.
std::vector<int> Lowering::lower_op(int n) {
  const capture::Node& node = g.nodes[n];
  const Stack* args_ptr = nullptr;
  Stack a;  // constants, with fakes for tensors (for dtype rules)
  for (const capture::NodeArg& x : node.args) {
    if (x.kind == capture::NodeArg::Kind::Const) a.push_back(x.constant);
    if (x.kind == capture::NodeArg::Kind::Ref) a.push_back(g.fake(x.refs[0]));
    if (x.kind == capture::NodeArg::Kind::RefList) {
      TensorList l;
      for (capture::Ref r : x.refs) l.push_back(g.fake(r));
      a.push_back(std::move(l));
    }
  }
  (void)args_ptr;
  auto in = [&](int i) { return value_of_.at({node.args[i].refs[0].node, node.args[i].refs[0].elem >= 0 ? node.args[i].refs[0].elem : node.args[i].refs[0].out}); };
  auto ref_value = [&](capture::Ref r) { return value_of_.at({r.node, r.elem >= 0 ? r.elem : r.out}); };
  const SymMeta& om = shapes.of_node[n][0];
  auto base = [&](int k = 0) {
    LV v;
    v.dtype = shapes.of_node[n][k].dtype;
    v.shape = shapes.of_node[n][k].sizes;
    v.node = n;
    return v;
  };
  // Whether output k shares input i's storage (reshape copies what it cannot view, contiguous
  // returns its input when that is contiguous).
  auto is_view = [&](int i, int k) { return infer_meta(node.op, a).at(k).view_of == i; };
  // Input i read through `map` (out index -> in index); views of buffers stay strided views.
  auto view = [&](int i, Map map, int k = 0) {
    int src = in(i);
    const LV& s = lv(src);
    const SymMeta& m = shapes.of_node[n][k];
    if (s.kind == LV::Kind::Buffer && s.fake && is_view(i, k)) {
      LV v = base(k);
      v.kind = LV::Kind::Buffer;
      v.buffer = s.buffer;
      v.offset = s.offset + m.offset + SymInt::of(-1) * s.fake->offset;
      v.strides = m.strides;
      v.fake = &m;
      return add(std::move(v));
    }
    LV v = base(k);
    v.deps = {src};
    v.fn = [this, src, map](KernelBuilder& kb, const Idx& idx) { return emit(kb, src, map(kb, idx)); };
    return add(std::move(v));
  };
  auto reshape_view = [&](int i, int k = 0) {
    std::vector<SymInt> out = shapes.of_node[n][k].sizes, ins = lv(in(i)).shape;
    return view(i, [out, ins](KernelBuilder& kb, const Idx& idx) { return reshape_index(kb, idx, out, ins); }, k);
  };
  auto reduce = [&](int src, std::vector<int> dims, bool keepdim, ReduceOp op, DType dtype, std::vector<SymInt> shape) {
    LV v;
    v.kind = LV::Kind::Reduce;
    v.input = src;
    v.dims = std::move(dims);
    v.keepdim = keepdim;
    v.rop = op;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.node = n;
    int id = add(std::move(v));
    lv(id).memo_id = id;
    return id;
  };
  auto lazy = [&](LV v, std::vector<int> deps, std::function<Val(KernelBuilder&, const Idx&)> fn) {
    v.deps = std::move(deps);
    v.fn = std::move(fn);
    return add(std::move(v));
  };
  // Output shape with `dims` (of an input of rank r) reduced, kept as 1 when keepdim.
  auto reduced_shape = [&](const std::vector<SymInt>& s, const std::vector<int>& dims, bool keepdim) {
    std::vector<SymInt> out;
    for (int d = 0; d < int(s.size()); d++) {
      bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!r) out.push_back(s[d]);
      else if (keepdim) out.push_back(SymInt::of(1));
    }
    return out;
  };
  auto numel_of = [&](int src, const std::vector<int>& dims) {
    SymInt p = SymInt::of(1);
    for (int d : dims) p = p * lv(src).shape[d];
    return p;
  };

  switch (node.op) {
    // ---- pointwise -------------------------------------------------------------------------------
    case Op::neg: case Op::abs: case Op::sign: case Op::sqrt: case Op::rsqrt: case Op::exp: case Op::exp2:
    case Op::log: case Op::log2: case Op::log1p: case Op::expm1: case Op::sin: case Op::cos: case Op::tan:
    case Op::tanh: case Op::sigmoid: case Op::relu: case Op::gelu: case Op::silu: case Op::softplus:
    case Op::leaky_relu: case Op::elu: case Op::hardtanh: case Op::clamp: case Op::floor: case Op::ceil:
    case Op::round: case Op::trunc: case Op::reciprocal: case Op::erf: case Op::logical_not:
    case Op::bitwise_not: case Op::isnan: case Op::isinf: case Op::to_dtype: case Op::add: case Op::sub:
    case Op::mul: case Op::div: case Op::remainder: case Op::pow: case Op::minimum: case Op::maximum:
    case Op::eq: case Op::ne: case Op::lt: case Op::le: case Op::gt: case Op::ge: case Op::logical_and:
    case Op::logical_or: case Op::logical_xor: case Op::bitwise_and: case Op::bitwise_or:
    case Op::bitwise_xor: case Op::where: case Op::masked_fill: case Op::lerp: {
      std::vector<Tensor> ts;
      for (const Value& v : a)
        if (v.is_tensor()) ts.push_back(v.tensor());
      DType promoted = result_type(ts);
      bool compare = node.op == Op::eq || node.op == Op::ne || node.op == Op::lt || node.op == Op::le ||
                     node.op == Op::gt || node.op == Op::ge;
      Ty ct = compute_type(compare ? promoted : om.dtype);
      if (node.op == Op::where || node.op == Op::masked_fill) ct = compute_type(om.dtype);
      Ty out = compute_type(om.dtype);
      bool wrap_u8 = om.dtype == DType::UInt8;
      // A float16/bfloat16 result is rounded to its dtype where it is made, as eager stores it, not
      // only where a kernel stores it: `x:to(f16):to(f32) * 3` fused must not skip the rounding.
      ScalarOp round16 = om.dtype == DType::Float16    ? ScalarOp::round_f16
                         : om.dtype == DType::BFloat16 ? ScalarOp::round_bf16
                                                       : ScalarOp::cast;
      // Integer division and remainder raise eager's ZeroDivisionError for a zero divisor.
      bool int_div = (node.op == Op::remainder || (node.op == Op::div && !a[2].is_none())) &&
                     (ct == Ty::I32 || ct == Ty::I64);
      if (int_div && node.args[1].kind != capture::NodeArg::Kind::Ref) {
        bool zero = a[1].is_double() ? a[1].to_double() == 0 : !a[1].is_tensor() && a[1].to_int() == 0;
        if (a[1].is_tensor()) {  // a wrapped number (or any constant tensor)
          Tensor d = a[1].tensor().to(DType::Int64).contiguous();
          for (int64_t i = 0; i < d.numel(); i++) zero = zero || d.data<int64_t>()[i] == 0;
        }
        if (zero) return add_extern(n, false);  // raises on every call, as eager
      } else if (int_div && !check_divisor(n, in(1))) {
        return add_extern(n, false);
      }
      std::vector<int> srcs(node.args.size(), -1), deps;
      std::vector<DType> dts(node.args.size(), DType::Float32);
      for (size_t i = 0; i < node.args.size(); i++) {
        if (node.args[i].kind == capture::NodeArg::Kind::Ref) {
          srcs[i] = in(int(i));
          deps.push_back(srcs[i]);
        }
        if (a[i].is_tensor()) dts[i] = a[i].tensor().dtype();
      }
      Op op = node.op;
      Stack consts = a;
      return {lazy(base(), deps, [this, op, consts, srcs, dts, ct, out, wrap_u8, round16](KernelBuilder& kb, const Idx& idx) {
        std::vector<Val> x;
        for (size_t i = 0; i < srcs.size(); i++) {
          if (!consts[i].is_tensor()) continue;
          Ty t = operand_ty(op, int(x.size()), ct, dts[i]);
          Val v;
          if (srcs[i] >= 0) {
            v = emit(kb, srcs[i], broadcast(kb, idx, lv(srcs[i]).shape));
          } else {  // a wrapped number
            const Tensor& s = consts[i].tensor();
            v = is_floating(s.dtype()) ? kb.cf(s.item_double(), Ty::F64) : kb.ci(s.item_int(), Ty::I64);
          }
          x.push_back(kb.cast(v, t));
        }
        Val r = kb.cast(emit_pointwise(kb, op, consts, x, ct, out), out);
        if (wrap_u8) r = kb.math(ScalarOp::bitwise_and, r, kb.ci(255, Ty::I32));
        if (round16 != ScalarOp::cast) r = kb.math(round16, r);
        return r;
      })};
    }

    // ---- reductions ------------------------------------------------------------------------------
    case Op::sum: case Op::prod: case Op::amax: case Op::amin: case Op::any: case Op::all: {
      int src = in(0);
      std::vector<int> dims = dim_list(a[1], int64_t(lv(src).shape.size()));
      ReduceOp op = node.op == Op::sum ? ReduceOp::Sum : node.op == Op::prod ? ReduceOp::Prod
                  : node.op == Op::amax ? ReduceOp::Max : node.op == Op::amin ? ReduceOp::Min
                  : node.op == Op::any ? ReduceOp::Any : ReduceOp::All;
      return {reduce(src, dims, a[2].to_bool(), op, om.dtype, om.sizes)};
    }
    case Op::mean: {
      int src = in(0);
      std::vector<int> dims = dim_list(a[1], int64_t(lv(src).shape.size()));
      int s = reduce(src, dims, a[2].to_bool(), ReduceOp::Sum, om.dtype, om.sizes);
      SymInt cnt = numel_of(src, dims);
      Ty t = compute_type(om.dtype);
      return {lazy(base(), {s}, [this, s, cnt, t](KernelBuilder& kb, const Idx& idx) {
        Val sum = emit(kb, s, idx);
        return kb.cast(kb.math(ScalarOp::div, sum, kb.cast(kb.size(cnt), kb.ty(sum))), t);
      })};
    }
    case Op::argmax: case Op::argmin: case Op::max_dim: case Op::min_dim: {
      int src = in(0);
      int64_t r = int64_t(lv(src).shape.size());
      bool arg = node.op == Op::argmax || node.op == Op::argmin;
      std::vector<int> dims = dim_list(a[1], r);
      bool keepdim = a[2].to_bool();
      ReduceOp op = node.op == Op::argmax || node.op == Op::max_dim ? ReduceOp::ArgMax : ReduceOp::ArgMin;
      const SymMeta& im = shapes.of_node[n][arg ? 0 : 1];
      int idx_red = reduce(src, dims, keepdim, op, DType::Int64, im.sizes);
      LV one = base(arg ? 0 : 1);
      int idx_v = lazy(one, {idx_red}, [this, idx_red](KernelBuilder& kb, const Idx& idx) {
        return kb.math(ScalarOp::add, emit(kb, idx_red, idx), kb.ci(1));  // 1-based indices
      });
      if (arg) return {idx_v};
      int val = reduce(src, dims, keepdim, op, om.dtype, om.sizes);
      lv(val).take_value = true;
      lv(val).memo_id = idx_red;
      return {val, idx_v};
    }
    case Op::var: case Op::std: case Op::var_mean: {
      int src = in(0);
      std::vector<int> dims = dim_list(a[1], int64_t(lv(src).shape.size()));
      bool keepdim = a[3].to_bool();
      double corr = a[2].to_double();
      DType dt = om.dtype;
      Ty t = compute_type(dt);
      SymInt cnt = numel_of(src, dims);
      std::vector<SymInt> kshape = reduced_shape(lv(src).shape, dims, true);
      int s = reduce(src, dims, true, ReduceOp::Sum, dt, kshape);
      LV mv = base();
      mv.shape = kshape;
      int mean = lazy(mv, {s}, [this, s, cnt, t](KernelBuilder& kb, const Idx& idx) {
        Val sum = emit(kb, s, idx);
        return kb.cast(kb.math(ScalarOp::div, sum, kb.cast(kb.size(cnt), kb.ty(sum))), t);
      });
      LV dv = base();
      dv.shape = lv(src).shape;
      int dev = lazy(dv, {src, mean}, [this, src, mean, t](KernelBuilder& kb, const Idx& idx) {
        Val d = kb.math(ScalarOp::sub, kb.cast(emit(kb, src, idx), t), emit(kb, mean, broadcast(kb, idx, lv(mean).shape)));
        return kb.math(ScalarOp::mul, d, d);
      });
      int ss = reduce(dev, dims, keepdim, ReduceOp::Sum, dt, om.sizes);
      bool root = node.op == Op::std;
      int var = lazy(base(), {ss}, [this, ss, cnt, corr, t, root](KernelBuilder& kb, const Idx& idx) {
        Val sum = emit(kb, ss, idx);
        Ty at = kb.ty(sum);
        Val den = kb.math(ScalarOp::maximum, kb.math(ScalarOp::sub, kb.cast(kb.size(cnt), at), kb.cf(corr, at)), kb.cf(0, at));
        Val v = kb.math(ScalarOp::div, sum, den);
        return kb.cast(root ? kb.math(ScalarOp::sqrt, v) : v, t);
      });
      if (node.op != Op::var_mean) return {var};
      int s2 = reduce(src, dims, keepdim, ReduceOp::Sum, dt, om.sizes);
      lv(s2).memo_id = s;
      int mean2 = lazy(base(1), {s2}, [this, s2, cnt, t](KernelBuilder& kb, const Idx& idx) {
        Val sum = emit(kb, s2, idx);
        return kb.cast(kb.math(ScalarOp::div, sum, kb.cast(kb.size(cnt), kb.ty(sum))), t);
      });
      return {var, mean2};
    }
    case Op::norm: case Op::logsumexp: case Op::softmax: case Op::log_softmax:  // decomposed unless declined
    case Op::cumsum: case Op::sort: case Op::topk:
      return add_extern(n, true);

    // ---- views -----------------------------------------------------------------------------------
    case Op::view: case Op::reshape: case Op::squeeze: case Op::unsqueeze: case Op::flatten:
      // A reshape of a value that computes reductions would read it through div/mod indices, where
      // its reductions cannot fuse: stored first (by its row kernel), the reshape is a free view.
      // (Squeezes and unsqueezes map dims one to one and keep fusing.)
      if (lv(in(0)).kind == LV::Kind::Lazy && lv(in(0)).has_reduce) {
        auto non_one = [](std::vector<SymInt> s) {
          std::erase_if(s, [](const SymInt& x) { return is_one(x); });
          return s;
        };
        if (non_one(lv(in(0)).shape) != non_one(om.sizes)) realize(in(0));
      }
      return {reshape_view(0)};
    case Op::detach: case Op::contiguous: case Op::clone:
      return {view(0, [](KernelBuilder&, const Idx& idx) { return idx; })};
    case Op::permute: case Op::transpose: case Op::t: {
      int64_t r = int64_t(lv(in(0)).shape.size());
      std::vector<int> perm(r);
      std::iota(perm.begin(), perm.end(), 0);
      if (node.op == Op::permute) {
        for (int64_t d = 0; d < r; d++) perm[d] = int(wrap_dim(a[1].ints()[d], r));
      } else if (r >= 2) {
        int d0 = node.op == Op::t ? 0 : int(wrap_dim(a[1].to_int(), r)), d1 = node.op == Op::t ? 1 : int(wrap_dim(a[2].to_int(), r));
        std::swap(perm[d0], perm[d1]);
      }
      return {view(0, [perm](KernelBuilder&, const Idx& idx) {
        Idx r(idx.size());
        for (size_t d = 0; d < idx.size(); d++) r[perm[d]] = idx[d];
        return r;
      })};
    }
    case Op::expand: {
      std::vector<SymInt> ins = lv(in(0)).shape;
      return {view(0, [ins](KernelBuilder& kb, const Idx& idx) { return broadcast(kb, idx, ins); })};
    }
    case Op::narrow: case Op::select: case Op::slice: case Op::unbind: case Op::split:
    case Op::split_with_sizes: case Op::chunk: {
      const std::vector<SymInt> ins = lv(in(0)).shape;
      int64_t r = int64_t(ins.size());
      int d = int(wrap_dim((node.op == Op::split || node.op == Op::chunk || node.op == Op::split_with_sizes) ? a[2].to_int() : a[1].to_int(), r));
      const Tensor& x = a[0].tensor();
      int64_t size = x.sizes()[d];
      auto piece = [&](int64_t start, int64_t step, bool drop, int k) {
        TC_CHECK(ins[d].is_const() || (start >= 0), NotImplementedError, "lowering: slicing a dynamic dim from its end");
        return view(0, [d, start, step, drop](KernelBuilder& kb, const Idx& idx) {
          Idx r = idx;
          if (drop) r.insert(r.begin() + d, kb.ci(start));
          else r[d] = kb.math(ScalarOp::add, kb.math(ScalarOp::mul, idx[d], kb.ci(step)), kb.ci(start));
          return r;
        }, k);
      };
      switch (node.op) {
        case Op::narrow: {
          int64_t start = a[2].to_int(), len = a[3].to_int();
          int64_t s0 = start == size + 1 && len == 0 ? size : start >= 1 ? start - 1 : size + start;
          TC_CHECK(start >= 1 || ins[d].is_const(), NotImplementedError, "lowering: narrow from the end of a dynamic dim");
          return {piece(s0, 1, false, 0)};
        }
        case Op::select: {
          int64_t i = a[2].to_int();
          TC_CHECK(i >= 1 || ins[d].is_const(), NotImplementedError, "lowering: select from the end of a dynamic dim");
          return {piece(i >= 1 ? i - 1 : size + i, 1, true, 0)};
        }
        case Op::slice: {
          int64_t step = a[4].to_int(), b = 0;
          if (!a[2].is_none()) {
            int64_t x0 = a[2].to_int();
            TC_CHECK(x0 >= 1 || ins[d].is_const(), NotImplementedError, "lowering: slice from the end of a dynamic dim");
            b = std::clamp<int64_t>(x0 < 0 ? size + x0 : x0 - 1, 0, size);
          }
          return {piece(b, step, false, 0)};
        }
        case Op::unbind: {
          std::vector<int> out;
          for (int64_t i = 0; i < size; i++) out.push_back(piece(i, 1, true, int(i)));
          return out;
        }
        default: {  // split, split_with_sizes, chunk: pieces along d
          std::vector<int> out;
          int64_t start = 0;
          for (int k = 0; k < int(shapes.of_node[n].size()); k++) {
            out.push_back(piece(start, 1, false, k));
            start += static_size(shapes.of_node[n][k].sizes[d], "split");
          }
          return out;
        }
      }
    }

    // ---- movement --------------------------------------------------------------------------------
    case Op::to_device: {
      if (a[0].tensor().device() == node.fakes[0].tensor().device()) return {view(0, [](KernelBuilder&, const Idx& idx) { return idx; })};
      return add_extern(n, true);
    }
    case Op::cat: case Op::stack: {
      const capture::NodeArg& list = node.args[0];
      int64_t r = int64_t(om.sizes.size());
      int d = int(wrap_dim(a[1].to_int(), r));
      std::vector<int> srcs;
      std::vector<SymInt> ends;
      SymInt at = SymInt::of(0);
      for (capture::Ref ref : list.refs) {
        int s = ref_value(ref);
        const std::vector<SymInt>& sh = lv(s).shape;
        bool empty = node.op == Op::cat && (int64_t(sh.size()) != r || (sh[d].is_const() && sh[d].const_value() == 0));
        if (empty) continue;  // an empty piece (also the legacy 1-d [0] one)
        srcs.push_back(s);
        at = at + (node.op == Op::cat ? sh[d] : SymInt::of(1));
        ends.push_back(at);
      }
      if (srcs.empty()) return {lazy(base(), {}, [](KernelBuilder& kb, const Idx&) { return kb.ci(0); })};
      // Read lazily, a piece costs every element of the result a load and a select (each piece is
      // read at a clamped index): many pieces (DenseNet's) are copied by eager's cat instead, and
      // each consumer kernel reads one buffer (fewer, smaller, faster kernels).
      if (int(srcs.size()) > kLazyCatPieces) return add_extern(n, false);
      Ty t = compute_type(om.dtype);
      bool stack = node.op == Op::stack;
      return {lazy(base(), srcs, [this, srcs, ends, d, t, stack](KernelBuilder& kb, const Idx& idx) {
        auto piece = [&](size_t k) {
          Idx i = idx;
          if (stack) {
            i.erase(i.begin() + d);
          } else {
            Val start = k ? kb.size(ends[k - 1]) : kb.ci(0);
            i[d] = clamp_index(kb, kb.math(ScalarOp::sub, idx[d], start), lv(srcs[k]).shape[d]);
          }
          return kb.cast(emit(kb, srcs[k], i), t);
        };
        Val v = piece(srcs.size() - 1);
        for (size_t k = srcs.size() - 1; k-- > 0;)
          v = kb.math(ScalarOp::where, kb.math(ScalarOp::lt, idx[d], kb.size(ends[k])), piece(k), v);
        return v;
      })};
    }
    case Op::flip: {
      std::vector<int> dims = dim_list(Value(a[1].ints()), int64_t(om.sizes.size()));
      std::vector<SymInt> sh = om.sizes;
      return {view(0, [dims, sh](KernelBuilder& kb, const Idx& idx) {
        Idx r = idx;
        for (int d : dims) r[d] = kb.math(ScalarOp::sub, kb.math(ScalarOp::sub, kb.size(sh[d]), kb.ci(1)), idx[d]);
        return r;
      })};
    }
    case Op::roll: {
      if (a[2].is_none()) {
        return add_extern(n, true);
      }
      std::vector<int64_t> dims;
      for (int64_t x : a[2].ints()) dims.push_back(wrap_dim(x, int64_t(om.sizes.size())));
      IntList shifts = a[1].ints();
      std::vector<SymInt> sh = om.sizes;
      return {view(0, [dims, shifts, sh](KernelBuilder& kb, const Idx& idx) {
        Idx r = idx;
        for (size_t k = 0; k < dims.size(); k++) {
          int d = int(dims[k]);
          r[d] = kb.math(ScalarOp::mod, kb.math(ScalarOp::sub, r[d], kb.ci(shifts[k])), kb.size(sh[d]));
        }
        return r;
      })};
    }
    case Op::repeat: {
      std::vector<SymInt> ins = lv(in(0)).shape;
      return {view(0, [ins](KernelBuilder& kb, const Idx& idx) {
        size_t lead = idx.size() - ins.size();
        Idx r(ins.size());
        for (size_t j = 0; j < ins.size(); j++) r[j] = kb.math(ScalarOp::mod, idx[lead + j], kb.size(ins[j]));
        return r;
      })};
    }
    case Op::pad: {
      int src = in(0);
      std::vector<SymInt> ins = lv(src).shape;
      IntList pad = a[1].ints();
      std::string mode = a[2].str();
      Ty t = compute_type(om.dtype);
      double value = a[3].to_double();
      int64_t r = int64_t(ins.size());
      return {lazy(base(), {src}, [this, src, ins, pad, mode, t, value, r](KernelBuilder& kb, const Idx& idx) {
        Idx i = idx;
        Val ok = kb.ci(1, Ty::Bool);
        for (size_t k = 0; k < pad.size() / 2; k++) {
          int d = int(r - 1 - int64_t(k));
          Val n = kb.size(ins[d]);
          Val x = kb.math(ScalarOp::sub, idx[d], kb.ci(pad[2 * k]));
          if (mode == "constant") {
            ok = kb.math(ScalarOp::logical_and, ok,
                         kb.math(ScalarOp::logical_and, kb.math(ScalarOp::ge, x, kb.ci(0)), kb.math(ScalarOp::lt, x, n)));
            x = clamp_index(kb, x, ins[d]);
          } else if (mode == "replicate") {
            x = clamp_index(kb, x, ins[d]);
          } else if (mode == "circular") {
            x = kb.math(ScalarOp::mod, x, n);
          } else {  // reflect
            x = kb.math(ScalarOp::abs, x);
            Val last = kb.math(ScalarOp::sub, n, kb.ci(1));
            x = kb.math(ScalarOp::where, kb.math(ScalarOp::gt, x, last), kb.math(ScalarOp::sub, kb.math(ScalarOp::add, last, last), x), x);
          }
          i[d] = x;
        }
        Val v = kb.cast(emit(kb, src, i), t);
        if (mode != "constant") return v;
        Val fill = t == Ty::F32 || t == Ty::F64 ? kb.cf(value, t) : kb.cast(kb.ci(int64_t(value)), t);
        return kb.math(ScalarOp::where, ok, v, fill);
      })};
    }
    case Op::tril: case Op::triu: {
      int src = in(0);
      int64_t k = a[1].to_int();
      bool lower = node.op == Op::tril;
      Ty t = compute_type(om.dtype);
      return {lazy(base(), {src}, [this, src, k, lower, t](KernelBuilder& kb, const Idx& idx) {
        size_t r = idx.size();
        Val diff = kb.math(ScalarOp::sub, idx[r - 1], idx[r - 2]);
        Val keep = kb.math(lower ? ScalarOp::le : ScalarOp::ge, diff, kb.ci(k));
        Val zero = t == Ty::F32 || t == Ty::F64 ? kb.cf(0, t) : kb.ci(0, t);
        return kb.math(ScalarOp::where, keep, kb.cast(emit(kb, src, idx), t), zero);
      })};
    }
    case Op::index_select: case Op::gather: {
      int src = in(0), index = in(2);
      std::vector<SymInt> ins = lv(src).shape;
      IndexFlag flag;
      if (!check_indices(n, ins, &flag)) return add_extern(n, false);
      int d = int(wrap_dim(a[1].to_int(), int64_t(lv(src).shape.size())));
      bool gather = node.op == Op::gather;
      return {lazy(base(), {src, index}, [this, src, index, d, gather, ins, flag](KernelBuilder& kb, const Idx& idx) {
        Idx ii = gather ? idx : (lv(index).shape.empty() ? Idx{} : Idx{idx[d]});
        Val at = kb.cast(emit(kb, index, ii), Ty::I64);
        Idx i = idx;
        if (!ins.empty()) i[d] = clamp_index(kb, kb.math(ScalarOp::sub, flag_index(kb, at, ins[d], flag), kb.ci(1)), ins[d]);
        return emit(kb, src, i);
      })};
    }
    case Op::embedding: {
      int ids = in(0), w = in(1);
      std::vector<SymInt> ws = lv(w).shape;
      IndexFlag flag;
      if (!check_indices(n, ws, &flag)) return add_extern(n, false);
      return {lazy(base(), {ids, w}, [this, ids, w, ws, flag](KernelBuilder& kb, const Idx& idx) {
        Idx ii(idx.begin(), idx.end() - 1);
        Val at = flag_index(kb, kb.cast(emit(kb, ids, ii), Ty::I64), ws[0], flag);
        return emit(kb, w, {clamp_index(kb, kb.math(ScalarOp::sub, at, kb.ci(1)), ws[0]), idx.back()});
      })};
    }
    case Op::scatter: case Op::scatter_add: case Op::masked_select: case Op::nonzero:
      return add_extern(n, true);
    case Op::copy_:
    case Op::fill_: {
      if (node.args[1].kind == capture::NodeArg::Kind::Ref) return {store_into(n, in(0), in(1))};
      Value v = a[1];  // a number (copy_ from a number, a wrapped 0-dim tensor, is a fill_)
      if (v.is_tensor()) {
        const Tensor& t = v.tensor();
        if (t.is_fake() || t.dim() != 0) return add_extern(n, true);
        v = is_floating(t.dtype()) ? Value(t.item_double()) : Value(t.item_int());
      }
      Ty t = compute_type(om.dtype);
      LV c = base();
      c.shape = {};
      return {store_into(n, in(0), lazy(c, {}, [v, t](KernelBuilder& kb, const Idx&) {
        return v.is_double() ? kb.cast(kb.cf(v.to_double(), Ty::F64), t) : kb.cast(kb.ci(v.to_int()), t);
      }))};
    }
    case Op::uniform_: case Op::normal_:
      return add_extern(n, true);

    // ---- contractions ----------------------------------------------------------------------------
    case Op::mm: case Op::bmm: case Op::matmul: case Op::linear: {
      const Tensor& x = a[0].tensor();
      bool tiny = tiny_matmul(g, n, opt);
      if (!tiny) return add_extern(n, false);
      // out[..., i, j] = sum_k x[..., i, k] * y[..., k, j]   (linear: y[j, k])
      int xs = in(0), ys = in(1);
      bool lin = node.op == Op::linear, batched = node.op == Op::bmm;
      int64_t K = x.sizes().back();
      if (lin && opt.device == DeviceType::CPU) {
        // linear's weight [N, K] read along k for each output j would be gathered (stride K) when
        // the kernel vectorizes over j: it is transposed into a [K, N] buffer first (a small
        // kernel), read along j with contiguous loads. (CUDA threads take one output each: the
        // weight is read in place, no extra launch.)
        LV wt;
        wt.dtype = lv(ys).dtype;
        wt.shape = {lv(ys).shape[1], lv(ys).shape[0]};
        wt.node = n;
        int w = ys;
        ys = lazy(wt, {w}, [this, w](KernelBuilder& kb, const Idx& idx) { return emit(kb, w, {idx[1], idx[0]}); });
        realize(ys);
        lin = false;
      }
      Ty t = compute_type(om.dtype);
      LV p = base();
      p.shape.push_back(SymInt::of(K));
      int prodv = lazy(p, {xs, ys}, [this, xs, ys, lin, batched, t](KernelBuilder& kb, const Idx& idx) {
        size_t r = idx.size();
        Val k = idx[r - 1], j = idx[r - 2];
        Idx xi(idx.begin(), idx.end() - 2);
        xi.push_back(k);
        Idx yi = lin ? Idx{j, k} : batched ? Idx{idx[0], k, j} : Idx{k, j};
        return kb.math(ScalarOp::mul, kb.cast(emit(kb, xs, xi), t), kb.cast(emit(kb, ys, yi), t));
      });
      int sum = reduce(prodv, {int(p.shape.size()) - 1}, false, ReduceOp::Sum, om.dtype, om.sizes);
      lv(sum).blas_order = is_floating(om.dtype);  // as eager's sgemm / dgemm round
      return {sum};
    }
    case Op::addmm: case Op::baddbmm: case Op::einsum: case Op::conv1d: case Op::conv2d:
    case Op::conv_transpose2d:
      return add_extern(n, false);
    case Op::max_pool2d: case Op::avg_pool2d: case Op::adaptive_avg_pool2d: case Op::adaptive_max_pool2d: {
      // A reduction over a window view [..., OH, OW, KH, KW] of the input (padding reads as the
      // reduction's identity); adaptive pools whose windows are all equal are plain pools.
      const Tensor& x = a[0].tensor();
      bool is_max = node.op == Op::max_pool2d || node.op == Op::adaptive_max_pool2d;
      bool adaptive = node.op == Op::adaptive_avg_pool2d || node.op == Op::adaptive_max_pool2d;
      int64_t r = x.dim(), H = x.sizes()[r - 2], W = x.sizes()[r - 1];
      int64_t OH = node.fakes[0].tensor().sizes()[r - 2], OW = node.fakes[0].tensor().sizes()[r - 1];
      auto two = [](const IntList& v) { return v.size() == 1 ? IntList{v[0], v[0]} : v; };
      IntList k, st, pad = {0, 0}, dil = {1, 1};
      int64_t divisor = 0;
      bool include_pad = true;
      if (adaptive) {
        if (OH == 0 || OW == 0 || H % OH || W % OW) return add_extern(n, true);
        k = {H / OH, W / OW};
        st = k;
      } else {
        k = two(a[1].ints());
        st = a[2].is_none() || a[2].ints().empty() ? k : two(a[2].ints());
        pad = two(a[3].ints());
        if (is_max) dil = two(a[4].ints());
        if (!is_max) {
          include_pad = a[5].to_bool();
          divisor = a[6].is_none() ? 0 : a[6].to_int();
        }
      }
      if (!is_floating(om.dtype) || !lv(in(0)).shape.back().is_const() || !lv(in(0)).shape[r - 2].is_const())
        return add_extern(n, true);
      int src = in(0);
      Ty t = compute_type(om.dtype);
      LV win = base();
      win.shape.push_back(SymInt::of(k[0]));
      win.shape.push_back(SymInt::of(k[1]));
      int window = lazy(win, {src}, [this, src, k, st, pad, dil, H, W, is_max, t](KernelBuilder& kb, const Idx& idx) {
        size_t q = idx.size();
        Val hw[2];
        Val ok = kb.ci(1, Ty::Bool);
        const int64_t size[2] = {H, W};
        for (int i = 0; i < 2; i++) {
          Val o = idx[q - 4 + i], kk = idx[q - 2 + i];
          Val p = kb.math(ScalarOp::add, kb.math(ScalarOp::sub, kb.math(ScalarOp::mul, o, kb.ci(st[i])), kb.ci(pad[i])),
                          kb.math(ScalarOp::mul, kk, kb.ci(dil[i])));
          ok = kb.math(ScalarOp::logical_and, ok,
                       kb.math(ScalarOp::logical_and, kb.math(ScalarOp::ge, p, kb.ci(0)), kb.math(ScalarOp::lt, p, kb.ci(size[i]))));
          hw[i] = clamp_index(kb, p, SymInt::of(size[i]));
        }
        Idx in(idx.begin(), idx.end() - 4);
        in.push_back(hw[0]);
        in.push_back(hw[1]);
        Val v = kb.cast(emit(kb, src, in), t);
        return kb.math(ScalarOp::where, ok, v, kb.cf(is_max ? -INFINITY : 0.0, t));
      });
      int rank = int(win.shape.size());
      int red = reduce(window, {rank - 2, rank - 1}, false, is_max ? ReduceOp::Max : ReduceOp::Sum, om.dtype, om.sizes);
      if (is_max) return {red};
      return {lazy(base(), {red}, [this, red, k, st, pad, H, W, include_pad, divisor, t](KernelBuilder& kb, const Idx& idx) {
        size_t q = idx.size();
        Val count = kb.ci(1);
        const int64_t size[2] = {H, W};
        for (int i = 0; i < 2; i++) {
          Val o0 = kb.math(ScalarOp::sub, kb.math(ScalarOp::mul, idx[q - 2 + i], kb.ci(st[i])), kb.ci(pad[i]));
          Val end = kb.math(ScalarOp::minimum, kb.math(ScalarOp::add, o0, kb.ci(k[i])), kb.ci(size[i] + pad[i]));
          Val span = include_pad ? kb.math(ScalarOp::sub, end, o0)
                                 : kb.math(ScalarOp::sub, kb.math(ScalarOp::minimum, end, kb.ci(size[i])),
                                           kb.math(ScalarOp::maximum, o0, kb.ci(0)));
          count = kb.math(ScalarOp::mul, count, span);
        }
        if (divisor) count = kb.ci(divisor);
        Val sum = emit(kb, red, idx);
        return kb.cast(kb.math(ScalarOp::div, sum, kb.cast(count, kb.ty(sum))), t);
      })};
    }

    // ---- composites that decompose.cpp declined ------------------------------------------------
    case Op::scaled_dot_product_attention:  // on CUDA: the fused attention kernel, a library call
      return add_extern(n, !attention_is_library_call(a, opt.device));
    // training batch_norm (updates its running stats in place) and the gradient kernels of
    // batch_norm, conv2d and max_pool2d: one kernel or cuDNN call each on CUDA, a library call there
    case Op::batch_norm: case Op::_batch_norm_backward: case Op::_conv2d_weight_backward:
    case Op::_max_pool2d_backward:
      return add_extern(n, opt.device != DeviceType::CUDA);
    case Op::layer_norm: case Op::group_norm: case Op::rms_norm:
    case Op::cross_entropy: case Op::nll_loss: case Op::mse_loss: case Op::l1_loss:
    case Op::binary_cross_entropy: case Op::binary_cross_entropy_with_logits: case Op::interpolate:
    case Op::dropout:
      return add_extern(n, true);
    // optimizer steps: in-place updates of lists of tensors (their multi-tensor kernels)
    case Op::_fused_sgd_: case Op::_fused_adam_: case Op::_fused_adamw_: case Op::_fused_rmsprop_:
    case Op::_fused_adagrad_:
      return add_extern(n, true);

    // ---- creation --------------------------------------------------------------------------------
    case Op::empty: case Op::zeros: case Op::ones: case Op::full: {
      Ty t = compute_type(om.dtype);
      double v = node.op == Op::ones ? 1 : node.op == Op::full ? a[1].to_double() : 0;
      int64_t vi = node.op == Op::full && !a[1].is_double() ? a[1].to_int() : int64_t(v);
      return {lazy(base(), {}, [t, v, vi](KernelBuilder& kb, const Idx&) {
        return t == Ty::F32 || t == Ty::F64 ? kb.cf(v, t) : kb.ci(vi, t);
      })};
    }
    case Op::eye: {
      Ty t = compute_type(om.dtype);
      return {lazy(base(), {}, [t](KernelBuilder& kb, const Idx& idx) {
        return kb.cast(kb.math(ScalarOp::eq, idx[0], idx[1]), t);
      })};
    }
    case Op::arange: {
      // Integer ranges are exact; float ones follow PyTorch's vectorised rounding (eager).
      if (!is_integral(om.dtype, false)) return add_extern(n, true);
      auto as_int = [](const Value& v) { return v.is_double() ? int64_t(v.to_double()) : v.to_int(); };
      int64_t start = a[1].is_none() ? 0 : as_int(a[0]), step = as_int(a[2]);
      Ty t = compute_type(om.dtype);
      return {lazy(base(), {}, [start, step, t](KernelBuilder& kb, const Idx& idx) {
        return kb.cast(kb.math(ScalarOp::add, kb.ci(start), kb.math(ScalarOp::mul, idx[0], kb.ci(step))), t);
      })};
    }
    case Op::linspace: case Op::rand: case Op::randn: case Op::randint:
    case Op::bernoulli: case Op::multinomial:
      return add_extern(n, true);
  }
  TC_LOWER_CHECK(false, "lower_op: unknown op");
  return {};
}

}  // namespace tc::lower
