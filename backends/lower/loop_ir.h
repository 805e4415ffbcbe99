// The loop IR: the lowered form of a captured graph that every code generator consumes (the CPU
// backend on LLVM ORC, the CUDA backend on NVRTC). Lowering (lower.h) turns a capture::Graph into
// a LoweredGraph: a launch list of Steps (generated Kernels and Extern library calls) over
// Buffers with a static memory plan.
//
//   LoweredGraph lg = lower(graph, {});          // decompose, index views, fuse, dedup, plan
//   std::cout << print(lg);                       // TC_DEBUG=2 prints this after every stage
//   for (const Step& s : lg.steps) ...            // a code generator walks the steps
//
// A Kernel is one loop nest over an output index space:
//
//   for o in outer (multi-dim; parallel: CPU thread chunks, CUDA blocks/threads)
//     body: Stmts in order, each either straight-line Code or a Loop over `extents`
//           (a reduction axis walk: accumulators, or a map that stores per element)
//
// so a pointwise chain is `outer = output dims, body = [Code with loads, math, stores]`, a row
// reduction is `outer = kept dims, body = [Loop{reduce}, Code{epilogue, store}]`, and softmax is
// `outer = rows, body = [Loop{max}, Loop{sum exp(x - max)}, Loop{store exp(x - max) / sum}]`:
// one kernel. A two-level reduction also reduces over the outer iterations themselves
// (`outer_reductions`, inputs computed once per outer iteration) and then runs `final` once:
// cross_entropy's mean is `outer = rows, body = [Loop{max}, Loop{sum exp}, Code{loss of the row}],
// outer_reductions = [sum loss, sum valid], final = Code{store sum loss / sum valid}`. Values are SSA instructions (Instr) in one flat array per kernel, referenced by
// integer (Val). Loads, math and the index arithmetic before a store are all Instrs; a Val is
// defined once. Scope: preamble values are visible everywhere; values of an outer-level Code
// stmt in later stmts of the same outer iteration; a Loop's body values only inside that loop;
// a Loop's reduction results (Acc instrs) after the loop. Different outer iterations never store
// to the same element, so they may run in any order or in parallel; within one, stmts run in order.
//
// Kernels reference buffers and sizes only through their parameters, never through the graph's
// buffer ids: two fusion groups that differ only in their buffers lower to equal Kernels and are
// compiled once (structural dedup: 64 identical layers cost one layer's kernels). Dynamic sizes
// are kernel parameters too (SizeParam), so one kernel serves every size.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tc/capture/graph.h"
#include "tc/dtype.h"
#include "tc/ops.h"

namespace tc::lower {

using Val = int32_t;  // index into Kernel::instrs
constexpr Val kNoVal = -1;

// Scalar compute types. Memory dtypes (tc::DType) map onto them on load/store: float16/bfloat16
// load as F32 and store rounded; int8/uint8/int16/int32 compute as I32 (stores wrap as the dtype);
// bool as Bool.
enum class Ty : uint8_t { Bool, I32, I64, F32, F64 };
Ty compute_type(DType d);

// The scalar primitives generated code is made of (scalar_ops.def: name, arity, types).
// Composite pointwise ops of ops.def (gelu, silu, softplus, hardtanh ...) are decomposed into
// these by lowering's decomposition table; code generators implement only this list.
enum class ScalarOp : uint8_t {
#define TC_SCALAR_OP(name, arity) name,
#include "scalar_ops.def"
#undef TC_SCALAR_OP
};
const char* scalar_op_name(ScalarOp op);

enum class Opc : uint8_t {
  ConstI,     // i: integer constant of `ty`
  ConstF,     // f: float constant of `ty`
  SizeParam,  // a = index of a kernel size parameter (int64; a dynamic dim or a derived size)
  OuterVar,   // a = outer dim index: the current index along that dim
  LoopVar,    // a = dim index of the innermost enclosing Loop
  Load,       // a = buffer parameter index, b = element index (I64 Val); ty = compute type
  Math,       // sop on a (, b (, c)): Ty from operands except comparisons (Bool) and Cast (ty)
  Acc,        // a = index of the Reduction in its Loop, b = 1 for an ArgMax/ArgMin `value`;
              // defined by that Loop (Reduction::result/value), listed in no stmt's body
  OuterAcc,   // a = index in Kernel::outer_reductions: its result, defined after every outer
              // iteration ran (visible in Kernel::final only), listed in no stmt's body
};

// Invariants lowering guarantees (KernelBuilder asserts them): ConstF only with F32/F64, ConstI
// with I32/I64/Bool (Bool: 0 or 1); the operands of a binary Math and `where`'s two values have
// the same Ty, which is the result's (comparisons and logical ops: Bool); `where`'s condition is
// Bool; Cast is the only conversion; index values (Load/Store indices, extents, sizes, loop and
// outer vars) are I64; a Store's value has the compute type of its buffer's dtype.
struct Instr {
  Opc op = Opc::ConstI;
  Ty ty = Ty::F32;
  ScalarOp sop = ScalarOp::add;  // Math only
  Val a = kNoVal, b = kNoVal, c = kNoVal;
  int64_t i = 0;  // ConstI
  double f = 0;   // ConstF
  bool operator==(const Instr&) const = default;
};

// Reductions start from their identity (Sum 0, Prod 1, Max -inf or the type's lowest, Min +inf or
// highest, Any false, All true). Max/Min propagate NaN (as amax/amin). ArgMax/ArgMin keep the first
// index of the extreme value, a NaN counting as the extreme (as PyTorch); their Acc is the index
// (I64), and `Reduction::value` (another Acc, optional) the extreme value itself.
enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, Any, All };

struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  Val input = kNoVal;  // a value of the loop body, combined each iteration
  Val index = kNoVal;  // ArgMax/ArgMin: the candidate index (I64) paired with `input`
  Val result = kNoVal; // the Acc instr holding the result after the loop
  Val value = kNoVal;  // ArgMax/ArgMin: an Acc holding the extreme value (max_dim), or kNoVal
  // Sum whose input is a Math mul: acc = fma(a, b, acc) in the loop's order, in the input's type,
  // never reassociated (the rounding of BLAS's sgemm kernels: tiny matmuls equal eager's to the
  // bit). Other float sums and products may be reassociated (vectorized).
  bool ordered_fma = false;
  bool operator==(const Reduction&) const = default;
};

struct Store {
  int buffer = 0;      // buffer parameter index
  Val index = kNoVal;  // element index (I64)
  Val value = kNoVal;
  bool operator==(const Store&) const = default;
};

struct Stmt {
  enum class Kind : uint8_t { Code, Loop };
  Kind kind = Kind::Code;
  std::vector<Val> extents;        // Loop: sizes (values of the preamble), outer dim first
  std::vector<Val> body;           // instrs evaluated in order (per loop iteration for a Loop)
  std::vector<Reduction> reductions;  // Loop only
  std::vector<Store> stores;       // stores after `body` (per iteration for a Loop)
  bool operator==(const Stmt&) const = default;
};

struct BufferParam {
  DType dtype = DType::Float32;
  bool written = false;  // an output of the kernel (may also be read)
  bool operator==(const BufferParam&) const = default;
};

struct Kernel {
  std::string name;                 // "k3_softmax": not part of the structural identity
  std::vector<BufferParam> buffers;
  int num_size_params = 0;
  std::vector<Instr> instrs;
  std::vector<Val> preamble;        // uniform values: sizes, strides (evaluated once a launch)
  std::vector<Val> outer;           // outer extents (values of the preamble), outer dim first
  std::vector<Stmt> body;
  // A two-level reduction (empty for other kernels): reductions over every outer iteration of
  // values of the outer-level Code stmts (Sum, Prod, Max, Min, Any, All; never ordered_fma; the
  // order of combination is unspecified, float sums may be reassociated), whose results are
  // OuterAcc instrs; then `final` (a Code stmt) runs once, also when there is no outer iteration:
  // it sees the preamble and the OuterAccs and stores (a scalar, typically). A code generator
  // splits the outer iterations into parts (CPU chunks, CUDA blocks), reduces each part and
  // combines the parts' results in part order.
  std::vector<Reduction> outer_reductions;
  Stmt final;
  bool two_level() const { return !outer_reductions.empty(); }
  std::vector<int> source_nodes;    // captured graph nodes fused here (listings, not identity)
  std::vector<int> source_lines;    // their user lines
  // Structural identity: everything above except name and sources.
  bool same_structure(const Kernel& o) const;
  uint64_t structural_hash() const;
};

// Graph-level integer sizes with dynamic dims: sum of terms c * prod(symbols). Symbol k is dim
// `dim` of graph input `input` (LoweredGraph::symbols).
struct SymInt {
  struct Term {
    int64_t c = 0;
    std::vector<int> syms;  // sorted
    bool operator==(const Term&) const = default;
  };
  std::vector<Term> terms;
  static SymInt of(int64_t c);
  static SymInt sym(int k);
  bool is_const() const;
  int64_t eval(const std::vector<int64_t>& symbol_values) const;
  int64_t const_value() const;  // asserts is_const()
  bool operator==(const SymInt&) const = default;
};
SymInt operator+(const SymInt& a, const SymInt& b);
SymInt operator*(const SymInt& a, const SymInt& b);
std::string to_string(const SymInt& s);  // "4", "s0", "4*s0 + 2"
// Each of `v` evaluated (a launch's size arguments, a buffer's sizes).
std::vector<int64_t> eval_all(const std::vector<SymInt>& v, const std::vector<int64_t>& symbol_values);

