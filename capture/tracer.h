// The symbolic interpreter over Lua 5.4 bytecode: variables, frames and the Tracer state. The
// handlers (one per opcode, in opcode order) are in tracer.cpp; calls, indexing, metamethods and
// builtins in tracer_calls.cpp; the end of a trace (outputs, effects, breaks) in tracer_end.cpp.
#pragma once
#include <lua.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "entry.h"
#include "opcodes.h"

namespace tc::capture {

// One register's value while tracing.
struct Var {
  enum class K : uint8_t {
    Nil,
    Bool,
    Int,
    Float,
    Str,      // constants
    Tensor,   // a graph value with fake metadata
    Object,   // a real Lua value (table, function, userdata, thread) + source
    Table,    // a table created in the traced code (modelled)
    Closure,  // a Lua function created in the traced code
  };
  K k = K::Nil;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  Ref ref;         // Tensor
  int input = -1;  // Tensor: graph input index when the tensor is an input (its source: src)
  int obj = -1;    // Object: index in the tracer's object table
  int src = -1;    // Object/Tensor inputs: source id
  int id = -1;     // Table/Closure: index in the tracer's tables/closures
  // Object: an unspecialized number (automatic dynamic after a recompile on its value). It
  // passes through registers, tables, calls and resume functions without a value guard, is a
  // graph input where an op takes it as a tensor, and is specialized (Tracer::spec: an
  // equality guard) where the trace needs its value.
  bool unspec = false;

  static Var nil() { return {}; }
  static Var boolean(bool v) {
    Var x;
    x.k = K::Bool;
    x.b = v;
    return x;
  }
  static Var integer(int64_t v) {
    Var x;
    x.k = K::Int;
    x.i = v;
    return x;
  }
  static Var number(double v) {
    Var x;
    x.k = K::Float;
    x.f = v;
    return x;
  }
  static Var string(std::string v) {
    Var x;
    x.k = K::Str;
    x.s = std::move(v);
    return x;
  }
  bool is_const() const { return k <= K::Str; }
  bool is_number() const { return k == K::Int || k == K::Float; }
  bool truthy() const { return !(k == K::Nil || (k == K::Bool && !b)); }
  double num() const { return k == K::Int ? double(i) : f; }
};

struct ModelTable {
  std::vector<Var> array;                 // [1..n]
  std::vector<std::pair<Var, Var>> hash;  // constant or object keys, insertion order
  bool is_size = false;                   // x.shape / x:size(): a tc.Size
  std::optional<Var> metatable;           // set by setmetatable with a pinned table
  // How Lua built it (NEWTABLE's sizes, every key set in order, nil or not): replayed on a
  // real table, it gives the order Lua's `next` visits the keys in.
  int narr = 0, nrec = 0;
  std::vector<std::pair<Var, bool>> log;
  bool order_unknown = true;  // made by a builtin (no log) or reordered: pairs breaks
};

// A closure made in the traced code. Its upvalues are cells shared with the registers they
// captured (until the enclosing block's CLOSE) and with other closures, as in Lua.
struct SymClosure {
  const vm::Proto* p;
  std::vector<int> cells;  // index in Tracer::cells_
};

// Thrown inside the tracer: a graph break at the current instruction of the innermost frame.
struct BreakSignal {
  BreakCode code;
  std::string detail;
};

struct Frame {
  const vm::Proto* p = nullptr;
  std::vector<Var> R;
  std::vector<int> cell_of;  // register -> open cell (captured by a closure), or -1
  std::vector<Var> va;
  int pc = 0;
  int cur = 0;                              // the instruction being traced
  int top = 0;                              // end of open values (after CALL/VARARG with C=0)
  Var fn;                                   // the function (Object with a source, or Closure)
  std::vector<std::optional<Var>> up;       // upvalues read so far
  int ret_a = 0, ret_n = -1;                // where results go in the caller (ret_n = -1: all)
  const std::vector<int>* lines = nullptr;  // line of each instruction
  const std::string* chunk = nullptr;       // the chunk's short_src (errors name it)
  bool tc_code = false;                     // a function of tc's own Lua code ("@[tc]...")
  std::string name;                         // for stacks: "bar"
  bool discard = false;  // the caller does not want results (a call made by the tracer)
  bool pcall = false;    // called through pcall: results get a leading true
  struct Tbc {  // an open to-be-closed variable
    int reg, pc;  // its register, the pc of its TBC
    bool closing = false;  // its __close is running (it stays open until that returns)
  };
  std::vector<Tbc> tbc;
};

// Pointers of C functions tc knows (captured when capture is installed). tc's op functions and
// trampolines are recognised through the binding (lua::op_of, lua::trampoline_target).
struct Known {
  lua_CFunction dispatch = nullptr;    // capture's own dispatch (compiled function wrappers)
  std::unordered_map<lua_CFunction, std::string> builtins;  // "math.sqrt", "type", "size" ...
  // C functions that call a function argument, and which (1-based): pcall's 1, table.sort's 2 ...
  std::unordered_map<lua_CFunction, int> calls_arg;
  // Of those, the ones that call any value (pcall, xpcall), and how many of their arguments come
  // before the arguments of the call (1, 2): a callable table is called as its __call with itself
  // inserted there.
  std::unordered_map<lua_CFunction, int> calls_value;
  lua_CFunction tostring = nullptr, print = nullptr;  // the base library's (luaL_tolstring users)
  // x:backward and tc.autograd.backward: their break is an expected one (TC0204), by name
  std::unordered_map<lua_CFunction, std::string> backwards;
};
Known& known();

// Bounds of one trace, from tc.config (read by dispatch for every trace). A trace that would
// pass one ends with a graph break of its own code (TC0405, TC0406, TC0410) at the user's line.
struct TraceBudget {
  int instructions = 50000;  // trace_max_instructions: instructions traced, inlined calls included
  int depth = 64;            // trace_max_depth: frames of inlined calls
  int iterations = 5000;     // trace_max_iterations: loop iterations unrolled
  // What one trace may cost. Past one the trace is abandoned (TraceLimit) and the function runs
  // uncompiled from then on, with one log line (an error under fullgraph): a graph so far would
  // still carry what made the trace this costly.
  int guards = 20000;     // trace_max_guards: guards of the entry
  int memory_mb = 256;    // trace_max_memory_mb: memory its records hold (Tracer::held_bytes)
  int ms = 5000;          // trace_max_ms: wall time of the trace
  // trace_pure_lua_instructions: a trace that has run this many instructions without a tensor
  // (no graph input, no op) is given up (NoTensorWork) and the function runs uncompiled, as
  // torch's Dynamo skips frames without tensor work. 0: never (dispatch sets it: see there).
  int pure_lua = 0;
};

// Thrown out of Tracer::run when the trace reached TraceBudget::pure_lua instructions without
// touching a tensor. Tracing is symbolic, so nothing of the call has happened yet: the caller
// runs the function uncompiled from its start.
struct NoTensorWork {
  int instructions;
};

// Thrown out of Tracer::run when a trace passes a bound of what it may cost (TraceBudget's
// guards, memory_mb, ms): an internal failure of compilation, not a graph break.
struct TraceLimit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tracer {
 public:
  struct Options {
    std::string fn_name;
    std::vector<std::pair<std::string, int>> dynamic;  // (source description, dim)
    bool dynamic_all = false;
    int forced_break_pc = -1;  // break at this root pc (a break happened inside its callee)
    GraphBreak forced;         // ... and that break, as seen inside the callee
    TraceBudget budget;        // tc.config's trace_max_* (past one: a break, the rest eager)
  };

