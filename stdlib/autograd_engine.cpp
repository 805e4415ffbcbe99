// The autograd engine: the backward walk over grad_fn nodes (run_backward) and its entry points
// backward() and grad().
#include <cstdio>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd_internal.h"
#include "tc/config.h"

namespace tc::autograd {

// ---- the engine ------------------------------------------------------------------------------------
namespace {

Tensor zeros_of(const InputMeta& m) {
  return op(Op::zeros, {Value(IntList(m.sizes.begin(), m.sizes.end()))},
            {{"dtype", Value(m.dtype)}, {"device", Value(m.device)}});
}

// The gradient made to fit its input: summed over broadcast dims, in the input's dtype and device.
Tensor fit(Tensor g, const InputMeta& m, const Node* n, size_t slot) {
  if (g.sizes() != m.sizes) {
    int64_t lead = g.dim() - (int64_t)m.sizes.size();
    bool ok = lead >= 0;
    IntList dims;
    for (int64_t d = 0; ok && d < g.dim(); d++) {
      if (d < lead) {
        dims.push_back(d + 1);
      } else if (m.sizes[d - lead] != g.sizes()[d]) {
        ok = m.sizes[d - lead] == 1;
        dims.push_back(d + 1);
      }
    }
    TC_CHECK(ok, ShapeError, "%s returned a gradient of shape %s for input %zu, which expects shape %s",
             n ? node_name(*n).c_str() : "backward", shape_string(g.sizes()).c_str(), slot + 1,
             shape_string(m.sizes).c_str());
    if (!dims.empty()) g = op(Op::sum, {g, dims, true});
    g = op(Op::reshape, {g, IntList(m.sizes.begin(), m.sizes.end())});
  }
  if (g.dtype() != m.dtype) g = op(Op::to_dtype, {g, Value(m.dtype)});
  if (g.device() != m.device) g = op(Op::to_device, {g, Value(m.device)});
  return g;
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  return op(Op::add, {a, b});
}

Tensor run_hooks(const std::vector<std::pair<int, Hook>>& hooks, Tensor g) {
  for (const auto& [id, h] : hooks) {
    Tensor r = h(g);
    if (r.defined()) g = r;
  }
  return g;
}

// Why the gradient g (the caller's reference) may not become a leaf's .grad as it is, or null
// when it may (PyTorch's AccumulateGrad steals such a buffer): something else holds it or its
// memory (another tensor over its storage: a view of a tensor someone keeps, or of a sibling
// gradient; a view's own base, held by the view alone, does not count), it has history, or it
// lacks the leaf's layout or overlaps itself. A stolen .grad can then be written into
// (zero_grad(set_to_none = false), clip_grad_norm_) without changing anything else.
const char* why_copied(const Tensor& g, const TensorImpl& leaf) {
  if (g.impl_ptr().use_count() != 1) return "held elsewhere";
  if (!g.storage()) return "no storage";
  long owners = 1;  // the storages' holders that only g reaches: g, its base if only g holds it
  if (const std::shared_ptr<TensorImpl>& base = g.impl()->view_base) {
    if (base.use_count() != 1) return "a view of a tensor held elsewhere";
    if (base->storage == g.storage()) owners++;
  }
  if (g.storage().use_count() != owners) return "its memory is shared";
  if (g.requires_grad()) return "it has history";
  if (g.sizes() != leaf.sizes || g.strides() != leaf.strides) return "not in the leaf's layout";
  for (int64_t d = 0; d < g.dim(); d++)
    if (g.stride(d) == 0 && g.size(d) > 1) return "it overlaps itself";
  return nullptr;
}

// TC_DEBUG >= 1: the first gradients copied into .grad, with why (at most kCopiesShown).
void report_copy(const Tensor& g, const char* why) {
  static int shown = 0;
  constexpr int kCopiesShown = 8;
  if (tc::debug_level() < 1 || shown >= kCopiesShown) return;
  shown++;
  std::fprintf(stderr, "tc debug: autograd: a %s gradient is copied into .grad: %s\n", shape_string(g.sizes()).c_str(),
               why);
}

// Accumulates a leaf's summed gradient of this backward into its .grad, then its post-accumulate
// hooks. A first gradient that no one else holds becomes .grad without a copy (why_copied).
void accumulate_into_leaf(const Task& task, const Edge& e, const Tensor& g) {
  TensorImpl* leaf = e.leaf.get();
  std::shared_ptr<TensorImpl>& slot = leaf->grad;
  if (!slot) {
    const char* why = task.create_graph ? nullptr : why_copied(g, *leaf);
    if (why) report_copy(g, why);
    Tensor own = why ? op(Op::clone, {g}) : g;
    if (!task.create_graph) own.impl()->requires_grad = false;
    slot = own.impl_ptr();
  } else {
    slot = accumulate(Tensor(slot), g).impl_ptr();
  }
  if (task.run_hooks && leaf->autograd && !leaf->autograd->post_hooks.empty()) {
    auto hooks = leaf->autograd->post_hooks;  // a hook may remove hooks
    Tensor t(e.leaf);
    for (const auto& [id, h] : hooks) h(t);
  }
}

// The callbacks queued during the innermost running backward (queue_callback); run when it ends.
thread_local std::vector<std::vector<std::function<void()>>*> t_callbacks;

// Scopes one user-level backward: callbacks queued inside it run when the walk succeeded.
struct CallbackScope {
  std::vector<std::function<void()>> queued;
  CallbackScope() { t_callbacks.push_back(&queued); }
  ~CallbackScope() { t_callbacks.pop_back(); }
  void run() {
    for (size_t i = 0; i < queued.size(); i++) {  // a callback may queue more
      std::function<void()> f = queued[i];
      f();
    }
  }
};

int target_of(const Task& task, const Edge& e) {
  for (size_t i = 0; i < task.targets.size(); i++) {
    const Edge& t = task.targets[i];
    if (e.leaf ? t.leaf == e.leaf : (t.fn == e.fn && t.nr == e.nr && e.fn)) return (int)i;
  }
  return -1;
}

}  // namespace

void run_backward(Task& task, const std::vector<std::pair<Edge, Tensor>>& roots) {
  GradModeGuard mode(task.create_graph);
  bool capturing = !task.targets.empty() || !task.accumulate;
  task.captured.assign(task.targets.size(), Tensor());
  // the nodes of this task and the number of edges into each
  std::unordered_map<Node*, int> deps;
  // a leaf is PyTorch's AccumulateGrad node: its gradients from every use are summed, and it gets
  // them (hooks, .grad) once, when the last edge into it has been walked
  std::unordered_map<TensorImpl*, int> leaf_deps;
  std::vector<Node*> order;  // discovery order
  std::vector<Node*> stack;
  auto in_task = [&](const std::shared_ptr<Node>& f) { return f && f->seq >= task.min_seq; };
  for (const auto& [e, g] : roots) {
    if (e.leaf) leaf_deps[e.leaf.get()]++;
    if (in_task(e.fn) && !deps.count(e.fn.get())) {
      deps[e.fn.get()] = 0;
      stack.push_back(e.fn.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next) {
      if (e.leaf) leaf_deps[e.leaf.get()]++;
      if (!in_task(e.fn)) continue;
      auto [it, fresh] = deps.try_emplace(e.fn.get(), 0);
      it->second++;
      if (fresh) stack.push_back(e.fn.get());
    }
  }
  // with targets: only the nodes from which a target can be reached run
  std::unordered_set<Node*> needed;
  if (capturing) {
    std::unordered_map<Node*, int> left = deps;
    std::vector<Node*> topo, ready;
    for (Node* n : order)
      if (left[n] == 0) ready.push_back(n);
    while (!ready.empty()) {
      Node* n = ready.back();
      ready.pop_back();
      topo.push_back(n);
      for (const Edge& e : n->next)
        if (in_task(e.fn) && --left[e.fn.get()] == 0) ready.push_back(e.fn.get());
    }
    for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
      Node* n = *it;
      for (const Edge& e : n->next)
        if (e.defined() && (target_of(task, e) >= 0 || (e.fn && needed.count(e.fn.get())))) needed.insert(n);
    }
  }
  // input buffers and the ready queue (latest node first)
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto cmp = [](Node* a, Node* b) { return a->seq < b->seq; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  std::unordered_map<Node*, std::shared_ptr<Node>> alive;  // keeps nodes alive while they run
  std::unordered_map<TensorImpl*, Tensor> leaf_sums;
  auto pass = [&](const Edge& e, const Tensor& g, const Node* from, size_t slot) {
    if (!e.defined() || !g.defined()) return;
    Tensor fitted = fit(g, e.meta, from, slot);
    int t = target_of(task, e);
    if (e.leaf) {
      if (t >= 0 || !capturing) leaf_sums[e.leaf.get()] = accumulate(leaf_sums[e.leaf.get()], fitted);
      return;
    }
    if (t >= 0) task.captured[t] = accumulate(task.captured[t], fitted);
    if (!in_task(e.fn)) return;
    auto& buf = buffers[e.fn.get()];
    buf.resize(e.fn->outputs.size());
    buf[e.nr] = accumulate(buf[e.nr], fitted);
    alive[e.fn.get()] = e.fn;
  };
  // after an edge into a leaf was walked (with or without a gradient)
  auto leaf_walked = [&](const Edge& e) {
    if (!e.leaf || --leaf_deps[e.leaf.get()] > 0) return;
    auto it = leaf_sums.find(e.leaf.get());
    if (it == leaf_sums.end()) return;
    Tensor g = std::move(it->second);
    leaf_sums.erase(it);
    TensorImpl* leaf = e.leaf.get();
    if (task.run_hooks && leaf->autograd && !leaf->autograd->hooks.empty()) g = run_hooks(leaf->autograd->hooks, g);
    int t = target_of(task, e);
    if (t >= 0) task.captured[t] = accumulate(task.captured[t], g);
    if (!capturing) accumulate_into_leaf(task, e, g);
  };
  for (const auto& [e, g] : roots) pass(e, g, nullptr, 0);
  for (const auto& [e, g] : roots) leaf_walked(e);
  for (Node* n : order)
    if (deps[n] == 0) ready.push(n);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[n]);
    buffers.erase(n);
    grads.resize(n->outputs.size());
    bool any = false;
    for (size_t k = 0; k < grads.size(); k++) {
      if (!grads[k].defined()) continue;
      if (task.run_hooks && !n->pre_hooks[k].empty()) grads[k] = run_hooks(n->pre_hooks[k], grads[k]);
      if (task.run_hooks && task.accumulate)
        if (auto r = n->retained[k].lock()) {
          Tensor g = task.create_graph ? grads[k] : op(Op::clone, {grads[k]});
          r->grad = accumulate(r->grad ? Tensor(r->grad) : Tensor(), g).impl_ptr();
        }
      any = true;
    }
    bool run = any && (!capturing || needed.count(n));
    if (run) {
      for (size_t k = 0; k < grads.size(); k++)
        if (!grads[k].defined()) grads[k] = zeros_of(n->outputs[k]);
      std::vector<Tensor> in = apply_formulas(*n, grads, task.create_graph);
      for (size_t s = 0; s < n->next.size(); s++) pass(n->next[s], s < in.size() ? in[s] : Tensor(), n, s);
    }
    grads.clear();  // (a formula may pass a gradient through: a leaf may then own it, why_copied)
    if (!task.keep_graph) {
      n->released = true;
      for (auto& v : n->saved) v.clear();
      for (auto& r : n->results) r.data = Tensor();
    }
    for (const Edge& e : n->next) {
      leaf_walked(e);
      if (in_task(e.fn) && --deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
    alive.erase(n);
  }
}

// ---- user entry points -----------------------------------------------------------------------------
namespace {

std::vector<std::pair<Edge, Tensor>> make_roots(const TensorList& outputs, const TensorList& grads) {
  TC_CHECK(grads.empty() || grads.size() == outputs.size(), ValueError,
           "backward: got %zu gradients for %zu outputs", grads.size(), outputs.size());
  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); i++) {
    const Tensor& o = outputs[i];
    TC_CHECK(o.requires_grad(), ValueError,
             "element %zu of tensors does not require grad and does not have a grad_fn (did the computation "
             "run under tc.no_grad(), or does no input have requires_grad=true?)",
             i + 1);
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      TC_CHECK(o.numel() == 1, ValueError,
               "grad can be implicitly created only for scalar outputs (the output has shape %s: pass a gradient "
               "of that shape to backward(grad))",
               shape_string(o.sizes()).c_str());
      g = op(Op::ones, {Value(IntList(o.sizes().begin(), o.sizes().end()))},
             {{"dtype", Value(o.dtype())}, {"device", Value(o.device())}});
    } else {
      TC_CHECK(g.sizes() == o.sizes(), ShapeError, "backward: the gradient has shape %s but the output has shape %s",
               shape_string(g.sizes()).c_str(), shape_string(o.sizes()).c_str());
    }
    roots.emplace_back(edge_of(o), g);
  }
  return roots;
}

