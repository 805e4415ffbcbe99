// Lowering's internal types: symbolic metas, the kernel builder, lowered values. Only the passes
// of backends/lower include this.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "lower.h"

// A broken invariant inside lowering. A bug in tc, but raised as an error rather than an abort:
// the backend then runs that graph on eager with a warning instead of ending the program.
#define TC_LOWER_CHECK(cond, what) TC_CHECK(cond, CompileError, "lowering bug: %s", what)

namespace tc::lower {

// ---- symbolic sizes (sym_shapes.cpp) ---------------------------------------------------------------

struct SymMeta {
  std::vector<SymInt> sizes, strides;
  SymInt offset;
  DType dtype = DType::Float32;
};

struct Shapes {
  std::vector<std::vector<SymMeta>> of_node;  // per node: outputs (a Tensor[] output: its elements)
  std::vector<int> symbol_of;                 // per dynamic dim of the graph: its symbol (duck sizing)
  const SymMeta& at(capture::Ref r) const { return of_node[r.node][r.elem >= 0 ? r.elem : r.out]; }
};

// Sizes, strides and offsets of every tensor of `g` in terms of its dynamic dims (s0, s1, ...).
Shapes sym_shapes(const capture::Graph& g);
// The outputs of `op` as fakes: the meta rule only, never the kernel, also for ops without tensor
// inputs (randn, zeros), whose call would run the kernel and advance the random stream.
Stack fake_call(Op op, const Stack& args);

// ---- decompositions (decompose.cpp) ----------------------------------------------------------------

// `g` with composite ops rewritten into simpler ops of ops.def (the rule table in decompose.cpp);
// `origin` gets the node of `g` each new node comes from.
// On CUDA, scaled_dot_product_attention that the fused kernel takes (attention_is_library_call)
// stays one node: a library extern, like a matmul.
capture::Graph decompose(const capture::Graph& g, std::vector<int>* origin, DeviceType device = DeviceType::CPU);
// Whether sdpa with these arguments runs as one library call on `device` (stdlib/cuda's fused
// attention: float32, no mask, no dropout, 3-D or 4-D, head dim <= 128, a multiple of 4) instead of decomposing.
bool attention_is_library_call(const Stack& args, DeviceType device);

// ---- the kernel builder (kernel_builder.cpp) -----------------------------------------------------

// Builds one Kernel: values are hash-consed and constant-folded, and each goes to the scope it
// depends on (preamble, the outer iteration, or the innermost open loop). Opening a loop while
// another is open puts the new loop before it (a reduction needed inside a loop is computed by
// an earlier loop of the same outer iteration).
class KernelBuilder {
 public:
  KernelBuilder(LoweredGraph& lg, std::vector<SymInt> outer);
  Val ci(int64_t v, Ty t = Ty::I64);
  Val cf(double v, Ty t);
  Val size(const SymInt& s);  // I64
  Val outer(int d) const { return outer_vars_[d]; }
  Val loop_var(int d);        // of the innermost open loop
  Val math(ScalarOp op, Val a, Val b = kNoVal, Val c = kNoVal);
  Val cast(Val a, Ty t);
  Val load(int buffer, Val index);             // graph buffer
  void store(int buffer, Val index, Val value);
  Ty ty(Val v) const { return k_.instrs[v].ty; }
  const Instr& instr(Val v) const { return k_.instrs[v]; }
  int level(Val v) const { return level_[v]; }  // 0 preamble, 1 outer, 2 loop, 3 final
  bool is_const(Val v, int64_t* out = nullptr) const;
  int num_outer() const { return int(outer_vars_.size()); }

  void open_loop(const std::vector<SymInt>& extents);
  // Adds a reduction to the innermost open loop; returns its result's Acc (and `value`'s).
  Val reduce(ReduceOp op, Val input, Val index = kNoVal, Val* value = nullptr, bool ordered_fma = false);
  void close_loop();
  int open_loops() const { return int(loops_.size()); }

