// Sources (where a value came from: arg[1].layers[3].linear1.weight) and guards (what tracing
// relied on), compiled to a flat program evaluated on the Lua stack without allocation.
#pragma once
#include <lua.hpp>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tc/tensor.h"

namespace tc::capture {

// Every source is a raw read: guards never run metamethods.
enum class SrcKind : uint8_t {
  Arg,        // the n-th argument of the dispatched call (1-based; varargs continue the count)
  Fn,         // the dispatched closure itself
  Upval,      // upvalue n of the function at parent
  Field,      // rawget(parent, key) with a string key (K[key])
  Index,      // rawget(parent, n) with an integer key
  Metatable,  // getmetatable(parent) without __metatable
  Pinned,     // K[n]: an object whose identity is guarded (metatables, functions)
  Keyed,      // rawget(parent, the value of source n): a table read with a key from outside
  Grad,       // parent.grad: the gradient of the tensor at parent (nil when it has none)
};

struct Source {
  SrcKind kind;
  int parent = -1;
  int64_t n = 0;     // Arg/Upval/Index number; Pinned: K index; Field: K index of the key
  std::string name;  // Field key, Upval name, Pinned description
};

struct TensorSpec {
  DType dtype;
  Device device;
  bool requires_grad = false;
  Shape sizes, strides;
  uint64_t dynamic = 0;  // bit d: dim d is dynamic (size >= 2, any value), strides unchecked
  // tc.compiler.mark_dynamic(x, dim, {min =, max =}): {dim, min, max} of dynamic dims whose size
  // must also lie in [min, max] (a size outside misses the guard: a recompile)
  std::vector<std::array<int64_t, 3>> ranges;
};

enum class GuardKind : uint8_t {
  Type,         // lua_type(v) == type (userdata: and not a tc tensor)
  Tensor,       // a tc tensor matching spec
  Equals,       // v is the constant K[k] (rawequal; numbers also by subtype int/float)
  Identity,     // v is the object K[k]
  GlobalState,  // grad mode, default dtype and device as when traced
  ArgCount,     // the number of arguments (vararg functions: select('#', ...) may depend on it)
  SameAs,       // v is (flag) / is not the object at source k: an identity test (`==`, rawequal)
  KeyOrder,     // v is a table whose keys, as `next` visits them, are exactly the array K[k]
  // The tables of `aliases` (no src): for each written one and every other, the same object
  // exactly when they were while tracing. One guard for a trace's whole aliasing, checked in
  // O(n log w): a pair per (table read, table written) grew with their product (a trace over a
  // chain of 800 tables writing 300 of them made 80,000).
  Aliasing,
};

const char* guard_kind_name(GuardKind k);  // "TENSOR_MATCH"

// One guard as text: "TENSOR_MATCH", "m.layers[3].linear1.weight", "float32[10, 10] on cpu".
struct GuardText {
  std::string kind, source, expected;
};
// What explain and TC_LOGS=guards print (guard_listing.cpp): grouped by the root of the source,
// repeated layers folded ("m.layers[1..64].linear1.weight ... (x64)"), one line per group.
std::vector<std::string> guard_listing(const std::vector<GuardText>& guards);
// What a real object is called in listings and guard failures, without its address (which
// changes from run to run): "class Linear", "function <model.lua:12>", "builtin math.sqrt".
std::string display_name(lua_State* L, int idx);

struct Guard {
  Guard() = default;
  explicit Guard(GuardKind k, int s = -1) : kind(k), src(s) {}
  GuardKind kind = GuardKind::Type;
  int src = -1;
  int type = LUA_TNIL;  // Type (numbers: ival 1 an integer, 2 a float, 0 either)
  int k = 0;            // Equals/Identity: K index of the value (kept alive there)
  // Equals/Identity compared in C++ (no K lookup): the value's type and payload; `ptr` is the
  // object (Identity) or the interned short string (Equals on strings; null: compare via K).
  int vtype = LUA_TNIL;
  bool is_int = false, bval = false;
  int64_t ival = 0;
  double fval = 0;
  const void* ptr = nullptr;
  TensorSpec tensor;  // Tensor
  std::string expected;  // printed expected value ("float32[10, 10] on cpu", "3", "function 0x...")
                         // (SameAs, Aliasing: made when printed, from the sources)
  // (what the one GlobalState and the one Aliasing guard of a program check is the program's:
  // an entry has hundreds of guards, each record as small as it can be)
};

// What a program's GlobalState guard expects.
struct GlobalStateSpec {
  bool grad = true;
  DType default_dtype = DType::Float32;
  Device default_device;
  std::string matmul_precision = "highest";
};

// A table of a program's Aliasing guard.
struct AliasMember {
  int src;
  int cls;       // the object it was while tracing (members of one class were the same table)
  bool written;  // a table the trace wrote to
};

// The per-trace builder and, once finished, the entry's program.
struct GuardProgram {
  std::vector<Source> sources;
  std::vector<Guard> guards;
  GlobalStateSpec global;             // the GlobalState guard's
  std::vector<AliasMember> aliases;   // the Aliasing guard's tables
  int k_ref = LUA_NOREF;   // registry ref of K: key strings, constants and pinned objects
  mutable int nargs_ = 0;  // of the last check (ArgCount guards, failure messages)