std::vector<Edge> make_targets(const TensorList& inputs) {
  std::vector<Edge> targets;
  for (size_t i = 0; i < inputs.size(); i++) {
    TC_CHECK(inputs[i].requires_grad(), ValueError, "input %zu of the differentiated tensors does not require grad", i + 1);
    targets.push_back(edge_of(inputs[i]));
  }
  return targets;
}

}  // namespace

void backward_walk(const TensorList& outputs, const TensorList& grads, const TensorList& inputs, Options o);

void queue_callback(std::function<void()> fn) {
  TC_CHECK(!t_callbacks.empty(), ValueError, "queue_callback: no backward is running (call it from a hook)");
  t_callbacks.back()->push_back(std::move(fn));
}

void backward(const TensorList& outputs, const TensorList& grads, const TensorList& inputs, Options o) {
  CallbackScope callbacks;
  backward_walk(outputs, grads, inputs, o);
  callbacks.run();
}

void backward_walk(const TensorList& outputs, const TensorList& grads, const TensorList& inputs, Options o) {
  Task task;
  task.keep_graph = o.retain_graph || o.create_graph;
  task.create_graph = o.create_graph;
  auto roots = make_roots(outputs, grads);
  if (inputs.empty()) {
    run_backward(task, roots);
    return;
  }
  task.targets = make_targets(inputs);
  task.accumulate = false;
  run_backward(task, roots);
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!task.captured[i].defined()) continue;
    Task leaf;
    leaf.create_graph = o.create_graph;
    Edge e = edge_of(inputs[i]);
    if (e.leaf) {  // its hooks ran in the walk
      accumulate_into_leaf(leaf, e, task.captured[i]);
    } else {  // a non-leaf named in inputs gets its .grad, as in PyTorch
      auto& slot = inputs[i].impl()->grad;
      slot = accumulate(slot ? Tensor(slot) : Tensor(), task.captured[i]).impl_ptr();
    }
  }
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, Options o) {
  CallbackScope callbacks;
  Task task;
  task.keep_graph = o.retain_graph || o.create_graph;
  task.create_graph = o.create_graph;
  task.accumulate = false;
  task.targets = make_targets(inputs);
  run_backward(task, make_roots(outputs, grad_outputs));
  for (size_t i = 0; i < inputs.size(); i++)
    TC_CHECK(o.allow_unused || task.captured[i].defined(), ValueError,
             "input %zu of the differentiated tensors appears to not have been used in the graph (pass "
             "allow_unused=true if this is expected)",
             i + 1);
  callbacks.run();
  return task.captured;
}

}  // namespace tc::autograd