  // Two-level reductions (Kernel::outer_reductions): while `final` is on, loads go to the code run
  // once after the outer iterations (Kernel::final), as does every value computed from an OuterAcc.
  void set_final(bool on) { final_mode_ = on; }
  bool final_mode() const { return final_mode_; }
  // Reduces `input` (an outer-level value) over every outer iteration; returns its OuterAcc.
  Val reduce_outer(ReduceOp op, Val input);

  // A two-level kernel's (Kernel::outer_reductions): the shape whose elements its outer
  // iterations walk (its dims of size 1 included), empty for other kernels.
  std::vector<SymInt> outer_shape;
  // Reductions already computed in this kernel: key (memo id, kept index) -> Acc result, value.
  std::map<std::pair<int, std::vector<Val>>, std::pair<Val, Val>> memo;
  std::vector<int> source_nodes;
  std::vector<int> roots;  // the values this kernel stores
  bool channels_last = false;  // outer dims in the order N, H, W, C of a 4-D value (root_kernel)
  bool is_root(int id) const { return std::find(roots.begin(), roots.end(), id) != roots.end(); }

  // The kernel, with the graph buffer per buffer parameter and the size per size parameter.
  Kernel finish(std::vector<int>* buffers, std::vector<SymInt>* sizes);

 private:
  struct OpenLoop {
    Stmt stmt;
    std::map<std::vector<int64_t>, Val> cse;
    std::vector<Ty> red_ty;
  };
  Val add(Instr in, int level);
  void flush_code();
  LoweredGraph& lg_;
  Kernel k_;
  std::vector<int> level_;
  std::vector<Val> outer_vars_;
  std::map<std::vector<int64_t>, Val> cse0_, cse1_, cse3_;
  Stmt code_;  // outer-level values and stores not yet placed
  bool final_mode_ = false;
  std::vector<OpenLoop> loops_;
  std::vector<int> buffers_;
  std::vector<SymInt> sizes_;
};

// ---- lowered values (values.cpp, schedule.cpp) ---------------------------------------------------

using Idx = std::vector<Val>;

// What a tensor of the graph is during lowering: stored in a buffer (strided view), computed on
// demand at an index (lazy), or a reduction of another value.
struct LV {
  enum class Kind : uint8_t { Buffer, Lazy, Reduce };
  Kind kind = Kind::Lazy;
  DType dtype = DType::Float32;
  std::vector<SymInt> shape;
  // Buffer
  int buffer = -1;
  SymInt offset;
  std::vector<SymInt> strides;
  const SymMeta* fake = nullptr;  // the graph's meta when the buffer layout equals it (views)
  // Lazy
  std::function<Val(KernelBuilder&, const Idx&)> fn;
  std::vector<int> deps;  // values read (structure search, cost)
  int cost = 1;           // instructions to recompute
  int loads = 0;          // buffers read to recompute
  bool has_reduce = false;  // reads a reduction (through lazy values)
  // Reduce: `input` reduced over `dims` (of the input), Acc `take_value` picks ArgMax's value
  int input = -1;
  std::vector<int> dims;
  bool keepdim = false;
  ReduceOp rop = ReduceOp::Sum;
  bool take_value = false;
  bool blas_order = false;  // a tiny matmul's Sum of products: Reduction::ordered_fma
  int memo_id = -1;  // reductions sharing one loop (max_dim's values and indices) share it
  int node = -1;     // the graph node (sources)
  // Read from a channels-last buffer (LowerOptions::channels_last_call; through lazy values and
  // reductions): a 4-D value is stored channels-last (realize_all).
  bool channels_last = false;
};

// Whether a 4-D view's strides are channels-last (NHWC) and dense, its channels and its image
// both more than one element (else the layouts are the same).
bool nhwc_strides(const std::vector<SymInt>& shape, const std::vector<SymInt>& strides);
// The strides of a dense channels-last layout of a 4-D shape.
std::vector<SymInt> nhwc_layout(const std::vector<SymInt>& shape);

// Whether node n is a matmul small enough (every dim <= opt.tiny_matmul) to generate.
bool tiny_matmul(const capture::Graph& g, int n, const LowerOptions& opt);

// An index value's device check (LowerOptions::device_checks): IndexCheck number `id` (0: none),
// values equal to `ignore` passing when `has_ignore`.
struct IndexFlag {
  int id = 0;
  bool has_ignore = false;
  int64_t ignore = 0;
};

class Lowering {
 public:
  Lowering(const capture::Graph& captured, const capture::Graph& g, const Shapes& s, const LowerOptions& o,
           LoweredGraph& lg, const std::vector<int>& origin);
  void run();  // every node, then the outputs

