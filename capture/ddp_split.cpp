// Compiled DDP: splitting a training graph at gradient-bucket boundaries (see ddp_split.h).
#include "ddp_split.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <unordered_map>

#include "capture_state.h"
#include "entry.h"
#include "lua_binding.h"
#include "tc/autograd.h"

namespace tc::capture {

namespace {

// The marked parameters: TensorImpl -> (the parameter, while it lives; its DDP's bucket cap).
struct Mark {
  std::weak_ptr<TensorImpl> param;
  int64_t cap_bytes;
};
std::unordered_map<const TensorImpl*, Mark>& marks() {
  static std::unordered_map<const TensorImpl*, Mark> m;
  return m;
}

using RefKey = std::tuple<int, int, int>;
RefKey key_of(Ref r) { return {r.node, r.out, r.elem}; }

}  // namespace

DdpPlan plan_ddp_split(const Graph& g, const std::vector<int64_t>& params_bytes, const std::vector<int>& same,
                       int64_t cap_bytes) {
  DdpPlan plan;
  plan.piece.assign(g.nodes.size(), -1);
  std::vector<int> ops;  // op node indices in order
  for (size_t i = 0; i < g.nodes.size(); i++)
    if (g.nodes[i].kind != NodeKind::Input) ops.push_back(int(i));
  std::vector<int> input_of(g.nodes.size(), -1);  // a parameter is one input however many sources reach it
  for (size_t j = 0; j < g.inputs.size(); j++) input_of[size_t(g.inputs[j])] = same[j];
  int64_t total = 0;
  int nparams = 0;
  for (int64_t b : params_bytes) total += b, nparams += b > 0 ? 1 : 0;
  if (nparams == 0) return plan;
  // no cut at position p (before ops[p]) where one parameter is used on both sides, or an op
  // writes in place into a value made on the other side
  std::vector<int> blocked(ops.size() + 1, 0);  // difference array over positions
  auto block = [&](int from, int to) {  // positions from+1 .. to
    if (to > from) blocked[size_t(from + 1)]++, blocked[size_t(to + 1)]--;
  };
  std::vector<int> pos(g.nodes.size(), -1);
  for (size_t p = 0; p < ops.size(); p++) pos[size_t(ops[p])] = int(p);
  std::vector<int> first_use(g.inputs.size(), -1);  // per parameter: the op position of its first use
  for (size_t p = 0; p < ops.size(); p++) {
    const Node& n = g.nodes[size_t(ops[p])];
    for (size_t a = 0; a < n.args.size(); a++) {
      for (Ref r : n.args[a].refs) {
        const int in = input_of[size_t(r.node)];
        if (in >= 0 && params_bytes[size_t(in)] > 0 && first_use[size_t(in)] < 0) first_use[size_t(in)] = int(p);
        if (n.kind == NodeKind::Op && a < schema(n.op).args.size() && schema(n.op).args[a].mutated) {
          const int root = g.view_root(r);
          if (pos[size_t(root)] >= 0) block(pos[size_t(root)], int(p));
        }
      }
    }
  }
  std::vector<bool> can_cut(ops.size() + 1, false);
  for (int p = 0, run = 0; p <= int(ops.size()); p++) {
    run += blocked[size_t(p)];
    can_cut[size_t(p)] = p > 0 && p < int(ops.size()) && run == 0;
  }
  // backwards: a new subgraph once the current one's parameters fill a bucket
  std::vector<int> rev(ops.size(), 0);
  int cur = 0, deferred = 0;
  int64_t bytes = 0;
  for (int p = int(ops.size()) - 1; p >= 0; p--) {
    if (bytes >= cap_bytes && bytes > 0) {
      if (can_cut[size_t(p + 1)]) {
        cur++;
        bytes = 0;
      } else {
        deferred++;
      }
    }
    rev[size_t(p)] = cur;
    // a parameter's gradient is accumulated by the subgraph of its first use (ddp_split.h)
    for (size_t in = 0; in < first_use.size(); in++)
      if (first_use[in] == p) bytes += params_bytes[in];
  }
  // ops before the first parameter's use (a parameter-free preamble) join the next subgraph
  if (bytes == 0 && cur > 0) {
    for (int& r : rev)
      if (r == cur) r = cur - 1;
    cur--;
  }
  plan.pieces = cur + 1;
  for (size_t p = 0; p < ops.size(); p++) plan.piece[size_t(ops[p])] = cur - rev[p];
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d DDP parameters (%lld bytes), buckets of %lld bytes", nparams,
                static_cast<long long>(total), static_cast<long long>(cap_bytes));
  plan.why = plan.pieces > 1 ? "DDP graph split into " + std::to_string(plan.pieces) +
                                   " subgraphs where its parameters fill a bucket, in backward order (" + buf + ")"
                             : std::string("DDP graph not split (") + buf + ")";
  if (deferred > 0)
    plan.why += "; cuts moved on by " + std::to_string(deferred) + " ops: an in-place write into a value of the other side";
  return plan;
}

