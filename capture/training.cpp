// Compiled training: the joint forward+backward of a training entry, built once per entry at its
// first call, and the per-call run that links the compiled forward's outputs to the compiled
// backward through one autograd node.
//
// How the backward graph is made: with the first call's real inputs (aliases of them: same
// storage, no history; inputs the graph writes into are cloned so nothing is written twice), the
// forward graph is replayed op by op through tc::call with grad mode on, so tc's own autograd
// records its tape, and autograd::grad(outputs that require grad, inputs that require grad,
// placeholder gradients) runs it while a CallObserver (tc/ops.h) sees every top-level op the
// backward calls. Each observed op becomes a node of the backward graph; its tensor arguments
// are placeholders (the gradients: backward inputs), earlier backward ops, forward values (the
// tape's saved tensors: inputs of the graph, or values the forward computes, which become extra
// outputs of the forward graph and inputs of the backward graph) or 0-dim wrapped numbers
// (constants). Real tensors rather than fake ones: the formulas, helpers and decompositions run
// exactly as in eager, and every observed tensor is kept alive until the graph is built, so a
// TensorImpl address identifies one value.
//
// Saved values: a needed forward value made by a cheap pointwise op whose tensor arguments are
// graph inputs, saved values or themselves recomputable this way (a chain of at most
// kRecomputeChain ops) is recomputed inside the backward graph instead of being saved
// (tc.config.aot_recompute = false saves every needed value, as a default partition would).
//
// A graph with dynamic sizes gets one joint per size of its dynamic dims (the backward is recorded
// at one size; at most kMaxSizes, then further sizes train op by op), and recomputes nothing (its
// nodes' size arguments belong to the traced size).
//
// Random ops: the replay puts the random stream back, so the compiled forward draws what eager
// would; a dropout whose input requires grad becomes its decomposition in the forward graph (a
// bernoulli mask and muls, as eager's autograd runs it), so the mask is a value the backward
// saves, and recompute never reruns a random op.
//
// What runs op by op with eager autograd instead (correct, not compiled; explain and the
// aot_graphs log say why): attention with dropout, External nodes, unspecialized numbers, an in-place write into an input that requires grad, and a backward
// that reads a tensor the forward graph does not name. (A Lua function backend's callable runs
// in grad mode instead: what it computes eagerly records, as torch.compile's custom backends.)
#include "training.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "capture_state.h"
#include "ddp_split.h"
#include "tc/autograd.h"
#include "tc/random.h"

namespace tc::capture {

namespace {

constexpr int kRecomputeChain = 16;
constexpr size_t kMaxSizes = 8;

const Tensor& tensor_of(const std::vector<Stack>& vals, Ref r) {
  const Value& v = vals[size_t(r.node)][size_t(r.out)];
  return r.elem >= 0 ? v.tensors()[size_t(r.elem)] : v.tensor();
}

Value arg_value(const std::vector<Stack>& vals, const NodeArg& a) {
  switch (a.kind) {
    case NodeArg::Kind::Const: return a.constant;
    case NodeArg::Kind::Ref: return Value(tensor_of(vals, a.refs[0]));
    case NodeArg::Kind::RefList: {
      TensorList l;
      for (Ref r : a.refs) l.push_back(tensor_of(vals, r));
      return Value(l);
    }
  }
  return Value();
}

// Runs the graph op by op through tc::call (autograd records under grad mode as in eager).
// Returns every node's outputs.
std::vector<Stack> interpret(const Graph& g, const std::vector<Tensor>& inputs) {
  std::vector<Stack> vals(g.nodes.size());
  for (size_t j = 0; j < g.inputs.size(); j++) vals[size_t(g.inputs[j])] = {Value(inputs[j])};
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) continue;
    Stack args;
    args.reserve(n.args.size());
    for (const NodeArg& a : n.args) args.push_back(arg_value(vals, a));
    try {
      std::optional<GradModeGuard> off;
      if (n.no_grad) off.emplace(false);
      if (n.kind == NodeKind::Op) {
        vals[i] = call(n.op, args);
      } else {
        for (Tensor& t : n.ext->call(args)) vals[i].push_back(Value(std::move(t)));
      }
    } catch (const NodeError&) {
      throw;
    } catch (const Error& e) {
      throw NodeError(e, int(i));
    }
  }
  return vals;
}

std::vector<Tensor> outputs_of(const Graph& g, const std::vector<Stack>& vals) {
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (Ref r : g.outputs) out.push_back(tensor_of(vals, r));
  return out;
}