  // Values
  int add(LV v);
  LV& lv(int id) { return lvs_[id]; }
  Val emit(KernelBuilder& kb, int id, const Idx& idx);
  int realize(int id, bool as_output = false);  // stores a value into a buffer: its id
  void realize_all(const std::vector<int>& ids, bool as_output);
  int buffer_of(DType d, const SymInt& numel, Buffer::Kind kind);

  const capture::Graph& g;
  const Shapes& shapes;
  const LowerOptions& opt;
  LoweredGraph& lg;
  const capture::Graph& captured;  // the graph before decompositions
  const std::vector<int>& origin;  // node of `captured` per node of `g`

 private:
  void lower_node(int n);
  std::vector<int> lower_op(int n);  // values of the node's outputs (values.cpp)
  std::vector<int> add_extern(int n, bool fallback);  // values of its outputs
  void push_kernel(KernelBuilder& kb);
  void hint(int node, const std::string& what);  // a perf_hints line
  bool check_indices(int n, const std::vector<SymInt>& data, IndexFlag* flag);
  int add_index_check(int n, std::function<void(int64_t, const std::vector<int64_t>&, Device)> raise);
  bool check_divisor(int n, int id);
  void add_check(int n, int id, std::shared_ptr<capture::ExternalFn> fn);
  // The first value reached from `id` (itself, then what lazy values read, and a reduction's
  // input unless `stop_at_reductions`), each once, for which `hit` is true; -1 if none.
  int find_reached(int id, bool stop_at_reductions, const std::function<bool(int, const LV&)>& hit);
  bool reads(int id, int buffer);
  void before_write(int buffer);
  int store_into(int n, int view, int src);  // an in-place write kernel (copy_, fill_)
  int find_row_reduction(int id);
  KernelBuilder root_kernel(int id, Idx* idx, bool channels_last);
  bool stores_channels_last(int id);
  std::vector<int> loop_dims_of(int id);
  bool fuses_alone(int id);
  bool fuses_in(KernelBuilder& kb, int id, const Idx& idx, bool shallow);
  Val reduce_input(KernelBuilder& kb, const LV& v, Val x);
  Val shallow_result(KernelBuilder& kb, const LV& v);
  bool outer_reducible(const LV& v, const std::vector<SymInt>& rows) const;
  Val emit_outer_reduction(KernelBuilder& kb, int id, const Idx& idx);
  std::vector<SymInt> two_level_rows(int id);
  KernelBuilder two_level_kernel(int id, const std::vector<SymInt>& rows, Idx* idx);
  std::map<int, std::vector<SymInt>> two_level_;  // two_level_rows per value
  std::vector<LV> lvs_;
  std::map<std::pair<int, int>, int> value_of_;  // (node, flat output) -> value id
  std::vector<int> uses_;                        // per node: times its outputs are read
  std::vector<bool> is_output_;                  // per node
  // Per node: stored as soon as lowered, so that views of it are buffer views (it is written in
  // place through a view, a view of it is an extern's operand or a graph output).
  std::vector<bool> store_;
  int shallow_ = 0;  // > 0: fuses_alone, reductions are not expanded
  int dry_ = 0;  // > 0: trial emission, a reduction that cannot fuse throws NotFusable
  std::map<std::tuple<int, int, Idx>, bool> fuses_;  // (kernel root, value, index) -> trial result
  friend struct ValueBuilder;
};

}  // namespace tc::lower