  // L's stack: [fn, args...] at fn_idx. The entry receives guards, graph, effects and the end.
  Tracer(lua_State* L, const vm::Proto* root, const vm::Analysis& analysis, int fn_idx, int nargs,
         Entry& e, Options opt);
  // Runs the trace. Returns normally with the entry filled, or throws RestartAt when the root
  // must break at an earlier call (a break happened inside an inlined callee).
  void run();

  struct RestartAt {
    int pc;
    GraphBreak brk;
  };

 private:
  friend struct Handlers;
  lua_State* L;
  const vm::Proto* root_;
  const vm::Analysis& an_;
  int fn_idx_, args_idx_, nargs_;
  Entry& e_;
  Options opt_;
  // dims tc.compiler.mark_dynamic marked, as (graph input, dim), and their inputs' names: checked at
  // the end (tied_dims.h check_marked_dims)
  std::vector<std::pair<int, int>> marked_dims_;
  std::vector<std::string> marked_names_;
  int objs_ = 0, K_ = 0;  // stack indices of the object table and K
  int nobjs_ = 0, nk_ = 0;
  std::unordered_map<const void*, int> obj_of_;  // one object index per real object (aliases meet)
  std::vector<std::pair<int, int>> table_sources_;  // (source, object) of every real table read
  std::vector<Frame> frames_;
  std::vector<ModelTable> tables_;
  std::vector<SymClosure> closures_;
  std::vector<Var> cells_;
  std::vector<std::optional<Var>> by_source_;           // source id -> Var read (inputs, tables)
  const Var* known_source(int src) const {
    return src < int(by_source_.size()) && by_source_[src] ? &*by_source_[src] : nullptr;
  }
  std::unordered_map<const TensorImpl*, Ref> proxies_;  // fake impl -> graph ref
  std::map<std::pair<int, std::string>, Var> overlay_;  // writes to real tables: (obj, key)
  // Writes to upvalues of real closures, by upvalue identity (lua_upvalueid): a later frame of
  // the same closure, or another closure sharing the upvalue, reads what the trace wrote.
  std::unordered_map<const void*, Var> upval_overlay_;
  const void* upvalue_id(const Frame& f, int n);  // nullptr when the function is not real Lua
  struct KeyOrder {
    std::vector<Var> keys;  // in `next` order
    int k;                  // K index of the same keys as a Lua array (KEY_ORDER guards)
  };
  std::unordered_map<int, KeyOrder> key_orders_;  // per real table (object index)
  struct Replay {  // a model table's construction replayed on a real table, for `next`
    int obj = -1;  // object index of the real table
    size_t logged = 0;  // length of the log it replays
    std::unordered_set<std::string> keys;  // every key ever set (dead keys are valid for next)
  };
  std::unordered_map<int, Replay> replays_;  // per model table
  int replayed(int id);                      // pushes model table id's replay (or breaks)
  static std::string replay_key(const Var& k);
  struct PendingEffect {
    Effect::Kind kind;
    Var target, key, value;
    int upval;
  };
  std::vector<PendingEffect> effects_;
  int steps_ = 0;
  std::chrono::steady_clock::time_point started_;
  size_t lua_kb_at_start_ = 0;
  size_t held_bytes() const;
  void check_cost();  // the TraceBudget bounds of what the trace holds (throws TraceLimit)
  int iterations_ = 0;  // backward jumps taken (loop iterations unrolled), all frames together
  int chain_ = 0;  // __index/__newindex hops through tables in progress
  std::unordered_map<const void*, const vm::Proto*> proto_memo_;  // closures seen in this trace
  std::unordered_map<int, int> table_plans_;  // made table id -> its TablePlan in the entry