// The flat index of output (out, elem) among a node's tensors (as add_op returns its Refs).
size_t flat_index(const Stack& outs, Ref r) {
  size_t k = 0;
  for (int o = 0; o < r.out; o++) k += outs[size_t(o)].is_tensor_list() ? outs[size_t(o)].tensors().size() : 1;
  return k + size_t(std::max(r.elem, 0));
}

using RefKey = std::tuple<int, int, int>;
RefKey key_of(Ref r) { return {r.node, r.out, r.elem}; }

// Where a view value lives: storage, offset, sizes, strides, dtype (the tape saves forward outputs
// as aliases of them: other TensorImpls on the same memory).
std::string geometry(const Tensor& t) {
  std::string k = std::to_string(reinterpret_cast<uintptr_t>(t.storage().get())) + ":" +
                  std::to_string(t.offset()) + ":" + dtype_name(t.dtype());
  for (int64_t s : t.sizes()) k += "," + std::to_string(s);
  k += "/";
  for (int64_t s : t.strides()) k += "," + std::to_string(s);
  return k;
}

Tensor fake_like(const Tensor& t) {
  Tensor f = Tensor::fake(t.sizes(), t.strides(), t.dtype(), t.device());
  f.impl()->offset = t.offset();
  return f;
}

// A tensor argument of an observed op: where its value comes from.
struct Src {
  enum class K : uint8_t { Const, Fw, Tangent, Bw } k = K::Const;
  Ref ref;        // Fw: the forward value
  int index = 0;  // Tangent: which; Bw: the record
  size_t flat = 0;  // Bw: which output of the record (flat)
  Value constant;
};

struct ArgSrc {
  enum class K : uint8_t { Value, Tensor, List } k = K::Value;
  Value constant;
  std::vector<Src> srcs;
};

struct Rec {
  Op op;
  std::vector<ArgSrc> args;
  Stack args_kept, out;  // alive until the graph is built
};

// Whether an observed op is arithmetic on constants alone (a pointwise op whose tensor arguments
// are all constants, making 0-dim CPU tensors): the backward graph takes its results as constants
// rather than as nodes, so a CUDA backward holds no CPU tensor (the "tc" backend would run it on
// eager, and reduce-overhead would not record it).
bool folds_to_constant(const OpSchema& s, const Rec& r, const Stack& out) {
  if (s.kind != OpKind::Pointwise || out.empty()) return false;
  for (const ArgSpec& a : s.args)
    if (a.mutated) return false;
  for (const ArgSrc& a : r.args)
    for (const Src& src : a.srcs)
      if (src.k != Src::K::Const) return false;
  for (const Value& v : out)
    if (!v.is_tensor() || !v.tensor().defined() || v.tensor().dim() != 0 || !v.tensor().device().is_cpu()) return false;
  return true;
}

// Observes the backward's top-level ops (tc::set_call_observer).
struct Recorder : CallObserver {
  // the backward's values by TensorImpl and by geometry (the tape saves an op's outputs as
  // aliases: max_dim's indices for its backward)
  std::unordered_map<const TensorImpl*, Src> bw;
  std::unordered_map<std::string, Src> bw_geo;
  const std::unordered_map<const TensorImpl*, Ref>* fw_impl = nullptr;
  const std::unordered_map<std::string, Ref>* fw_geo = nullptr;
  std::vector<Rec> recs;
  std::string failure;

  bool lookup(const Tensor& t, Src* s) const {
    if (auto it = bw.find(t.impl()); it != bw.end()) {
      *s = it->second;
      return true;
    }
    if (auto it = fw_impl->find(t.impl()); it != fw_impl->end()) {
      s->k = Src::K::Fw;
      s->ref = it->second;
      return true;
    }
    if (t.is_wrapped_number()) {
      s->k = Src::K::Const;
      s->constant = Value(t);
      return true;
    }
    if (t.is_fake()) return false;
    const std::string geo = geometry(t);
    if (auto it = bw_geo.find(geo); it != bw_geo.end()) {
      *s = it->second;
      return true;
    }
    if (auto it = fw_geo->find(geo); it != fw_geo->end()) {
      s->k = Src::K::Fw;
      s->ref = it->second;
      return true;
    }
    return false;
  }

