// The graph IR: a flat, append-only array of nodes (graph inputs, op calls, calls of external
// functions) whose arguments
// point backwards by integer reference, with the fake-tensor metadata of every output.
//
//   Graph g;
//   Ref x = g.add_input("x", "arg[1]", Tensor::fake({2, 3}, {3, 1}, DType::Float32));
//   Ref s = g.add_op(Op::sin, {NodeArg::ref(x)}, call(Op::sin, {g.fake(x)}))[0];
//   g.outputs.push_back(s);
//   std::cout << g.print_tabular();      // opcode / name / target / args, like torch.fx
//
// A graph crosses from capture to the backends as this plain C++ value (no Lua inside).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tc/ops.h"

namespace tc::capture {

// One tensor value of the graph: output `out` of node `node`; `elem` >= 0 picks one tensor of a
// Tensor[] output.
struct Ref {
  int node = -1;
  int out = 0;
  int elem = -1;
  bool operator==(const Ref&) const = default;
};

// One bound argument of an op node: a constant (numbers, lists, strings, dtypes, and the 0-dim
// tensors the binder makes of Lua numbers), a tensor of the graph, or a list of them.
struct NodeArg {
  enum class Kind : uint8_t { Const, Ref, RefList };
  Kind kind = Kind::Const;
  Value constant;
  std::vector<Ref> refs;
  static NodeArg constant_of(Value v) { return {Kind::Const, std::move(v), {}}; }
  static NodeArg ref(Ref r) { return {Kind::Ref, {}, {r}}; }
  static NodeArg list(std::vector<Ref> r) { return {Kind::RefList, {}, std::move(r)}; }
};

// Thrown by a backend when node `node` fails while the graph runs: the op's error (kind and
// message), which capture reports at the node's user line, as eager would.
class NodeError : public Error {
 public:
  NodeError(const Error& e, int node) : Error(e.kind(), e.what()), node(node) {}
  int node;
};

// A function outside tc's op set kept in the graph (tc.compiler.allow_in_graph): capture
// provides `call`, which runs the host's function (a Lua value that capture keeps alive) on the
// node's arguments with real tensors and returns its tensor results, in the order and with the
// metadata of the node's fakes. Backends call it as an opaque step and never see Lua.
struct ExternalFn {
  std::string name;  // for listings: where the function came from ("G.scale", "upvalue scale")
  std::function<std::vector<Tensor>(const Stack& args)> call;
};

enum class NodeKind : uint8_t { Input, Op, External };

struct Node {
  NodeKind kind = NodeKind::Op;
  Op op = Op::add;                          // Op nodes
  std::shared_ptr<const ExternalFn> ext;    // External nodes
  std::vector<NodeArg> args;  // Op nodes: bound arguments in schema order; External: positional
  Stack fakes;                // outputs as fake tensors (Tensor or TensorList values)
  std::string name;           // unique: "x", "sin", "add_1"
  std::string source;         // Input nodes: where the value comes from ("arg[1].weight")
  int line = -1;              // Op and External nodes: the user's line that made it (the
                              // innermost frame outside tc's own Lua code), as eager's errors
  std::string file;           // ... name it: the chunk of `line` ("model.lua")
  bool no_grad = false;       // Op nodes: traced with grad mode off (tc.no_grad): never differentiated
  const char* target() const { return kind == NodeKind::External ? ext->name.c_str() : op_name(op); }
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<int> inputs;   // Input node indices, in input order
  std::vector<Ref> outputs;  // tensors the graph returns, in order
  // Dynamic dimensions of inputs (input index, 0-based dim): printed as s0, s1 ...
  std::vector<std::pair<int, int>> dynamic_dims;
  std::unordered_map<std::string, int> names;  // name -> times used (unique names)

  Ref add_input(const std::string& name, const std::string& source, const Tensor& fake);
  // Appends an op node; `fakes` are its outputs (from the meta rule). Returns one Ref per
  // output (Tensor[] outputs: one Ref per element).
  std::vector<Ref> add_op(Op op, std::vector<NodeArg> args, Stack fakes, int line = -1);
  // Appends a call of an external function; `fakes` are its tensor outputs (from its meta
  // function). Returns one Ref per output.
  std::vector<Ref> add_external(std::shared_ptr<const ExternalFn> fn, std::vector<NodeArg> args,
                                Stack fakes, int line = -1);
  const Tensor& fake(Ref r) const;
  // The node whose value r views (through View ops: their first argument), or r's own node.
  int view_root(Ref r) const;
  int num_ops() const { return int(nodes.size() - inputs.size()); }
  std::vector<std::string> op_names() const;  // in node order: "linear", "relu", ... (external: its name)