  // ---- objects, constants, guards -------------------------------------------------------------
  void reserve_slot();              // room for one more value on L's stack (or a break)
  int push_obj(int obj);            // pushes the object, returns its stack index
  int add_obj(int idx);             // stores the value at idx, returns its object index
  int add_k(int idx);               // stores the value at idx into K, returns its K index
  Var from_lua(int idx, int src);   // a Var for the real value at idx read from src (guards it)
  Var from_lua_unguarded(int idx);  // a Var for a value the trace made (no source)
  int pin(int idx, const std::string& what);  // Identity guard on the object at idx; returns source
  void guard_type(int src, int type);
  void guard_equals(int src, int idx);
  void guard_identity(int src, int idx);
  Var read_source(int src);    // pushes nothing; Var for the source's current value
  void push_source(int src);   // pushes the source's current value
  Var spec(const Var& v);      // an unspecialized number as its constant (guarded); v otherwise
  bool dynamic_number(int src) const;  // the source's number is unspecialized (opt_.dynamic)
  bool marked_number(int src);         // ... or its table field is marked (mark_dynamic(tbl, key))
  Var number_input(const Var& v);      // an unspecialized number as a graph input (0-dim)
  std::unordered_map<int, Var> number_inputs_;  // source -> its graph input
  int push_var(const Var& v);  // pushes a real value for a constant/Object Var (not tensors)

  // ---- execution
  // ---------------------------------------------------------------------------------
  void step();
  void exec(Frame& f, const vm::Ins& i);
  Var& reg(Frame& f, int r);
  Var konst(const Frame& f, int k) const;
  Var upval(Frame& f, int n);
  void set_upval(Frame& f, int n, Var v);
  void deliver(std::vector<Var> results);  // the innermost frame returned these
  void assign(int ret_a, int ret_n,
              const std::vector<Var>& results);  // call results, as CALL writes them