  void on_call(Op op, const Stack& args, const Stack& out) override {
    if (!failure.empty()) return;
    const OpSchema& s = schema(op);
    Rec r{op, {}, args, out};
    for (size_t i = 0; i < args.size(); i++) {
      ArgSrc a;
      auto add = [&](const Tensor& t) {
        Src src;
        if (!t.defined()) {
          src.constant = Value(t);
        } else if (!lookup(t, &src)) {
          failure = std::string("the backward's ") + s.name + " reads a tensor the forward graph does not name (" +
                    t.meta_string() + (t.is_fake() ? ", metadata only" : "") + ")";
          return;
        }
        if (s.args[i].mutated && src.k != Src::K::Bw)
          failure = std::string("the backward's ") + s.name + " writes into a forward value";
        a.srcs.push_back(std::move(src));
      };
      if (args[i].is_tensor()) {
        a.k = ArgSrc::K::Tensor;
        add(args[i].tensor());
      } else if (args[i].is_tensor_list()) {
        a.k = ArgSrc::K::List;
        for (const Tensor& t : args[i].tensors()) add(t);
      } else {
        a.constant = args[i];
      }
      r.args.push_back(std::move(a));
    }
    if (folds_to_constant(s, r, out)) {  // scalar arithmetic on constants: its result is one too
      for (const Value& v : out) bw[v.tensor().impl()] = Src{Src::K::Const, {}, 0, 0, v};
      return;
    }
    size_t flat = 0;
    auto reg = [&](const Tensor& t) {
      if (t.is_fake()) failure = std::string("the backward's ") + s.name + " gave a fake tensor";
      const Src src{Src::K::Bw, {}, int(recs.size()), flat++, {}};
      bw[t.impl()] = src;
      if (!t.is_fake()) bw_geo[geometry(t)] = src;
    };
    for (const Value& v : out) {
      if (v.is_tensor()) reg(v.tensor());
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors()) reg(t);
    }
    recs.push_back(std::move(r));
  }
};

struct ObserverScope {
  CallObserver* prev;
  explicit ObserverScope(CallObserver* o) : prev(set_call_observer(o)) {}
  ~ObserverScope() { set_call_observer(prev); }
};

bool cheap_pointwise(const Graph& g, Ref r) {
  const Node& n = g.nodes[size_t(r.node)];
  if (n.kind != NodeKind::Op) return false;
  const OpSchema& s = schema(n.op);
  if (s.kind != OpKind::Pointwise) return false;
  for (const ArgSpec& a : s.args)
    if (a.mutated) return false;
  return true;
}

// The input a value is (a view of, through View ops), or -1 (node index of the Input).
int root_input(const Graph& g, Ref r) {
  for (;;) {
    const Node& n = g.nodes[size_t(r.node)];
    if (n.kind == NodeKind::Input) return r.node;
    if (n.kind != NodeKind::Op || schema(n.op).kind != OpKind::View || n.args.empty() ||
        n.args[0].kind != NodeArg::Kind::Ref)
      return -1;
    r = n.args[0].refs[0];
  }
}


// Why graph g cannot have a compiled backward (empty: it can).
std::string unsupported(const Graph& g, const Entry& e, const CompileConfig& cfg) {
  if (!e.number_inputs.empty()) return "the graph has unspecialized number inputs";
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::External) return "the graph calls " + n.ext->name + " (allow_in_graph)";
    if (n.kind != NodeKind::Op) continue;
    const OpSchema& s = schema(n.op);
    if (n.op == Op::scaled_dot_product_attention &&
        !(n.args[4].kind == NodeArg::Kind::Const && n.args[4].constant.to_double() == 0))
      return "the graph has attention with dropout";
    for (size_t i = 0; i < s.args.size() && i < n.args.size(); i++) {
      if (!s.args[i].mutated || n.args[i].kind != NodeArg::Kind::Ref) continue;
      const int in = root_input(g, n.args[i].refs[0]);
      if (in >= 0 && g.nodes[size_t(in)].fakes[0].tensor().requires_grad())
        return std::string("the graph writes in place (") + s.name + ") into an input that requires grad";
    }
  }
  return "";
}

// Makes a backward input match the metadata its graph was compiled for.
Tensor conform(const Tensor& t, const Tensor& fake) {
  if (t.sizes() == fake.sizes() && t.strides() == fake.strides()) return t;
  Tensor c = Tensor::empty_strided(fake.sizes(), fake.strides(), fake.dtype(), fake.device());
  c.copy_from(t);
  return c;
}

}  // namespace

struct Training {
  std::string eager;  // non-empty: the graph runs op by op with eager autograd, and why
  bool no_backward = false;  // no output requires grad
  CompiledGraph fw, bw;
  std::vector<int> grad_inputs;  // input indices that require grad: the node's next edges
  std::vector<int> out_slot;     // per graph output: its node output, or -1
  int n_diff = 0;
  struct Saved {
    bool from_input;
    int index;  // input index, or extra output of the forward
  };
  std::vector<Saved> saved;
  std::vector<Tensor> bw_fakes;  // per backward input
  std::vector<int> grad_out;     // per grad input: backward output, or -1
  int saved_naive = 0;  // computed values saving every needed one would have saved
  // the backward graph until its first run compiles it (a forward that is never differentiated
  // costs no backward compile), with what compiling it needs
  Graph bw_graph;
  std::shared_ptr<const CompileConfig> cfg;
  lua_State* L = nullptr;  // the main thread (for tc.config and the report)
  std::string function;
};