  // Builder side (while tracing; K is the table at stack index `k_idx`).
  struct SourceKey {  // what makes a source (name: the key of a Field, empty otherwise)
    SrcKind kind;
    int parent;
    int64_t n;
    std::string name;
  };
  struct SourceKeyView {
    SrcKind kind;
    int parent;
    int64_t n;
    std::string_view name;
  };
  struct SourceKeyOps {  // hash and equality of keys and views (lookups allocate nothing)
    using is_transparent = void;
    static SourceKeyView view(const SourceKey& k) { return {k.kind, k.parent, k.n, k.name}; }
    static const SourceKeyView& view(const SourceKeyView& k) { return k; }
    template <class A>
    size_t operator()(const A& a) const {
      const SourceKeyView& k = view(a);
      return std::hash<std::string_view>()(k.name) ^
             (size_t(k.parent) * 0x9e3779b97f4a7c15ULL + size_t(k.n) * 31 + size_t(k.kind));
    }
    template <class A, class B>
    bool operator()(const A& a0, const B& b0) const {
      const SourceKeyView &a = view(a0), &b = view(b0);
      return a.kind == b.kind && a.parent == b.parent && a.n == b.n && a.name == b.name;
    }
  };
  std::unordered_map<SourceKey, int, SourceKeyOps, SourceKeyOps> dedup;  // one source per key
  std::unordered_map<const void*, int> pinned;              // object -> its Pinned source
  std::vector<uint8_t> guarded;                             // per source: a bit per kind guarded
  std::unordered_set<uint64_t> same_as;                     // (src, src) already guarded
  // True the first time (the guard is to be made), false after.
  bool first_guard(int src, GuardKind k) {  // (Aliasing is one guard of no source: never asked)
    static_assert(int(GuardKind::KeyOrder) < 8);
    if (int(guarded.size()) <= src) guarded.resize(std::max<size_t>(src + 1, 2 * guarded.size()));
    const uint8_t bit = uint8_t(1u << int(k));
    if (guarded[src] & bit) return false;
    guarded[src] |= bit;
    return true;
  }
  bool first_same_as(int a, int b) {
    return same_as.insert(uint64_t(uint32_t(a)) << 32 | uint32_t(b)).second;
  }

  int source(SrcKind kind, int parent, int64_t n, std::string_view name = {});
  // The trace is over: frees the builder's maps and the vectors' spare room (an entry lives as
  // long as its cache; under compile-all a program keeps hundreds).
  void end_building();
  std::string describe(int src) const;  // "arg[1].layers[3].linear1.weight"
  void describe_into(int src, std::string* out) const;  // appends it