  // ---- semantics (tracer_calls.cpp)
  // --------------------------------------------------------------- Each either produces a value
  // now (returns true, *out set) or pushed an inlined frame whose results go to (ret_a, ret_n) of
  // the current frame (returns false).
  bool index(const Var& t, const Var& key, Var* out, int ret_a);
  bool index_through(const Var& h, const Var& key, Var* out, int ret_a);  // t's __index is h
  bool index_handler(const Var& h, const Var& t, const Var& key, Var* out, int ret_a);
  void chain_hop(int step);  // +1/-1 around a hop; breaks where Lua raises (a loop)
  // A write as SETTABLE does it; a __newindex function is inlined (a frame is pushed and runs
  // before the next instruction); SETLIST's many writes go to a new table, which has none.
  void newindex(const Var& t, const Var& key, const Var& v);
  void write_through(const Var& h, const Var& t, const Var& key, const Var& v);  // via __newindex
  void tensor_assign(const Var& x, const Var& key, const Var& v);  // x[key] = v as graph nodes
  // x[key] (not a string key); with item, an index tensor in an index table is handed back
  // ({dim, index}) instead of gathered
  Var tensor_index(const Var& x, const Var& key, std::pair<int64_t, Var>* item = nullptr);
  std::vector<Var> array_items(const Var& t);  // t[1..#t] of an index table (raw, guarded)
  bool arith(int tm, const Var& a, const Var& b, Var* out, int ret_a);
  bool compare(vm::OpCode op, const Var& a, const Var& b);  // constants only (breaks otherwise)
  Var len(const Var& v);
  Var raw_get(const Var& t, const Var& key);  // real tables: raw read through a source (guarded)
  Var metatable_of(const Var& v);     // real values: pinned metatable (identity guarded) or nil
  void note_size_read(const Var& t);  // a size became a Lua number: specialize dynamic dims
  Var concat(const std::vector<Var>& parts);
  // Calls `fn` with args; results to the current frame's registers from ret_a (ret_n values,
  // -1: all, setting top). Returns true when done immediately, false when a frame was pushed.
  bool call(const Var& fn, std::vector<Var> args, int ret_a, int ret_n, bool tail);
  void push_frame(const Var& fn, const vm::Proto* p, std::vector<Var> args, int ret_a, int ret_n);
  std::vector<Var> call_op(int op, const std::vector<Var>& args);
  // A call of a function registered with tc.compiler.allow_in_graph (at stack index o, its
  // registration record at rec): one External node, outputs from its meta function on fakes.
  std::vector<Var> call_external(int o, int rec, const Var& fn, const std::vector<Var>& args);
  bool call_builtin(const std::string& name, const Var& fn, std::vector<Var>& args,
                    std::vector<Var>* out);
  std::vector<Var> iterate_real_table(const std::string& name, const Var& t, const Var& k);
  Value to_value(const Var& v, bool* ok);
  Var tensor_property(const Var& t, const std::string& key, bool* found);
  // x.grad of a tensor from outside: a graph input (or nil) guarded at <x's source>.grad, or
  // what the trace assigned to it; x.grad = v: a recorded effect (optimizers' zero_grad)
  Var tensor_grad(const Var& x);
  // <close> variables: the value's __close (nil if none); close_tbc runs the __close of the last
  // open one at or above register `from` inlined, the instruction at f.cur again after it (false
  // when none is open)
  Var close_handler(const Var& v);
  bool close_tbc(Frame& f, int from);
  void set_tensor_grad(const Var& x, const Var& v);
  const TensorImpl* real_tensor(const Var& x);  // the tensor a graph input reads, null if none
  std::unordered_map<const TensorImpl*, Var> grad_overlay_;  // x.grad written in the trace
  Var tensor_input(int src, int idx);
  Var new_table();
  Var size_table(const Shape& s);

  // ---- the end (tracer_end.cpp)
  // --------------------------------------------------------------------
  void finish_return(std::vector<Var> results);
  void finish_break(const BreakSignal& b);
  bool arith_at_break(Frame& f, const vm::Ins& i);  // see tracer_end.cpp
  void guard_aliasing();  // written tables: which other table sources are (not) the same object
  void guard_identity(const Var& a, const Var& b, bool same);  // `==`/rawequal of real values
  bool has_eq_event(const Var& v);  // a table whose metatable has __eq
  VPlan plan(const Var& v);
  std::unordered_map<int, int> closure_plans_;  // closure -> its ClosurePlan in the entry
  // negative cells (copies of a real function's upvalue): that function and the upvalue index
  std::unordered_map<int, std::pair<Var, int>> real_cells_;
  Ref output(Ref r);
  std::vector<StackFrame> user_stack() const;
  // The line of the current instruction in the innermost frame outside tc's own Lua code (the
  // line eager's errors name), and its chunk; the innermost frame's when all are tc's.
  int user_line(std::string* file) const;

 public:
  static const vm::Proto* proto_of(lua_State* L, int idx, std::string* key);  // cached by dump hash
};

int arith_op(vm::OpCode op);  // LUA_OPADD ... of an arithmetic opcode, -1 for others
std::string dump_key(lua_State* L, int idx);
Var normalize_key(const Var& k);      // t[2.0] is t[2]
std::string key_string(const Var& k);  // a constant key as text ("s"name, "i"3); "" otherwise  // hash of lua_dump of the Lua function at idx

}  // namespace tc::capture
