// Internal structures of autograd shared by the tape (autograd.cpp), the formula evaluator
// (autograd_formulas.cpp) and the decompositions (autograd_decompose.cpp).
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tc/autograd.h"

namespace tc::autograd {

// A tensor kept for the backward. Inputs are kept as themselves (with their history: the
// backward may differentiate through them again), outputs as an alias without history (no
// reference cycle node -> output -> node), metadata-only values as fake tensors.
struct SavedVariable {
  Tensor data;
  uint64_t version = 0;
  bool is_output = false;
  bool check_version = true;  // false for arguments the op itself writes (batch_norm running stats)
  std::weak_ptr<Node> owner;  // outputs: the node that made them
  uint32_t output_nr = 0;
};

struct InputMeta {
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
};

// Where an input's gradient goes: the node that made it (output nr) or the leaf it is.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  InputMeta meta;
  bool defined() const { return fn || leaf; }
};

struct OpGrad;  // the parsed derivatives.def row of an op (autograd_formulas.cpp)

struct Node {
  Op op;
  uint64_t seq = 0;  // creation order: later nodes run first in the backward
  const OpGrad* rule = nullptr;
  Stack args;                                    // non-tensor arguments as given
  std::vector<std::vector<SavedVariable>> saved;  // per argument: its tensors (empty: not saved)
  std::vector<SavedVariable> results;            // per output (undefined data: not saved)
  std::vector<int> first_slot;                   // per argument: its first input slot, -1 if none
  std::vector<int> slot_count;                   // per argument: its number of input slots
  std::vector<Edge> next;                        // per input slot (tensors of the arguments, flattened)
  std::vector<InputMeta> outputs;                // per output: for zero gradients
  std::vector<std::vector<std::pair<int, Hook>>> pre_hooks;  // per output
  std::vector<std::weak_ptr<TensorImpl>> retained;          // per output, for retain_grad()
  bool released = false;
};

extern std::atomic<uint64_t> g_next_seq;

// autograd.cpp
Tensor unpack(const SavedVariable& s, const Node& n, const char* what);
// Runs the backward from `roots` (edges with their gradients). With `targets`, gradients reaching
// those edges are captured (summed) into `captured` and leaves are not accumulated; only nodes
// created at or after `min_seq` are walked.
struct Task {
  bool keep_graph = false, create_graph = false, accumulate = true, run_hooks = true;
  uint64_t min_seq = 0;
  std::vector<Edge> targets;
  TensorList captured;
};
void run_backward(Task& task, const std::vector<std::pair<Edge, Tensor>>& roots);
Edge edge_of(const Tensor& t);

// autograd_formulas.cpp: the parsed rows and their evaluation.
struct Formula;
struct OpGrad {
  Differentiability kind = Differentiability::NotImplemented;
  std::vector<std::shared_ptr<Formula>> formulas;
  std::vector<bool> differentiable_arg;  // per argument
};
const OpGrad& op_grad(Op op);
// Which arguments and outputs the active formulas read (full data or metadata only).
struct SaveNeeds {
  std::vector<int> args;     // per argument: 0 not needed, 1 metadata, 2 data
  std::vector<int> results;  // per output
};
SaveNeeds save_needs(const OpGrad& g, Op op, const std::vector<bool>& active_formula);
const std::vector<int>& formula_inputs(const Formula& f);  // argument indices

// autograd_helpers.cpp: functions formulas call besides ops.
struct Env {  // what a formula sees while it runs
  Node& node;
  const Formula& formula;
  const std::vector<Tensor>& grads;
  bool create_graph;
};
struct Helper {
  const char* name;
  uint32_t meta_args;  // bit i: argument i is read for its metadata only
  Value (*fn)(Env& e, const Stack& a);
  bool reads_all_args = false;  // decompose(): every argument is saved
};
const Helper* find_helper(const std::string& name);
// Gradients of the node's inputs (per slot; undefined where not needed) from its outputs' grads.
std::vector<Tensor> apply_formulas(Node& n, const std::vector<Tensor>& grads, bool create_graph);

// autograd_decompose.cpp: composite ops as tc ops (used for their backward, and for dropout's
// forward when it records).
Tensor decomposition(Op op, const Stack& args);

// Small helpers for writing formulas in C++.
inline Tensor op(Op o, Stack pos, std::vector<std::pair<std::string, Value>> kw = {}) {
  return call1(o, std::move(pos), std::move(kw));
}

}  // namespace tc::autograd