struct Symbol {
  int input = 0;  // graph input index
  int dim = 0;    // 0-based dim
};
// A dynamic dim that shares symbol `symbol` (it had that symbol's size when lowered): the code
// assumes it equal to the symbol; a call where it is not runs on eager (ties_hold).
struct TiedDim {
  int input = 0, dim = 0, symbol = 0;
};

struct Buffer {
  enum class Kind : uint8_t { Input, Output, Temp };
  Kind kind = Kind::Temp;
  DType dtype = DType::Float32;
  SymInt numel;     // elements the buffer spans (for an Input: its storage extent as viewed)
  int io = -1;      // Input: graph input index; Output: graph output index
  // Temp: byte offset in the arena (memory plan; 64-byte aligned), -1 when its size is dynamic
  // (then the runner allocates it on its own). Outputs are allocated on their own every call
  // (they outlive it) and keep -1.
  int64_t offset = -1;
};
// An Input buffer's element 0 is the input tensor's first element (Tensor::data_ptr()); kernels
// and externs index it with the input's own strides.

// A strided view of a buffer: what an Extern reads or writes, and what a graph output is.
struct BufferView {
  int buffer = 0;
  SymInt offset;  // elements
  std::vector<SymInt> sizes, strides;
};

// A library call: matmul/bmm/linear/convolution (OpenBLAS or cuBLAS(Lt)/cuDNN), also any op
// lowering cannot generate yet (run through its eager kernel: counted as a fallback), in-place
// ops and functions kept in the graph.
struct Extern {
  Op op = Op::mm;
  std::vector<BufferView> inputs;
  std::vector<Value> constants;  // the node's non-tensor arguments, schema order
  BufferView output;
  bool fallback = false;  // true when this is an op lowering does not handle (perf_hints)
  // Outputs 2.. of a multi-output op (sort, topk: the indices), each written like `output`.
  std::vector<BufferView> more_outputs;
  // How inputs and constants interleave in schema order, one entry per argument: kConstArg takes
  // the next constant, kTensorArg the next input, n >= 0 the next n inputs as a Tensor[] list.
  // extern_args() rebuilds the argument Stack for tc::call from it.
  static constexpr int kConstArg = -1, kTensorArg = -2;
  std::vector<int> arg_kinds;
  int node = -1;  // the captured graph's node: an error it raises is a capture::NodeError of it
  // Set: a call of a function kept in the graph (tc.compiler.allow_in_graph), run as
  // external->call(extern_args(...)); `op` is then meaningless. Always a fallback.
  std::shared_ptr<const capture::ExternalFn> external;
  // In-place ops (copy_, fill_, uniform_ ...; schema `Tensor!`) write their `output` view, which
  // is a view of the mutated input: every value read before it was computed before this step.
};
// The arguments of `e` for tc::call(e.op, ...), given a tensor per input (views of the buffers).
Stack extern_args(const Extern& e, const std::vector<Tensor>& inputs);

struct Launch {
  int kernel = 0;                   // index into LoweredGraph::kernels (deduplicated)
  std::vector<int> buffers;         // graph buffer per kernel buffer parameter
  std::vector<SymInt> sizes;        // value per kernel size parameter
};

struct Step {
  enum class Kind : uint8_t { Launch, Extern };
  Kind kind = Kind::Launch;
  Launch launch;
  Extern ext;
};

// Index values checked inside the kernels that read them (LowerOptions::device_checks): a kernel
// evaluating ScalarOp::flag_if(v, bad, k) with `bad` true flags check k (1-based position in
// LoweredGraph::index_checks) with the value v in the device's error word; the runner reads the
// word after the graph and calls `raise`, which raises node `node`'s eager error for that value.
struct IndexCheck {
  int node = -1;  // the captured graph's node (the user's line)
  std::function<void(int64_t value, const std::vector<int64_t>& symbol_values, Device device)> raise;
};

struct LoweredGraph {
  std::vector<Kernel> kernels;      // distinct kernels
  std::vector<Buffer> buffers;
  std::vector<Symbol> symbols;
  std::vector<TiedDim> tied;        // dynamic dims that share a symbol
  std::vector<Step> steps;          // the launch order
  std::vector<BufferView> outputs;  // one per graph output (may view an input buffer)
  int64_t arena_bytes_static = -1;  // bytes of the arena holding the Temps of static size
  int num_fused_nodes = 0;          // graph op nodes that became kernels
  std::vector<IndexCheck> index_checks;
  // What could not be fused or generated, and why, one line each (TC_LOGS=perf_hints):
  // "line 12: sort runs on its eager kernel (not generated)".
  std::vector<std::string> perf_hints;
};

std::string print(const Kernel& k);
std::string print(const LoweredGraph& g);

// Per kernel of `g`: whether its buffer parameters may be assumed not to alias (no launch binds a
// written parameter to a graph input, which is user memory that may overlap others, or to a
// buffer another parameter also gets).
std::vector<bool> kernels_without_aliasing(const LoweredGraph& g);

}  // namespace tc::lower