bool is_training_graph(const Graph& g) {
  if (!grad_enabled() || g.num_ops() == 0) return false;
  if (std::all_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.kind == NodeKind::Input || n.no_grad; }))
    return false;  // everything ran under tc.no_grad (an optimizer step)
  for (int i : g.inputs)
    if (g.nodes[size_t(i)].fakes[0].tensor().requires_grad()) return true;
  return false;
}

namespace {

// Appends op `op` on `positional` (graph values given as their fakes in `refs`' order) to `out`.
Ref emit(Graph& out, Op op, Stack positional, const std::vector<Ref>& refs, int line, const std::string& file) {
  Stack bound = bind(op, std::move(positional), {});
  std::vector<NodeArg> args;
  for (const Value& v : bound) {
    int at = -1;
    for (size_t k = 0; k < refs.size() && v.is_tensor(); k++)
      if (v.tensor().same(out.fake(refs[k]))) at = int(k);
    args.push_back(at >= 0 ? NodeArg::ref(refs[size_t(at)]) : NodeArg::constant_of(v));
  }
  Stack fakes = call(op, bound);
  Ref r = out.add_op(op, std::move(args), std::move(fakes), line)[0];
  out.nodes.back().file = file;
  return r;
}

// g with each dropout (p > 0, training) whose input requires grad replaced by the decomposition
// eager's autograd runs for it (a bernoulli mask, two muls), so that the mask is a graph value
// the backward can save and the forward draws the random numbers eager would. Empty when g has
// none.
Graph decompose_dropouts(const Graph& g) {
  std::vector<bool> rg(g.nodes.size(), false);
  bool any = false;
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) {
      rg[i] = n.fakes[0].tensor().requires_grad();
      continue;
    }
    if (n.kind != NodeKind::Op || autograd::differentiability(n.op) == autograd::Differentiability::NonDifferentiable)
      continue;
    for (const NodeArg& a : n.args)
      for (Ref r : a.refs) rg[i] = rg[i] || rg[size_t(r.node)];
    any = any || (n.op == Op::dropout && rg[i]);
  }
  if (!any) return {};
  Graph out;
  out.dynamic_dims = g.dynamic_dims;
  std::vector<std::vector<Ref>> map(g.nodes.size());
  auto remap = [&](Ref r) { return map[size_t(r.node)][flat_index(g.nodes[size_t(r.node)].fakes, r)]; };
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) {
      map[i] = {out.add_input(n.name, n.source, n.fakes[0].tensor())};
      continue;
    }
    std::vector<NodeArg> args = n.args;
    for (NodeArg& a : args)
      for (Ref& r : a.refs) r = remap(r);
    const double p = n.op == Op::dropout ? n.args[1].constant.to_double() : 0;
    if (n.op == Op::dropout && rg[i] && p > 0 && p < 1 && n.args[2].constant.to_bool()) {
      const Ref x = args[0].refs[0];
      const Tensor& xf = out.fake(x);
      const Ref bits = emit(out, Op::bernoulli, {Value(xf), Value(1.0 - p)}, {x}, n.line, n.file);
      const Ref keep = emit(out, Op::to_dtype, {Value(out.fake(bits)), Value(xf.dtype())}, {bits}, n.line, n.file);
      const Ref scaled = emit(out, Op::mul, {Value(out.fake(keep)), Value(1.0 / (1.0 - p))}, {keep}, n.line, n.file);
      map[i] = {emit(out, Op::mul, {Value(xf), Value(out.fake(scaled))}, {x, scaled}, n.line, n.file)};
      continue;
    }
    map[i] = n.kind == NodeKind::Op ? out.add_op(n.op, std::move(args), n.fakes, n.line)
                                    : out.add_external(n.ext, std::move(args), n.fakes, n.line);
    out.nodes.back().file = n.file;
  }
  for (Ref r : g.outputs) out.outputs.push_back(remap(r));
  return out;
}

struct Built {
  Graph fw, bw;
};

