// The autograd tape: grad mode, recording of grad_fn nodes by the dispatcher, saved tensors with
// version checks, retain_grad and hooks. The backward walk is autograd_engine.cpp.
#include <algorithm>
#include <cctype>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd_internal.h"

namespace tc {

namespace {
thread_local bool t_grad_enabled = true;
}
bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

namespace autograd {

std::atomic<uint64_t> g_next_seq{1};

AutogradMeta& meta_of(const Tensor& t) {
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

void link_output(const Tensor& t, const std::shared_ptr<Node>& n, uint32_t nr) {
  AutogradMeta& m = meta_of(t);
  m.grad_fn = n;
  m.output_nr = nr;
  if (t.impl()->view_base) {
    const auto& bm = t.impl()->view_base->autograd;
    m.base_rebases = bm ? bm->rebases : 0;
  }
  if (!t.requires_grad()) Tensor(t).set_requires_grad(true);
}

namespace {

const std::shared_ptr<Node> kNoNode;

InputMeta input_meta(const Tensor& t) { return InputMeta{t.sizes(), t.dtype(), t.device()}; }

template <class F>
void for_each_tensor(const Stack& args, F f) {
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i].is_tensor()) f(i, args[i].tensor());
    if (args[i].is_tensor_list())
      for (const Tensor& t : args[i].tensors()) f(i, t);
  }
}

std::string shape_desc(const Tensor& t) { return std::string("[") + dtype_name(t.dtype()) + " " + shape_string(t.sizes()) + "]"; }

}  // namespace

const std::shared_ptr<Node>& grad_fn(const Tensor& t) {
  const auto& m = t.impl()->autograd;
  return m ? m->grad_fn : kNoNode;
}
bool is_leaf(const Tensor& t) { return !grad_fn(t); }

std::string node_name(const Node& n) {
  if (n.custom_name) return n.custom_name;
  std::string s;
  bool up = true;
  for (const char* c = op_name(n.op); *c; c++) {
    if (*c == '_') {
      up = true;
      continue;
    }
    s += up ? (char)std::toupper((unsigned char)*c) : *c;
    up = false;
  }
  return s + "Backward0";
}

std::string grad_fn_name(const Tensor& t) {
  const auto& f = grad_fn(t);
  return f ? node_name(*f) : "";
}

Edge edge_of(const Tensor& t) {
  Edge e;
  e.meta = input_meta(t);
  if (const auto& f = grad_fn(t)) {
    e.fn = f;
    e.nr = t.impl()->autograd->output_nr;
  } else if (t.requires_grad()) {
    e.leaf = t.impl_ptr();
  }
  return e;
}

// ---- recording ---------------------------------------------------------------------------------
bool should_record(const Stack& args) {
  if (!grad_enabled()) return false;
  bool any = false, fake = false;
  for_each_tensor(args, [&](size_t, const Tensor& t) {
    if (!t.defined()) return;
    fake |= t.is_fake();
    any |= t.impl()->view_base && !fake ? refresh_view(t) : t.requires_grad();
  });
  return any && !fake;  // capture traces fake tensors: nothing to record there
}

namespace {
// A leaf, or a view (of a view ...) of a leaf: in-place initialization (fill_, uniform_, normal_)
// may write into these without tc.no_grad(), as tc.nn's init code does (PyTorch would require it).
bool leaf_or_view_of_leaf(const Tensor& t) {
  const Node* n = grad_fn(t).get();
  if (!n) return true;
  while (n && schema(n->op).kind == OpKind::View && !n->next.empty()) {
    if (n->next[0].leaf) return true;
    n = n->next[0].fn.get();
  }
  return false;
}
bool initializer(Op op) { return op_grad(op).kind == Differentiability::NonDifferentiable; }
}  // namespace

