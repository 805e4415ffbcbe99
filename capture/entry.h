// What a trace produces (a cache entry: guards, graph, side effects, how the frame ends) and the
// per-function code cache holding entries.
#pragma once
#include <lua.hpp>
#include <memory>
#include <string>
#include <vector>

#include "analysis.h"
#include "breaks.h"
#include "guards.h"
#include "proto.h"
#include "tc/capture/graph.h"
#include "training.h"

namespace tc::capture {

// How to rebuild one Lua value after the graph ran: a constant, a graph output, a value read
// through a source, or a table made in the traced code.
struct VPlan {
  enum class Kind : uint8_t { Nil, Bool, Int, Float, Str, Output, Source, Table, Size, Closure };
  Kind kind = Kind::Nil;
  bool b = false;
  int64_t i = 0;  // Int; Output: graph output; Source: source id; Table/Size/Closure: plan index
  double f = 0;
  std::string s;
};

// A table created in the traced code that must exist after the graph (returned, stored, live at
// a break). Built once per run, in creation order, so references between them keep identity.
struct TablePlan {
  std::vector<VPlan> array;
  std::vector<std::pair<VPlan, VPlan>> hash;
  VPlan metatable;  // from setmetatable in the trace (Nil: none; Size tables get tc.Size)
};

// A function made in the traced code that must exist after the graph. Its prototype is loaded
// as a main chunk (a new closure with fresh upvalues) and each upvalue is then either joined to
// the real function's upvalue it captured, or a fresh cell shared by every closure of the run
// that captured the same cell in the trace, holding the cell's last value. Registers of the
// frame that share a cell get a copy: vm's resume check (capture_conflict) refuses the breaks
// after which the frame or a closure could write the cell and the other read it.
struct ClosurePlan {
  std::string chunk, source;  // the prototype as a binary main chunk, its chunk name
  struct Up {
    VPlan fn;       // Source: join upvalue fn_up of this function
    int fn_up = 0;  // 1-based
    int cell = -1;  // else: the trace's cell
    VPlan value;
  };
  std::vector<Up> ups;
};

struct Effect {
  // SetGrad: target.grad = value; SetGradMode: tc.set_grad_enabled(value)
  enum class Kind : uint8_t { RawSet, SetUpval, SetGrad, SetGradMode };
  Kind kind;
  VPlan target;   // the table, or the function whose upvalue is set
  VPlan key;      // RawSet
  int upval = 0;  // SetUpval
  VPlan value;
};

enum class EndKind : uint8_t {
  Return,    // the frame returns `returns`
  Break,     // the instruction at pc runs in stock Lua, then a resume function continues
  Fallback,  // the whole frame runs uncompiled (tracing could not handle it safely)
};

struct Entry {
  GuardProgram guards;
  Graph graph;
  CompiledGraph run;
  int lua_backend_ref = LUA_NOREF;  // a Lua backend's callable, when the backend is a function
  std::vector<int> input_sources;   // source id of each graph input
  std::vector<int> number_inputs;   // inputs that are unspecialized numbers (0-dim wrapped)
  std::vector<TablePlan> tables;
  std::vector<ClosurePlan> closures;
  std::vector<Effect> effects;
  EndKind end = EndKind::Return;
  std::vector<VPlan> returns;
  // Break: the registers rebuilt at `pc` (register, value), `top` for open operands, varargs.
  int pc = -1;
  std::vector<std::pair<int, VPlan>> regs;
  int top = 0;
  std::vector<VPlan> varargs;
  std::vector<int> resume_pcs;  // legal successors checked at trace time
  bool resume_uncompiled = false;
  int arith = -1;  // a lua_arith operator: the breaking instruction is that arithmetic (run_break)
  bool index_at_break = false;  // the breaking instruction is an indexing run at the break
  // CALL breaks: the callee's name as Lua finds it in the bytecode ("method", "rep"; kind ""
  // when it has none), for argument errors worded as eager's (dispatch.cpp's call-site helpers)
  std::string callee_kind, callee_name;
  GraphBreak brk;
  std::string fallback_reason;
  int trace_id = 0;
  std::string backend_key;  // CompileConfig::backend_key of the compile that made it
  // A training entry (training.h): traced with grad mode on and an input that requires grad; its
  // forward and backward graphs are made and compiled at its first call (per size of its dynamic
  // dims: the key is those sizes, empty for a graph without any).
  bool trains = false;
  mutable std::vector<std::pair<std::string, std::shared_ptr<Training>>> training;
  // A training entry whose graph uses a DDP module's parameters runs split at bucket boundaries
  // (ddp_split.h); decided at its first call (null until then).
  mutable std::shared_ptr<struct DdpSplit> ddp_split;
};

// Turns a traced entry into "run the frame uncompiled": its guards and break record stay.
inline void make_fallback(Entry& e, std::string why) {
  Entry f;
  f.guards = std::move(e.guards);
  f.brk = std::move(e.brk);
  f.end = EndKind::Fallback;
  f.backend_key = std::move(e.backend_key);
  f.fallback_reason = std::move(why);
  e = std::move(f);
}

struct CodeCache {
  std::string key;   // hash of the proto's dump (plus the resume pc for resume functions)
  // the same without what is particular to this process (remembered_dynamic.h stores under it)
  std::string disk_key, origin_disk_key;
  bool remember = false;  // tc.config.remember_dynamic when the cache was made (resume caches inherit it)
  std::string name;  // "function <bar.lua:1>", "resume of function <bar.lua:1> at line 3"
  std::string fn_name;  // the function's own name (a resume function's: the one it continues)
  const vm::Proto* proto = nullptr;
  std::shared_ptr<vm::Analysis> analysis;
  // Resume functions: the proto they continue, the pc there, and the prologue length.
  const vm::Proto* origin = nullptr;
  std::string origin_key;
  int origin_pc = -1, shift = 0;
  std::string chunk;  // resume functions: the verified binary chunk to load per closure
  std::vector<std::unique_ptr<Entry>> entries;
  bool gave_up = false;  // recompile limit reached: runs uncompiled from now on
  // a trace of it ran trace_pure_lua_instructions without touching a tensor: calls with no tensor
  // among their arguments and the function's upvalues run uncompiled (drive_from), others trace
  bool pure_lua = false;
  int pure_lua_steps = 0;  // the instructions its skipped trace ran (the notice below names them)
  // a call run uncompiled by that skip did tensor work (dispatch.cpp's notice): it is no longer
  // skipped, and its traces are not bounded by trace_pure_lua_instructions
  bool tensor_work = false;
  int recompiles = 0;
  int64_t hits = 0;  // calls that found a matching entry
  // Dynamic dims learned from size-driven recompiles: (source description, dim).
  std::vector<std::pair<std::string, int>> dynamic;
};

}  // namespace tc::capture