// Builds the joint of e's graph (see the header comment). Fills t; returns the two graphs (or
// sets t.eager).
Built build(lua_State* L, const Entry& e, const CompileConfig& cfg, GraphInputs inputs, Training& t) {
  Built b;
  if (std::string why = unsupported(e.graph, e, cfg); !why.empty()) {
    t.eager = why;
    return b;
  }
  const Graph decomposed = decompose_dropouts(e.graph);
  const Graph& g = decomposed.nodes.empty() ? e.graph : decomposed;
  // the replay draws random numbers (dropout masks, rand ...): the stream is put back, so the
  // compiled forward of this call draws what eager would
  struct RestoreRng {
    RngState s = get_rng_state();
    ~RestoreRng() { set_rng_state(s); }
  } restore_rng;
  // the replay's inputs
  std::set<int> written;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op) continue;
    const OpSchema& s = schema(n.op);
    for (size_t i = 0; i < s.args.size() && i < n.args.size(); i++)
      if (s.args[i].mutated && n.args[i].kind == NodeArg::Kind::Ref)
        if (int in = root_input(g, n.args[i].refs[0]); in >= 0) written.insert(in);
  }
  std::vector<Tensor> ins;
  for (size_t j = 0; j < g.inputs.size(); j++) {
    const Tensor& x = *inputs[j];
    Tensor a;
    if (written.count(g.inputs[j])) {
      GradModeGuard off(false);
      a = x.clone();
    } else {
      a = x.as_strided(x.sizes(), x.strides(), x.offset());
    }
    a.impl()->requires_grad = x.requires_grad();
    if (x.requires_grad()) t.grad_inputs.push_back(int(j));
    ins.push_back(a);
  }
  std::vector<Stack> vals;
  {
    GradModeGuard on(true);
    try {
      vals = interpret(g, ins);
    } catch (const Error& err) {
      t.eager = std::string("replaying the forward failed: ") + err.what();
      return b;
    }
  }
  // differentiable outputs
  TensorList diff, tangents;
  std::map<RefKey, int> slot_of;
  for (Ref r : g.outputs) {
    int slot = -1;
    const Tensor& o = tensor_of(vals, r);
    if (g.nodes[size_t(r.node)].kind != NodeKind::Input && o.requires_grad()) {
      auto [it, fresh] = slot_of.try_emplace(key_of(r), int(diff.size()));
      if (fresh) {
        diff.push_back(o);
        GradModeGuard off(false);
        tangents.push_back(call1(Op::ones, {Value(IntList(o.sizes().begin(), o.sizes().end()))},
                                 {{"dtype", Value(o.dtype())}, {"device", Value(o.device())}}));
      }
      slot = it->second;
    }
    t.out_slot.push_back(slot);
  }
  t.n_diff = int(diff.size());
  if (diff.empty()) {
    t.no_backward = true;
    b.fw = g;
    return b;
  }
  // the forward's values by TensorImpl and by geometry
  std::unordered_map<const TensorImpl*, Ref> fw_impl;
  std::unordered_map<std::string, Ref> fw_geo;
  for (size_t i = 0; i < g.nodes.size(); i++) {
    Ref r{int(i), 0, -1};
    for (size_t o = 0; o < vals[i].size(); o++) {
      r.out = int(o);
      auto note = [&](const Tensor& x, int elem) {
        r.elem = elem;
        fw_impl[x.impl()] = r;
        if (!x.is_fake()) fw_geo[geometry(x)] = r;
      };
      if (vals[i][o].is_tensor()) note(vals[i][o].tensor(), -1);
      if (vals[i][o].is_tensor_list())
        for (size_t k = 0; k < vals[i][o].tensors().size(); k++) note(vals[i][o].tensors()[k], int(k));
    }
  }
  // record the backward
  Recorder rec;
  rec.fw_impl = &fw_impl;
  rec.fw_geo = &fw_geo;
  for (size_t k = 0; k < tangents.size(); k++) rec.bw[tangents[k].impl()] = Src{Src::K::Tangent, {}, int(k), 0, {}};
  TensorList targets;
  for (int j : t.grad_inputs) targets.push_back(ins[size_t(j)]);
  TensorList grads;
  try {
    ObserverScope scope(&rec);
    grads = autograd::grad(diff, targets, tangents, {.allow_unused = true});
  } catch (const Error& err) {
    t.eager = std::string("recording the backward failed: ") + err.what();
    return b;
  }
  if (!rec.failure.empty()) {
    t.eager = rec.failure;
    return b;
  }
  std::vector<Src> result(grads.size());
  std::vector<bool> has(grads.size(), false);
  for (size_t i = 0; i < grads.size(); i++) {
    if (!grads[i].defined()) continue;
    if (!rec.lookup(grads[i], &result[i])) {
      t.eager = "a gradient of the backward is a tensor the graphs do not name";
      return b;
    }
    has[i] = true;
  }
  // the records the gradients need (in-place records always)
  std::vector<bool> live(rec.recs.size(), false);
  for (size_t i = 0; i < result.size(); i++)
    if (has[i] && result[i].k == Src::K::Bw) live[size_t(result[i].index)] = true;
  for (size_t i = 0; i < rec.recs.size(); i++)
    for (const ArgSpec& a : schema(rec.recs[i].op).args) live[i] = live[i] || a.mutated;
  std::set<RefKey> needed;
  for (size_t i = rec.recs.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (const ArgSrc& a : rec.recs[i].args)
      for (const Src& s : a.srcs) {
        if (s.k == Src::K::Bw) live[size_t(s.index)] = true;
        if (s.k == Src::K::Fw) needed.insert(key_of(s.ref));
      }
  }
  for (size_t i = 0; i < result.size(); i++)
    if (has[i] && result[i].k == Src::K::Fw) needed.insert(key_of(result[i].ref));
  // saved or recomputed
  auto ref_of = [](const RefKey& k) { return Ref{std::get<0>(k), std::get<1>(k), std::get<2>(k)}; };
  auto is_input = [&](const RefKey& k) { return g.nodes[size_t(std::get<0>(k))].kind == NodeKind::Input; };
  std::set<RefKey> saved, recomputed;
  const bool recompute = config_bool(L, "aot_recompute", true) && g.dynamic_dims.empty();
  for (const RefKey& k : needed)
    if (is_input(k) || !recompute || !cheap_pointwise(g, ref_of(k))) saved.insert(k);
  std::function<bool(const RefKey&, int&)> can = [&](const RefKey& k, int& budget) {
    if (saved.count(k) || recomputed.count(k)) return true;
    if (is_input(k)) {  // an input the recomputation reads: passed to the backward as it is
      saved.insert(k);
      return true;
    }
    const Ref r = ref_of(k);
    if (!cheap_pointwise(g, r) || budget-- <= 0) return false;
    for (const NodeArg& a : g.nodes[size_t(r.node)].args)
      for (Ref x : a.refs)
        if (!can(key_of(x), budget)) return false;
    recomputed.insert(k);
    return true;
  };
  for (const RefKey& k : needed) {  // in node order
    if (saved.count(k)) continue;
    int budget = kRecomputeChain;
    if (!can(k, budget)) saved.insert(k);
  }
  for (const RefKey& k : needed) t.saved_naive += is_input(k) ? 0 : 1;
  // the forward with the saved values as extra outputs
  b.fw = g;
  std::vector<Ref> saved_refs;
  for (const RefKey& k : saved) {
    const Ref r = ref_of(k);
    saved_refs.push_back(r);
    if (is_input(k)) {
      const auto at = std::find(g.inputs.begin(), g.inputs.end(), r.node) - g.inputs.begin();
      t.saved.push_back({true, int(at)});
    } else {
      t.saved.push_back({false, int(b.fw.outputs.size() - g.outputs.size())});
      b.fw.outputs.push_back(r);
    }
  }
  // the backward graph
  Graph& bw = b.bw;
  std::map<RefKey, Ref> from_fw;
  for (size_t i = 0; i < saved_refs.size(); i++) {
    const Ref r = saved_refs[i];
    Tensor f = fake_like(tensor_of(vals, r));  // this call's sizes (a dynamic graph's fakes have the traced ones)
    f.impl()->requires_grad = false;
    from_fw[key_of(r)] = bw.add_input("saved_" + g.nodes[size_t(r.node)].name, "saved", f);
    t.bw_fakes.push_back(f);
  }
  std::vector<Ref> tangent_refs;
  for (size_t k = 0; k < tangents.size(); k++) {
    const Tensor& o = diff[k];
    Tensor f = Tensor::fake(o.sizes(), contiguous_strides(o.sizes()), o.dtype(), o.device());
    tangent_refs.push_back(bw.add_input("tangent_" + std::to_string(k + 1), "tangent", f));
    t.bw_fakes.push_back(f);
  }
  std::function<Ref(Ref)> emit_fw = [&](Ref r) -> Ref {
    if (auto it = from_fw.find(key_of(r)); it != from_fw.end()) return it->second;
    const Node& n = g.nodes[size_t(r.node)];
    std::vector<NodeArg> args;
    for (const NodeArg& a : n.args) {
      NodeArg m = a;
      for (Ref& x : m.refs) x = emit_fw(x);
      args.push_back(std::move(m));
    }
    std::vector<Ref> outs = bw.add_op(n.op, std::move(args), n.fakes, n.line);
    bw.nodes.back().file = n.file;
    Ref mine = outs[flat_index(n.fakes, r)];
    from_fw[key_of(r)] = mine;
    return mine;
  };
  std::vector<std::vector<Ref>> rec_refs(rec.recs.size());
  auto ref_for = [&](const Src& s) -> Ref {
    switch (s.k) {
      case Src::K::Fw: return emit_fw(s.ref);
      case Src::K::Tangent: return tangent_refs[size_t(s.index)];
      case Src::K::Bw: return rec_refs[size_t(s.index)][s.flat];
      case Src::K::Const: break;
    }
    return Ref{};
  };
  for (size_t i = 0; i < rec.recs.size(); i++) {
    if (!live[i]) continue;
    const Rec& r = rec.recs[i];
    std::vector<NodeArg> args;
    Stack fake_args;
    bool any_ref = false;
    for (const ArgSrc& a : r.args) {
      if (a.k == ArgSrc::K::Value) {
        args.push_back(NodeArg::constant_of(a.constant));
        fake_args.push_back(a.constant);
        continue;
      }
      std::vector<Ref> refs;
      TensorList fakes;
      bool consts = false;
      for (const Src& s : a.srcs) {
        if (s.k == Src::K::Const) {
          consts = true;
          fakes.push_back(s.constant.is_tensor() ? s.constant.tensor() : Tensor());
          continue;
        }
        refs.push_back(ref_for(s));
        fakes.push_back(bw.fake(refs.back()));
        any_ref = true;
      }
      if (a.k == ArgSrc::K::Tensor) {
        args.push_back(consts ? NodeArg::constant_of(a.srcs[0].constant) : NodeArg::ref(refs[0]));
        fake_args.push_back(Value(fakes[0]));
      } else {
        if (consts) {
          t.eager = std::string("the backward's ") + op_name(r.op) + " takes a list with constants";
          return b;
        }
        args.push_back(NodeArg::list(refs));
        fake_args.push_back(Value(fakes));
      }
    }
    Stack fakes;
    if (any_ref) {
      try {
        fakes = call(r.op, fake_args);
      } catch (const Error& err) {
        t.eager = std::string("the backward's ") + op_name(r.op) + " failed on fake tensors: " + err.what();
        return b;
      }
    } else {
      for (const Value& v : r.out) {
        if (v.is_tensor()) fakes.push_back(Value(fake_like(v.tensor())));
        if (v.is_tensor_list()) {
          TensorList l;
          for (const Tensor& x : v.tensors()) l.push_back(fake_like(x));
          fakes.push_back(Value(l));
        }
      }
    }
    rec_refs[i] = bw.add_op(r.op, std::move(args), std::move(fakes));
  }
  for (size_t i = 0; i < result.size(); i++) {
    if (!has[i]) {
      t.grad_out.push_back(-1);
      continue;
    }
    if (result[i].k == Src::K::Const) {
      t.eager = "a gradient of the backward is a constant";
      return b;
    }
    t.grad_out.push_back(int(bw.outputs.size()));
    bw.outputs.push_back(ref_for(result[i]));
  }
  return b;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Compiled compile_half(lua_State* L, const Graph& g, const CompileConfig& cfg, const std::string& name) {
  State& st = state();
  TC_CHECK(st.compiler.compile, CompileError, "no graph compiler is installed (tc::capture::install was given none)");
  CompileOptions options = cfg.backend_options();
  options.cudagraph_max_sizes = config_int(L, "cudagraph_max_sizes", options.cudagraph_max_sizes);
  auto t0 = std::chrono::steady_clock::now();
  Compiled c = st.compiler.compile(g, cfg.backend, options);
  const double ms = ms_since(t0);
  note_backend_report(L, name, c.report);
  st.stats.backend_compiles++;
  st.stats.backend_ms += ms;
  st.report.times.push_back({name, 0, ms, c.report.lower_ms, c.report.codegen_ms, c.report.compile_ms});
  return c;
}

