// Reverse-mode autograd: the tape that the op dispatcher (tc::call) records while grad mode is on
// and an input requires grad, and the engine that runs it backwards with the formulas of
// derivatives.def (written in tc ops, so the backward runs on every device and can itself be
// differentiated: create_graph).
//
//   Tensor x = Tensor::empty({3}, DType::Float64);  ...  x.set_requires_grad(true);
//   Tensor y = call1(Op::sum, {call1(Op::mul, {x, x})});
//   autograd::backward({y}, {}, {});        // x.impl()->grad now holds 2x
//   TensorList g = autograd::grad({y}, {x}, {}, {.create_graph = true});  // differentiable 2x
//
// Leaves are tensors without a grad_fn; gradients accumulate into a leaf's `grad` when it
// requires grad. A non-leaf keeps its gradient only after retain_grad().
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tc/ops.h"

namespace tc {

// Grad mode (tc.no_grad / tc.enable_grad): ops record the tape only while it is on. Per thread.
bool grad_enabled();
void set_grad_enabled(bool on);
struct GradModeGuard {
  explicit GradModeGuard(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

struct Node;
// A tensor hook gets the gradient and returns a replacement (or an undefined tensor to keep it).
using Hook = std::function<Tensor(const Tensor&)>;
// Runs after backward accumulated a leaf's .grad (torch's register_post_accumulate_grad_hook); gets
// the leaf.
using PostAccumulateHook = std::function<void(const Tensor&)>;

struct AutogradMeta {
  std::shared_ptr<Node> grad_fn;  // null: a leaf
  uint32_t output_nr = 0;         // which output of grad_fn this tensor is
  bool retains_grad = false;
  std::vector<std::pair<int, Hook>> hooks;  // leaf hooks (non-leaf hooks live on the node)
  uint32_t rebases = 0;       // a base: in-place writes through its views so far
  uint32_t base_rebases = 0;  // a view: its base's count when the view's history was made
  std::vector<std::pair<int, PostAccumulateHook>> post_hooks;  // leaves only
};

// ---- the dispatcher's side (ops.cpp) -------------------------------------------------------------
// True when `call` must record `op` on these arguments: grad mode is on and an input requires grad.
bool should_record(const Stack& args);
// Before the kernel of an op that records: rejects in-place writes autograd cannot follow (a leaf
// that requires grad, a view taking part in autograd).
void check_inplace(Op op, const Stack& args);
// Ops whose forward must run as their decomposition when recording (dropout: its mask is needed
// by the backward); fills `out` and returns true when it did.
bool forward_decomposed(Op op, const Stack& args, Stack& out);
// After the kernel: links the outputs to a new grad_fn node (or marks them as not requiring grad).
void record(Op op, const Stack& args, Stack& out);
// After the kernel of an op that does not record: its new outputs require no grad (views would
// inherit the flag), and views are marked as views.
void mark_new_outputs(Op op, const Stack& args, Stack& out);

// ---- the user's side --------------------------------------------------------------------------------
struct Options {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;
};
// loss:backward(grad): accumulates into the .grad of the leaves reached (all of them, or only
// `inputs` when given). grads[i] may be undefined for a one-element output (implicit 1).
void backward(const TensorList& outputs, const TensorList& grads, const TensorList& inputs, Options o = {});
// tc.autograd.grad: the gradients of outputs with respect to inputs, not accumulated anywhere.
// An input that outputs do not depend on gets an undefined tensor with allow_unused, else an error.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, Options o = {});

bool is_leaf(const Tensor& t);
// "MulBackward0" for the node of x = a * b; empty for a leaf.
std::string grad_fn_name(const Tensor& t);
const std::shared_ptr<Node>& grad_fn(const Tensor& t);
void retain_grad(const Tensor& t);
bool retains_grad(const Tensor& t);
// Returns an id for remove_hook.
int register_hook(const Tensor& t, Hook h);
void remove_hook(const Tensor& t, int id);  // either kind of hook
// A leaf's post-accumulate hook (ValueError for a non-leaf or a tensor that requires no grad).
int register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateHook h);
// Called from a hook during backward/grad: `fn` runs once after the walk ends, before backward
// returns (torch's queue_callback; DDP waits for its all-reduces there). ValueError outside one.
void queue_callback(std::function<void()> fn);
// The backward name of a node ("MulBackward0") and its next nodes (for x.grad_fn.next_functions).
std::string node_name(const Node& n);

// A function autograd treats as one op (capture's compiled training graphs): one node named
// `name` whose next edges are `inputs` (each requires grad), which keeps `saved` for its backward
// (version-checked like an op's saved tensors, freed after the backward unless retain_graph) and
// becomes the grad_fn of each of `outputs` (output nr = its index; each a new tensor). At backward,
// `fn` gets the saved tensors and one gradient per output (zeros for outputs that got none) and
// returns one gradient per input (undefined: none).
using FunctionBackward =
    std::function<TensorList(const TensorList& saved, const TensorList& grads, bool create_graph)>;
void record_function(const char* name, const TensorList& inputs, const TensorList& saved,
                     const TensorList& outputs, FunctionBackward fn);

// The differentiability of each op (derivatives.def): for docs and tests.
enum class Differentiability { Formula, NonDifferentiable, NotImplemented };
Differentiability differentiability(Op op);

}  // namespace autograd
}  // namespace tc
