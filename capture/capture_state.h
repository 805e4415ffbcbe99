// Process-wide capture state: code caches by prototype key, the installed graph compiler, the
// stance, counters and the explain report. Internal to capture.
#pragma once
#include <chrono>
#include <lua.hpp>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "entry.h"

namespace tc::capture {

// Options of one tc.compile call (shared by the resume functions it reaches).
struct CompileConfig {
  std::string backend = "tc";
  int backend_fn_ref = LUA_NOREF;  // a Lua function backend
  bool fullgraph = false;
  int dynamic = -1;  // -1: automatic (after one size-driven recompile), 0: never, 1: from the start
  std::string mode = "default";
  // tc.compile(module): the module's forward (a Lua function) keys the code caches of the
  // wrapper and of every function compiled regionally under it (tc.nn's module_call), as
  // torch.compile keys by forward's code, so each module class has caches of its own.
  std::string code_key;
  std::string where;  // the user's line of the tc.compile call (names tc's own functions)
  std::vector<std::pair<std::string, Value>> options;  // the backend's `options = {...}`, by key
  // What an entry was compiled for (backend, mode, options): an entry serves only calls whose
  // tc.compile asked for the same, as torch.compile guards on the backend.
  std::string backend_key;
  CompileOptions backend_options() const { return {mode, fullgraph, dynamic, options}; }
};

// The userdata behind a compiled function (user value 1: the original function).
struct CompiledFn {
  std::shared_ptr<CompileConfig> cfg;
  CodeCache* cc = nullptr;
  uint64_t generation = 0;
  std::string key;
  std::string name;  // what reports call its cache (a module: class, forward, tc.compile's line)
};

struct Stats {
  int64_t traces = 0, backend_compiles = 0, cache_hits = 0, recompiles = 0, graph_breaks = 0,
          fallbacks = 0;
  int64_t guard_fast_hits = 0;  // cache hits proven by the guards' fast path (guards.h)
  int64_t max_guards = 0;       // the most guards one trace made (bounded by trace_max_guards)
  // traces given up for having no tensor work (trace_pure_lua_instructions), and the calls that
  // ran uncompiled without a trace because of it (CodeCache::pure_lua)
  int64_t pure_lua_skips = 0, pure_lua_calls = 0;
  // compiled training (training.cpp): entries made, those that train op by op with eager
  // autograd, backward graphs compiled, tensors their forwards save for the backward
  int64_t training_entries = 0, training_eager = 0, backward_compiles = 0, saved_tensors = 0;
  // compiled DDP (ddp_split.cpp): training graphs split at bucket boundaries, their subgraphs
  int64_t ddp_split_graphs = 0, ddp_subgraphs = 0;
  CompileReport backend;        // the backends' reports, summed (perf_hints not kept)
  double trace_ms = 0, backend_ms = 0;
};

struct Report {
  struct GraphRec {
    std::string function;
    std::vector<std::string> ops;
    std::string code;
    CompileReport backend;  // what the backend said about compiling this graph
  };
  struct GuardRec {
    std::string function;
    // the entry (its cache kept alive by the report), whose guards are made into text and
    // folded only when a report is made: a trace through a long chain of tables has sources
    // whose descriptions run to kilobytes each, and a copy per entry doubled what entries hold
    std::shared_ptr<const CodeCache> cache;
    size_t entry = 0;
    std::vector<std::string> lines() const {
      return guard_listing(cache->entries[entry]->guards.texts());
    }
  };
  struct RecompileRec {
    std::string function;
    int count;
    std::string reason;
  };
  struct TimeRec {
    std::string function;
    double trace_ms, backend_ms;  // backend_ms: the whole backend call (lower, codegen, compile ...)
    double lower_ms = 0, codegen_ms = 0, compile_ms = 0;  // the backend's own parts of it
  };
  std::vector<GraphRec> graphs;
  std::vector<GraphBreak> breaks;
  std::vector<GuardRec> guards;
  std::vector<RecompileRec> recompiles;
  std::vector<TimeRec> times;
  // compiled training (training.cpp): per joint, "function: what it saves; the backward's ops"
  std::vector<std::string> training;
  std::vector<std::string> fallbacks;  // "function: why it runs uncompiled"
  struct CacheRec {
    std::string function;
    int entries;
    int64_t hits;
    bool gave_up;
  };
  std::vector<CacheRec> caches;  // filled when the report is made (cache_records)
};
// The code caches of the current state, for the report (function, entries, hits).
std::vector<Report::CacheRec> cache_records();

struct State {
  std::unordered_map<std::string, std::shared_ptr<CodeCache>>
      caches;  // shared: a pending break keeps its cache
  std::vector<std::unique_ptr<vm::Proto>> resume_protos;
  GraphCompiler compiler;
  std::string stance = "default";
  bool compile_all = false;  // tcrun --compile-all (set_compile_all)
  // the functions skipped as pure Lua whose uncompiled calls are running now, innermost last
  // (dispatch.cpp's run_as_skipped), on thread skip_thread
  std::vector<std::shared_ptr<CodeCache>> skipped_active;
  std::thread::id skip_thread;
  uint64_t generation = 1;
  Stats stats;
  Report report;
};
State& state();

// dispatch.cpp
// tc.config[key] when it is an integer (a boolean), else `fallback`.
int config_int(lua_State* L, const char* key, int fallback);
bool config_bool(lua_State* L, const char* key, bool fallback);
int l_dispatch(lua_State* L);  // (compiled fn userdata, args...) -> (f, args...) to tail-call
// (pending call state, results...) -> (f, args...): continues after a call made at a break
int l_after_call(lua_State* L);
// eager_errors.cpp: the kind ("local", "global", "method" ...) and name of the value in `reg` at
// `pc` as Lua's error messages name it ("" when unknown); for a call at a break whose callee (at
// stack index `callee`) is not callable, pushes eager's error message (the chunk name taken
// from the Lua function at `fn_idx`) and returns true.
std::string object_kind(const vm::Proto& p, int pc, int reg, std::string* name);
std::string chunk_id(const std::string& source);  // Lua's short_src of a chunk name
bool push_call_error(lua_State* L, const vm::Proto& p, int pc, int callee, int fn_idx);

// An unspecialized Lua number as the graph input it is (a 0-dim wrapped number, as the op
// binder makes of numbers: Int64 or Float64).
Tensor number_input(lua_State* L, int idx);
CodeCache* cache_for(lua_State* L, int fn_idx, const CompiledFn& cf);
std::string state_prefix(lua_State* L);  // caches are per Lua state: their keys start with this
// Pushes the compiled wrapper of the Lua function at idx (made once per function, config
// inherited), used for Lua functions called at a break (regional compilation).
void push_wrapper(lua_State* L, int fn_idx, const std::shared_ptr<CompileConfig>& cfg);
// lua_api.cpp
void push_compiled(lua_State* L, int fn_idx, std::shared_ptr<CompileConfig> cfg,
                   std::string name = "");  // a new wrapper
bool log_enabled(lua_State* L, const char* topic);
// Adds a backend's report of one graph to tc.compiler.stats() and prints its perf hints
// (TC_LOGS=perf_hints).
void note_backend_report(lua_State* L, const std::string& function, const CompileReport& r);
void raise_graph_break(lua_State* L, const GraphBreak& b);  // pushes the tc.GraphBreakError table
// The Lua state that runs graphs on this thread (set around each run of a graph): External nodes
// (functions registered with tc.compiler.allow_in_graph) call their function in it.
lua_State* running_state();
struct RunningState {
  lua_State* prev;
  explicit RunningState(lua_State* L);
  ~RunningState();
  RunningState(const RunningState&) = delete;
  RunningState& operator=(const RunningState&) = delete;
};
// An External node's call: runs the function registered with allow_in_graph under `id` on the
// real arguments and checks its results against the fakes its meta function gave while tracing.
std::vector<Tensor> run_external(int id, const std::string& name, const Stack& expect,
                                 const Stack& args);
// The message of the error value at idx (a string, or a tc error table's message).
std::string error_text(lua_State* L, int idx);
// lua_backend.cpp: compile with a Lua function backend; leaves nothing on the stack, throws
// tc::Error (CompileError) on failure.
// (`numbers`: the inputs that are unspecialized numbers, passed as 0-dim tensors.)
int lua_backend_compile(lua_State* L, int backend_fn_ref, const Graph& g,
                        const std::vector<int>& input_slots, const std::vector<int>& numbers);
// Runs a Lua backend's callable (ref) on the inputs at the slots; returns outputs or throws.
bool lua_backend_run(lua_State* L, int callable_ref, const std::vector<int>& input_slots,
                     const std::vector<int>& numbers, size_t nouts, std::vector<Tensor>* outs);

}  // namespace tc::capture