std::shared_ptr<Training> make_training(lua_State* L, const Entry& e, const std::string& function,
                                        const CompileConfig& cfg, GraphInputs inputs) {
  State& st = state();
  auto t = std::make_shared<Training>();
  Built b = build(L, e, cfg, inputs, *t);
  st.stats.training_entries++;
  const bool log = log_enabled(L, "aot_graphs");
  if (!t->eager.empty()) {
    st.stats.training_eager++;
    st.report.fallbacks.push_back(function + ": its graph trains op by op with eager autograd (" + t->eager + ")");
    if (log) std::fprintf(stderr, "[tc aot_graphs] %s: runs op by op with eager autograd: %s\n", function.c_str(), t->eager.c_str());
    return t;
  }
  t->fw = compile_half(L, b.fw, cfg, function + " [forward]").run;
  int computed = 0;
  for (const Training::Saved& v : t->saved) computed += v.from_input ? 0 : 1;
  st.stats.saved_tensors += computed;
  if (log) {
    std::fprintf(stderr,
                 "[tc aot_graphs] %s forward (saves %d values it computes for the backward, %d without "
                 "recompute; passes %d inputs)\n%s",
                 function.c_str(), computed, t->saved_naive, int(t->saved.size()) - computed,
                 b.fw.print_code().c_str());
    if (!t->no_backward)
      std::fprintf(stderr, "[tc aot_graphs] %s backward\n%s", function.c_str(), b.bw.print_code().c_str());
  }
  std::string line = function + ": the forward saves " + std::to_string(computed) + " values for the backward (" +
                     std::to_string(t->saved_naive) + " without recompute)";
  if (t->no_backward) line += "; no output requires grad";
  else {
    line += "; backward graph of " + std::to_string(b.bw.num_ops()) + " ops:";
    for (const std::string& op : b.bw.op_names()) line += " " + op;
  }
  st.report.training.push_back(line);
  t->bw_graph = std::move(b.bw);
  t->cfg = std::make_shared<CompileConfig>(cfg);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  t->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  t->function = function;
  return t;
}

}  // namespace