// One subgraph: a training entry of its own, and where its inputs come from.
struct DdpSplit {
  bool split = false;
  struct Piece {
    Entry entry;
    std::vector<RefKey> in;  // per input: the original graph's value (an Input node: (node, 0, -1))
    std::vector<RefKey> out;  // per output: the original graph's value
  };
  std::vector<Piece> pieces;
};

namespace {

Tensor fake_input(const Tensor& f, bool requires_grad) {
  Tensor c = Tensor::fake(f.sizes(), f.strides(), f.dtype(), f.device());
  c.impl()->offset = f.offset();
  c.impl()->requires_grad = requires_grad;
  return c;
}

std::shared_ptr<DdpSplit> make_split(lua_State* L, const Entry& e, const std::string& function, GraphInputs inputs) {
  auto s = std::make_shared<DdpSplit>();
  const Graph& g = e.graph;
  if (!e.number_inputs.empty() || !g.dynamic_dims.empty()) return s;
  std::vector<int64_t> bytes(g.inputs.size(), 0);
  std::vector<int> same(g.inputs.size());
  std::unordered_map<const TensorImpl*, int> first;
  int64_t cap = -1;
  auto& m = marks();
  for (size_t j = 0; j < g.inputs.size(); j++) {
    same[j] = first.try_emplace(inputs[j]->impl(), int(j)).first->second;
    if (same[j] != int(j)) continue;
    auto it = m.find(inputs[j]->impl());
    if (it == m.end()) continue;
    if (it->second.param.lock().get() != inputs[j]->impl()) {
      m.erase(it);  // a parameter that died; its address was reused
      continue;
    }
    bytes[j] = int64_t(inputs[j]->numel()) * int64_t(inputs[j]->itemsize());
    cap = cap < 0 ? it->second.cap_bytes : std::min(cap, it->second.cap_bytes);
  }
  if (cap < 0) return s;
  const DdpPlan plan = plan_ddp_split(g, bytes, same, cap);
  State& st = state();
  st.report.training.push_back(function + ": " + plan.why);
  if (log_enabled(L, "aot_graphs")) std::fprintf(stderr, "[tc aot_graphs] %s: %s\n", function.c_str(), plan.why.c_str());
  if (plan.pieces < 2) return s;
  st.stats.ddp_split_graphs++;
  st.stats.ddp_subgraphs += plan.pieces;
  // which values each subgraph needs from outside itself, and which it gives to later ones
  std::vector<bool> rg(g.nodes.size(), false);  // requires grad when the graph runs
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) {
      rg[i] = n.fakes[0].tensor().requires_grad();
      continue;
    }
    if (n.kind == NodeKind::Op && autograd::differentiability(n.op) == autograd::Differentiability::NonDifferentiable)
      continue;
    for (const NodeArg& a : n.args)
      for (Ref r : a.refs) rg[i] = rg[i] || rg[size_t(r.node)];
  }
  s->pieces.resize(size_t(plan.pieces));
  // per input that requires grad (by its first input node, as `same`): the subgraph of its first use
  std::vector<int> first_piece(g.inputs.size(), -1);
  std::vector<int> input_index(g.nodes.size(), -1);
  for (size_t j = 0; j < g.inputs.size(); j++) input_index[size_t(g.inputs[j])] = int(j);
  for (size_t i = 0; i < g.nodes.size(); i++)
    for (const NodeArg& a : g.nodes[i].args)
      for (Ref r : a.refs)
        if (const int j = input_index[size_t(r.node)]; j >= 0 && rg[size_t(r.node)] && first_piece[size_t(same[size_t(j)])] < 0)
          first_piece[size_t(same[size_t(j)])] = plan.piece[i];
  std::vector<std::map<RefKey, Ref>> local(size_t(plan.pieces));  // per subgraph: original value -> its Ref
  std::function<Ref(int, Ref)> need = [&](int k, Ref r) -> Ref {
    auto& map = local[size_t(k)];
    if (auto it = map.find(key_of(r)); it != map.end()) return it->second;
    const Node& src = g.nodes[size_t(r.node)];
    DdpSplit::Piece& piece = s->pieces[size_t(k)];
    std::string name = src.name;
    const int j = input_index[size_t(r.node)];
    if (const int f = j >= 0 ? first_piece[size_t(same[size_t(j)])] : -1; f >= 0 && f != k) {
      // an input that requires grad, used by an earlier subgraph f: a view of it that f makes (and
      // returns), so its gradients from here flow back through f's node and it is accumulated once
      const Ref in_f = need(f, Ref{g.inputs[size_t(same[size_t(j)])], 0, -1});
      const RefKey alias{r.node, -1, -1};
      auto& fl = local[size_t(f)];
      if (!fl.count(alias)) {
        Graph& fg = s->pieces[size_t(f)].entry.graph;
        const Tensor& fake = fg.fake(in_f);
        const IntList sizes(fake.sizes().begin(), fake.sizes().end());
        fl[alias] = fg.add_op(Op::view, {NodeArg::ref(in_f), NodeArg::constant_of(Value(sizes))},
                              call(Op::view, {Value(fake), Value(sizes)}))[0];
        s->pieces[size_t(f)].out.push_back(alias);
        fg.outputs.push_back(fl[alias]);
      }
      Ref mine = piece.entry.graph.add_input(name + "_view", "subgraph", fake_input(g.fake(r), true));
      piece.in.push_back(alias);
      map[key_of(r)] = mine;
      return mine;
    }
    if (src.kind != NodeKind::Input) {
      name += r.elem >= 0 ? "_" + std::to_string(r.elem) : "";
      auto& from = s->pieces[size_t(plan.piece[size_t(r.node)])];
      if (std::find(from.out.begin(), from.out.end(), key_of(r)) == from.out.end()) {
        from.out.push_back(key_of(r));
        from.entry.graph.outputs.push_back(local[size_t(plan.piece[size_t(r.node)])].at(key_of(r)));
      }
    }
    Ref mine = piece.entry.graph.add_input(name, src.kind == NodeKind::Input ? src.source : "subgraph",
                                           fake_input(g.fake(r), rg[size_t(r.node)]));
    piece.in.push_back(key_of(r));
    map[key_of(r)] = mine;
    return mine;
  };
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) continue;
    const int k = plan.piece[i];
    std::vector<NodeArg> args = n.args;
    for (NodeArg& a : args)
      for (Ref& r : a.refs) r = need(k, r);
    Graph& sg = s->pieces[size_t(k)].entry.graph;
    std::vector<Ref> outs = n.kind == NodeKind::Op ? sg.add_op(n.op, std::move(args), n.fakes, n.line)
                                                   : sg.add_external(n.ext, std::move(args), n.fakes, n.line);
    sg.nodes.back().file = n.file;
    // the Refs add_op returns are flat over the node's tensors; the original's keys are (out, elem)
    size_t flat = 0;
    for (size_t o = 0; o < n.fakes.size(); o++) {
      if (n.fakes[o].is_tensor_list()) {
        for (size_t x = 0; x < n.fakes[o].tensors().size(); x++) local[size_t(k)][{int(i), int(o), int(x)}] = outs[flat++];
      } else {
        local[size_t(k)][{int(i), int(o), -1}] = outs[flat++];
      }
    }
  }
  for (Ref r : g.outputs) {
    if (g.nodes[size_t(r.node)].kind == NodeKind::Input) continue;
    const int k = plan.piece[size_t(r.node)];
    auto& piece = s->pieces[size_t(k)];
    if (std::find(piece.out.begin(), piece.out.end(), key_of(r)) == piece.out.end()) {
      piece.out.push_back(key_of(r));
      piece.entry.graph.outputs.push_back(local[size_t(k)].at(key_of(r)));
    }
  }
  for (auto& p : s->pieces) {
    p.entry.trains = true;
    p.entry.ddp_split = std::make_shared<DdpSplit>();  // decided: not split again
  }
  s->split = true;
  return s;
}

}  // namespace