void check_inplace(Op op, const Stack& args) {
  const OpSchema& s = schema(op);
  for (size_t i = 0; i < s.args.size(); i++) {
    if (!s.args[i].mutated) continue;
    if (args[i].is_tensor_list()) {  // Tensor[]! (the optimizer steps): leaves that require grad
      for (const Tensor& t : args[i].tensors())
        TC_CHECK(!(t.requires_grad() && is_leaf(t)), ValueError,
                 "%s(): a leaf tensor that requires grad is being used in an in-place operation (run it under "
                 "tc.no_grad(), or on x:detach())",
                 s.name);
      continue;
    }
    if (!args[i].is_tensor()) continue;
    const Tensor& t = args[i].tensor();
    if (initializer(op) && leaf_or_view_of_leaf(t)) continue;
    TC_CHECK(!(t.requires_grad() && is_leaf(t)), ValueError,
             "%s(): a leaf tensor that requires grad is being used in an in-place operation (modify it under "
             "tc.no_grad(), or work on x:detach())",
             s.name);
    bool others = false;
    for_each_tensor(args, [&](size_t j, const Tensor& u) { others |= j != i && u.defined() && u.requires_grad(); });
    if (t.impl()->view_base && (t.requires_grad() || others)) check_view_inplace(s.name, t);
  }
}

bool forward_decomposed(Op op, const Stack& args, Stack& out) {
  bool random = (op == Op::dropout && args[2].to_bool() && args[1].to_double() > 0) ||
                (op == Op::scaled_dot_product_attention && args[4].to_double() > 0);
  if (!random) return false;
  out = {Value(decomposition(op, args))};
  return true;
}

namespace {

// New outputs (not arguments given back) of an op that does not record: they require no grad.
void mark_outputs(Op op, const Stack& args, Stack& out, bool keep_requires_grad) {
  bool view = schema(op).kind == OpKind::View && op != Op::detach;
  auto visit = [&](const Tensor& o) {
    bool is_arg = false;
    for_each_tensor(args, [&](size_t, const Tensor& a) { is_arg |= a.defined() && a.same(o); });
    if (is_arg) return;
    if (view) note_view(args[0].tensor(), o);
    if (!keep_requires_grad && o.impl()->requires_grad) o.impl()->requires_grad = false;  // a new impl: no epoch bump
  };
  for (const Value& v : out) {
    if (v.is_tensor()) visit(v.tensor());
    if (v.is_tensor_list())
      for (const Tensor& t : v.tensors()) visit(t);
  }
}

std::vector<Tensor> flat_outputs(const Stack& out) {
  std::vector<Tensor> r;
  for (const Value& v : out) {
    if (v.is_tensor()) r.push_back(v.tensor());
    if (v.is_tensor_list())
      for (const Tensor& t : v.tensors()) r.push_back(t);
  }
  return r;
}

SavedVariable save(const Tensor& t, int need, bool is_output) {
  SavedVariable s;
  if (!t.defined() || need == 0) return s;
  s.version = t.version();
  s.is_output = is_output;
  if (need == 1) {
    s.data = Tensor::fake(t.sizes(), t.strides(), t.dtype(), t.device());
    s.check_version = false;
  } else if (is_output) {
    s.data = t.as_strided(t.sizes(), t.strides(), t.offset());
    s.data.impl()->requires_grad = false;
  } else {
    s.data = t;
  }
  return s;
}

// In-place ops that cut the history of the tensor they write (nothing differentiable flows in).
void cut_history(const Stack& args, const Stack& out) {
  for (const Tensor& o : flat_outputs(out)) {
    for_each_tensor(args, [&](size_t, const Tensor& a) {
      if (!a.defined() || !a.same(o)) return;
      if (o.impl()->autograd) o.impl()->autograd->grad_fn.reset();
      Tensor(o).set_requires_grad(false);
    });
  }
}

}  // namespace

void mark_new_outputs(Op op, const Stack& args, Stack& out) { mark_outputs(op, args, out, false); }