  // Evaluation: pushes K then one slot per source above `base` (= lua_gettop on entry) and
  // returns true iff every guard passes. Leaves the slots on the stack (slot(i) = base+2+i).
  // After a pass through the fast path (below) only the slots of `needed` sources, and those the
  // evaluated guards read, hold values; the others are nil. After a failure every slot is filled.
  bool check(lua_State* L, int fn_idx, int args_idx, int nargs) const;
  // The tensor of source `src` after a passing check (from its slot, or the fast path's memo).
  const Tensor* tensor_at(lua_State* L, int base, int src) const;
  // Sources whose slots the caller reads after a passing check (value plans, inputs handed to a
  // Lua backend). Set by the dispatcher before the entry's first check.
  std::vector<int> needed;
  static int slot(int base, int src) { return base + 2 + src; }
  // After a failed check (slots still pushed): the first failing guard as
  // "arg[1]: expected float32[10, 10] on cpu, got float32[20, 10] on cpu". Empty if none fails.
  std::string failure(lua_State* L, int base) const;
  // Index of the first failing guard, or -1.
  int first_failure(lua_State* L, int base) const;
  std::vector<std::string> lines() const;  // one printed line per guard
  std::vector<GuardText> texts() const;     // the same, in parts (for guard_listing)
  // Drops Type guards implied by an Identity/Equals/Tensor guard of the same source.
  void simplify();
  // Fills the C++ payload of an Equals/Identity guard from the value at idx.
  static void capture_value(lua_State* L, int idx, Guard& g);

  // The evaluation's compact copy of sources and guards (24 bytes each, tensor sizes and strides
  // in one flat array), made on the first check: large models have thousands of guards, and
  // the full records (strings, vectors) would not stay in cache.
  struct HotSource {
    SrcKind kind;
    int parent;
    int64_t n;
  };
  struct HotGuard {
    GuardKind kind;
    int8_t vtype;
    bool flag;  // Equals: is_int (numbers) or the boolean; Tensor: requires_grad
    int src;
    union {
      int64_t ival;
      double fval;
      const void* ptr;
      int64_t dims_at;  // Tensor: offset in `dims` (sizes then strides), rank in `k`
    };
    int k;  // Equals strings without ptr: K index; Tensor: rank
  };
  mutable std::vector<HotSource> hot_sources;
  mutable std::vector<HotGuard> hot;
  mutable std::vector<int64_t> dims;
  mutable bool compiled = false;
  void compile_hot() const;
  // Aliasing's scratch (reused: evaluation allocates nothing once warm): (object, class) of the
  // written classes, sorted; per class, the object its written members are (null: none written)
  mutable std::vector<std::pair<const void*, int>> alias_written;
  mutable std::vector<const void*> alias_object;

  // The fast path. After two passing checks with the same argument tables, the program keeps a
  // memo: which sources are "known" (their value cannot have changed while the tables they are
  // read from are byte-for-byte unchanged, see table_snapshot.h), the snapshots, and the tensors
  // of known tensor sources. A call whose argument tables are the memo's and whose snapshots
  // match re-evaluates only the guards on the other sources, the tensor metadata of the known
  // tensors and the global state; anything else goes through the full check.
  struct Memo;
  mutable std::shared_ptr<Memo> memo;
  mutable bool last_fast_ = false;

 private:
  void push_source(lua_State* L, int base, int s, int fn_idx, int args_idx, int nargs) const;
  bool guard_ok(lua_State* L, int base, int i) const;
  bool check_full(lua_State* L, int fn_idx, int args_idx, int nargs) const;
  bool check_fast(lua_State* L, int base, int fn_idx, int args_idx, int nargs) const;
  void after_full_pass(lua_State* L, int base, int nargs) const;
  void build_memo(lua_State* L, int base, int nargs) const;
  bool is_root(int s) const;
  bool aliasing_ok(lua_State* L, int base) const;
  std::string aliasing_failure(lua_State* L, int base) const;
  std::string expected_of(const Guard& g) const;  // g.expected, or made from the sources
  void aliasing_texts(std::vector<GuardText>* out) const;
};

std::string tensor_spec_string(const TensorSpec& t);
// Pushes x.grad of the tensor at idx (nil for a tensor without one and for other values).
void push_grad(lua_State* L, int idx);
// Pushes a new table with weak keys ("k") or weak values ("v").
void push_weak_table(lua_State* L, const char* mode);

}  // namespace tc::capture