  // torch.fx's print_tabular: one row per node and one for the output.
  std::string print_tabular() const;
  // A readable listing with metadata: "%add : float32[10, 10] = add(%x, %y, alpha=1)".
  std::string print_code() const;
  std::string ref_name(Ref r) const;
  std::string meta_string(Ref r) const;  // dynamic dims as s0, s1 ...
};

// What a backend makes of a graph: inputs (in Graph::inputs order) -> outputs. The inputs are
// borrowed: the caller keeps them alive for the call (capture's cache hits hand over the tensors
// it holds without copying them, which would cost two atomic reference-count updates each); a
// backend that keeps one past the call, or across calls into Lua (External nodes), copies it.
using GraphInputs = std::span<const Tensor* const>;
using CompiledGraph = std::function<std::vector<Tensor>(GraphInputs inputs)>;
// Pointers to `tensors`, for calling a CompiledGraph with tensors the caller owns.
inline std::vector<const Tensor*> borrow(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(&t);
  return out;
}

// tc.compile's options as a backend receives them (tc::backends::CompileOptions).
struct CompileOptions {
  std::string mode = "default";  // one of the registry's modes (backends::modes())
  bool fullgraph = false;
  int dynamic = -1;  // -1: automatic (after one size-driven recompile), 0: never, 1: from the start
  // The backend's own options, tc.compile's `options = {...}` (sorted by key; booleans, numbers
  // and strings). Capture checked the keys against the backend's option_names().
  std::vector<std::pair<std::string, Value>> options;
  // mode = "reduce-overhead": CUDA graphs kept per compiled graph, one per input size
  // (tc.config.cudagraph_max_sizes); calls with further sizes run without one.
  int cudagraph_max_sizes = 8;
  const Value* option(const std::string& key) const {
    for (const auto& [k, v] : options)
      if (k == key) return &v;
    return nullptr;
  }
};

// What a backend says about one compile of one graph: explain prints it per graph, and
// tc.compiler.stats() sums it. A backend fills what applies to it and leaves the rest zero.
struct CompileReport {
  double lower_ms = 0;    // decompositions, loop IR, fusion, memory plan
  double codegen_ms = 0;  // building the code (LLVM IR, CUDA C++)
  double compile_ms = 0;  // the backend's compiler (LLVM ORC, NVRTC), or loading from its cache
  int kernels = 0;           // generated kernels launched per call (library calls not counted)
  int distinct_kernels = 0;  // kernels compiled after structural dedup
  int cached_kernels = 0;    // of the distinct kernels, how many came from the disk cache
  int cached_plans = 0;      // graphs whose lowered form came from the disk cache (not lowered)
  int fallback_nodes = 0;    // op nodes the backend does not support: they run on eager
  // mode = "max-autotune": launches whose kernel variants were timed (or whose choice came from
  // the disk cache: tuned_cached), and the time that took
  int tuned_kernels = 0;
  int tuned_cached = 0;
  double tune_ms = 0;
  // TC_LOGS=perf_hints lines: what ran on eager or could not be fused, and why. Capture prints
  // them; backends never log themselves.
  std::vector<std::string> perf_hints;
  void add(const CompileReport& o) {
    lower_ms += o.lower_ms, codegen_ms += o.codegen_ms, compile_ms += o.compile_ms;
    kernels += o.kernels, distinct_kernels += o.distinct_kernels;
    cached_kernels += o.cached_kernels, cached_plans += o.cached_plans, fallback_nodes += o.fallback_nodes;
    tuned_kernels += o.tuned_kernels, tuned_cached += o.tuned_cached, tune_ms += o.tune_ms;
    perf_hints.insert(perf_hints.end(), o.perf_hints.begin(), o.perf_hints.end());
  }
};

struct Compiled {
  CompiledGraph run;
  CompileReport report;
};

// Installed by the program (tcrun) from the backends library, which capture cannot include
// (tc::backends::graph_compiler() makes it): `compile` compiles `g` with the named backend and
// throws tc::Error for an unknown name; the lists are the registry's, for checking tc.compile's
// options at the user's line.
struct GraphCompiler {
  std::function<Compiled(const Graph& g, const std::string& backend, const CompileOptions& o)>
      compile;
  // Backend names, each with the names of the options it takes (tc.compile's `options` keys).
  std::vector<std::pair<std::string, std::vector<std::string>>> backends;
  std::vector<std::string> modes;
};

}  // namespace tc::capture