void record(Op op, const Stack& args, Stack& out) {
  const OpGrad& g = op_grad(op);
  const OpSchema& s = schema(op);
  bool inplace = false;
  for (const ArgSpec& a : s.args) inplace |= a.mutated && op != Op::batch_norm;
  const Tensor* written = inplace && args[0].is_tensor() ? &args[0].tensor() : nullptr;
  bool into_view = written && written->impl()->view_base && written->requires_grad();
  if (g.kind == Differentiability::NonDifferentiable) {
    if (into_view && !leaf_or_view_of_leaf(*written))
      rebase_view(*written, nullptr);
    else if (inplace && (!args[0].is_tensor() || !leaf_or_view_of_leaf(args[0].tensor())))
      cut_history(args, out);
    mark_outputs(op, args, out, false);
    return;
  }
  // input slots and the edges of those that require grad
  auto node = std::make_shared<Node>();
  node->op = op;
  node->rule = &g;
  node->first_slot.assign(args.size(), -1);
  node->slot_count.assign(args.size(), 0);
  std::vector<bool> slot_needs;
  for (size_t i = 0; i < args.size(); i++) {
    auto add = [&](const Tensor& t) {
      bool need = g.kind == Differentiability::NotImplemented ? (t.defined() && t.requires_grad())
                                                                : (g.differentiable_arg[i] && t.defined() && t.requires_grad());
      node->next.push_back(need ? edge_of(t) : Edge{});
      slot_needs.push_back(need);
    };
    if (args[i].is_tensor()) {
      node->first_slot[i] = (int)node->next.size();
      add(args[i].tensor());
    } else if (args[i].is_tensor_list()) {
      node->first_slot[i] = (int)node->next.size();
      for (const Tensor& t : args[i].tensors()) add(t);
    }
    if (node->first_slot[i] >= 0) node->slot_count[i] = (int)node->next.size() - node->first_slot[i];
  }
  bool any = std::find(slot_needs.begin(), slot_needs.end(), true) != slot_needs.end();
  if (!any) {
    if (into_view)
      rebase_view(*written, nullptr);
    else if (inplace)
      cut_history(args, out);
    mark_outputs(op, args, out, false);
    return;
  }
  // what the active formulas read
  std::vector<bool> active(g.formulas.size(), false);
  for (size_t f = 0; f < g.formulas.size(); f++)
    for (int a : formula_inputs(*g.formulas[f])) {
      int first = node->first_slot[a];
      if (first < 0) continue;
      size_t n = args[a].is_tensor_list() ? args[a].tensors().size() : 1;
      for (size_t k = 0; k < n; k++) active[f] = active[f] || slot_needs[first + k];
    }
  SaveNeeds needs = save_needs(g, op, active);
  node->args.resize(args.size());
  node->saved.resize(args.size());
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i].is_tensor()) {
      node->saved[i].push_back(save(args[i].tensor(), needs.args[i], false));
      if (s.args[i].mutated) node->saved[i].back().check_version = false;
    } else if (args[i].is_tensor_list()) {
      for (const Tensor& t : args[i].tensors()) node->saved[i].push_back(save(t, needs.args[i], false));
    } else {
      node->args[i] = args[i];
    }
  }
  std::vector<Tensor> outs = flat_outputs(out);
  node->seq = g_next_seq++;
  node->pre_hooks.resize(outs.size());
  node->retained.resize(outs.size());
  for (size_t k = 0; k < outs.size(); k++) {
    const Tensor& o = outs[k];
    node->outputs.push_back(input_meta(o));
    node->results.push_back(save(o, k < needs.results.size() ? needs.results[k] : 0, true));
    node->results.back().owner = node;
    node->results.back().output_nr = (uint32_t)k;
  }
  mark_outputs(op, args, out, true);
  for (size_t k = 0; k < outs.size(); k++) {
    const Tensor& o = outs[k];
    bool is_arg = false;
    for_each_tensor(args, [&](size_t i, const Tensor& a) { is_arg |= a.defined() && a.same(o) && !s.args[i].mutated; });
    if (is_arg) continue;  // an op that gave back its input (contiguous of a contiguous tensor)
    if (!is_floating(o.dtype())) {
      if (o.impl()->requires_grad) Tensor(o).set_requires_grad(false);
      continue;
    }
    if (written && o.same(*written) && o.impl()->view_base) {
      rebase_view(o, node);  // an in-place write into a view: the base's history changes
      continue;
    }
    link_output(o, node, (uint32_t)k);
  }
}