bool run_ddp_split(lua_State* L, const Entry& e, const std::string& function, const CompileConfig& cfg,
                   GraphInputs inputs, std::vector<Tensor>* out) {
  if (!e.ddp_split) {
    if (marks().empty()) return false;
    e.ddp_split = make_split(L, e, function, inputs);
  }
  if (!e.ddp_split->split) return false;
  const Graph& g = e.graph;
  std::map<RefKey, Tensor> vals;
  for (size_t j = 0; j < g.inputs.size(); j++) vals[{g.inputs[j], 0, -1}] = *inputs[j];
  const auto& pieces = e.ddp_split->pieces;
  for (size_t k = 0; k < pieces.size(); k++) {
    const DdpSplit::Piece& p = pieces[k];
    std::vector<Tensor> ins;
    ins.reserve(p.in.size());
    for (const RefKey& r : p.in) ins.push_back(vals.at(r));
    std::vector<Tensor> outs = run_training(L, p.entry,
                                            function + " [DDP subgraph " + std::to_string(k + 1) + "/" +
                                                std::to_string(pieces.size()) + "]",
                                            cfg, borrow(ins));
    for (size_t o = 0; o < p.out.size(); o++) vals[p.out[o]] = outs[o];
  }
  out->clear();
  for (Ref r : g.outputs) out->push_back(vals.at(g.nodes[size_t(r.node)].kind == NodeKind::Input ? RefKey{r.node, 0, -1} : key_of(r)));
  return true;
}

int l_ddp_mark_parameters(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const lua_Number cap = luaL_checknumber(L, 2);
  luaL_argcheck(L, cap >= 0, 2, "the bucket cap must be a non-negative number of bytes");
  auto& m = marks();
  for (auto it = m.begin(); it != m.end();)  // forget parameters that died
    it = it->second.param.expired() ? m.erase(it) : std::next(it);
  for (lua_Integer i = 1; i <= lua_Integer(lua_rawlen(L, 1)); i++) {
    lua_rawgeti(L, 1, i);
    const Tensor* t = lua::to_tensor(L, -1);
    if (t == nullptr) luaL_error(L, "_ddp_mark_parameters: element %d of the list is not a tensor", int(i));
    m[t->impl()] = Mark{t->impl_ptr(), int64_t(cap)};
    lua_pop(L, 1);
  }
  return 0;
}

}  // namespace tc::capture