std::vector<Tensor> run_training(lua_State* L, const Entry& e, const std::string& function,
                                 const CompileConfig& cfg, GraphInputs inputs) {
  if (std::vector<Tensor> split; run_ddp_split(L, e, function, cfg, inputs, &split)) return split;
  std::string key;
  for (auto [in, d] : e.graph.dynamic_dims) key += std::to_string(inputs[size_t(in)]->sizes()[size_t(d)]) + ",";
  std::shared_ptr<Training> t;
  for (auto& [k, v] : e.training)
    if (k == key) t = v;
  if (!t && e.training.size() >= kMaxSizes) {
    t = std::make_shared<Training>();
    t->eager = "more than " + std::to_string(kMaxSizes) + " sizes of its dynamic dims";
  } else if (!t) {
    t = make_training(L, e, function + (key.empty() ? "" : " (sizes " + key.substr(0, key.size() - 1) + ")"), cfg, inputs);
    e.training.emplace_back(key, t);
  }
  if (!t->eager.empty()) {
    std::vector<Tensor> ins;
    for (const Tensor* x : inputs) ins.push_back(*x);
    GradModeGuard on(true);
    return outputs_of(e.graph, interpret(e.graph, ins));
  }
  std::vector<Tensor> all;
  {
    GradModeGuard off(false);
    all = t->fw(inputs);
  }
  const size_t n = e.graph.outputs.size();
  if (t->no_backward) {
    all.resize(n);
    return all;
  }
  TensorList saved;
  saved.reserve(t->saved.size());
  for (const Training::Saved& s : t->saved) saved.push_back(s.from_input ? *inputs[size_t(s.index)] : all[n + size_t(s.index)]);
  all.resize(n);
  TensorList diff(size_t(t->n_diff)), ins;
  for (size_t k = 0; k < n; k++) {
    const int s = t->out_slot[k];
    if (s < 0) continue;
    if (diff[size_t(s)].defined())
      all[k] = diff[size_t(s)];  // the same value returned twice: one tensor, as eager
    else
      diff[size_t(s)] = all[k];
  }
  for (int j : t->grad_inputs) ins.push_back(*inputs[size_t(j)]);
  autograd::record_function(
      "CompiledFunctionBackward", ins, saved, diff,
      [t](const TensorList& saved, const TensorList& grads, bool create_graph) {
        TC_CHECK(!create_graph, NotImplementedError,
                 "create_graph=true through a function compiled with tc.compile: its backward is a compiled "
                 "graph, which is not differentiable (double backward); compute higher-order gradients "
                 "uncompiled (tc.compiler.disable, or call the function outside tc.compile)");
        std::vector<Tensor> in;
        in.reserve(saved.size() + grads.size());
        for (size_t i = 0; i < saved.size(); i++) in.push_back(conform(saved[i], t->bw_fakes[i]));
        for (size_t k = 0; k < grads.size(); k++) in.push_back(conform(grads[k], t->bw_fakes[saved.size() + k]));
        if (!t->bw) {
          t->bw = compile_half(t->L, t->bw_graph, *t->cfg, t->function + " [backward]").run;
          state().stats.backward_compiles++;
          t->bw_graph = Graph();
        }
        std::vector<Tensor> outs;
        {
          GradModeGuard off(false);
          outs = t->bw(borrow(in));
        }
        TensorList r(t->grad_out.size());
        for (size_t i = 0; i < r.size(); i++)
          if (t->grad_out[i] >= 0) r[i] = outs[size_t(t->grad_out[i])];
        return r;
      });
  return all;
}

}  // namespace tc::capture