// ---- saved tensors -------------------------------------------------------------------------------
Tensor unpack(const SavedVariable& s, const Node& n, const char* what) {
  TC_CHECK(!n.released, ValueError,
           "trying to backward through the graph a second time (or to read saved tensors after they were freed): "
           "%s freed the tensors it saved when the graph was first run backward; pass {retain_graph=true} to "
           "backward() or tc.autograd.grad() the first time to keep them",
           node_name(n).c_str());
  TC_ASSERT(s.data.defined(), "a formula read a tensor the tape did not save");
  if (s.check_version && s.data.version() != s.version) {
    TC_FAIL(ValueError,
            "one of the variables needed for gradient computation has been modified by an in-place operation: "
            "%s, %s of %s, is at version %llu; expected version %llu instead (an in-place op such as add_, "
            "copy_ or an indexed assignment changed it after %s saved it; use the out-of-place op or :clone())",
            shape_desc(s.data).c_str(), what, node_name(n).c_str(), (unsigned long long)s.data.version(),
            (unsigned long long)s.version, op_name(n.op));
  }
  if (!s.is_output || !grad_enabled() || s.data.is_fake()) return s.data;
  // building a differentiable backward: the output again, with its history
  Tensor t = s.data.as_strided(s.data.sizes(), s.data.strides(), s.data.offset());
  if (auto owner = s.owner.lock()) {
    t.impl()->requires_grad = true;
    t.impl()->autograd = std::make_shared<AutogradMeta>();
    t.impl()->autograd->grad_fn = owner;
    t.impl()->autograd->output_nr = s.output_nr;
  }
  return t;
}

void retain_grad(const Tensor& t) {
  TC_CHECK(t.requires_grad(), ValueError, "can't retain_grad on a tensor that has requires_grad=false");
  if (is_leaf(t)) return;  // leaves keep their grad anyway
  AutogradMeta& m = meta_of(t);
  m.retains_grad = true;
  m.grad_fn->retained[m.output_nr] = t.impl_ptr();
}

bool retains_grad(const Tensor& t) { return t.impl()->autograd && t.impl()->autograd->retains_grad; }

namespace {
int g_next_hook = 1;
}

int register_hook(const Tensor& t, Hook h) {
  TC_CHECK(t.requires_grad(), ValueError, "cannot register a hook on a tensor that doesn't require gradient");
  int id = g_next_hook++;
  AutogradMeta& m = meta_of(t);
  if (m.grad_fn)
    m.grad_fn->pre_hooks[m.output_nr].emplace_back(id, std::move(h));
  else
    m.hooks.emplace_back(id, std::move(h));
  return id;
}

void remove_hook(const Tensor& t, int id) {
  auto& m = t.impl()->autograd;
  if (!m) return;
  auto drop = [id](std::vector<std::pair<int, Hook>>& v) {
    std::erase_if(v, [id](const auto& p) { return p.first == id; });
  };
  drop(m->hooks);
  std::erase_if(m->post_hooks, [id](const auto& p) { return p.first == id; });
  if (m->grad_fn) drop(m->grad_fn->pre_hooks[m->output_nr]);
}

int register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateHook h) {
  TC_CHECK(t.requires_grad(), ValueError, "cannot register a hook on a tensor that doesn't require gradient");
  AutogradMeta& m = meta_of(t);
  TC_CHECK(!m.grad_fn, ValueError, "post accumulate grad hooks cannot be registered on non-leaf tensors");
  int id = g_next_hook++;
  m.post_hooks.emplace_back(id, std::move(h));
  return id;
}

}  // namespace autograd
}  // namespace tc
