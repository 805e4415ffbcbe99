// Sources and guards: building (dedup), printing and the allocation-free evaluation loop.
#include "guards.h"

#include <bit>
#include <algorithm>
#include <cstring>

#include "lua_binding.h"
#include "table_snapshot.h"
#include "tc/config.h"

namespace tc::capture {

// A float constant is the same value bit for bit: -0.0 is not 0.0 (1/x, tostring and string
// conversion tell them apart, though == does not), and a NaN passes its own guard.
static bool same_float(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

struct GuardProgram::Memo {
  bool ready = false;
  int nargs = 0;
  // The root tables (arguments, upvalues: see is_root) whose contents the memo covers: (source,
  // table). The ephemeron table (weak keys: these tables) maps each to `vals`, so the memo never
  // keeps a model alive, and a root that died (its address possibly reused) is seen as missing.
  std::vector<std::pair<int, const void*>> roots;
  int eph_ref = LUA_NOREF;
  int vals_ref = LUA_NOREF;  // vals[s + 1]: the value of known source s (pushed when needed)
  std::vector<char> known;   // per source
  struct Snap {
    const void* table;
    TableShape shape;
    size_t at;  // offset in bytes
  };
  std::vector<Snap> snaps;
  std::vector<unsigned char> bytes;
  std::vector<int> push_known, push_live;  // slots filled by the fast path, in source order
  std::vector<int> live_guards;            // guards evaluated on slots
  int slots = 0;                           // slots the fast path fills (1 + the highest used)
  std::vector<std::pair<int, const Tensor*>> known_tensors;  // (guard, tensor) rechecked
  uint64_t epoch = 0;  // metadata_epoch() when known_tensors last passed (tensor.h)
  std::vector<const Tensor*> tensor_of;                       // per source (known tensors)
  // When to (re)build: after two full passes with the same argument tables; given up when the
  // fast path keeps missing (a table the program reads changes on every call).
  std::vector<const void*> last_roots;
  int builds = 0;
  int64_t fast_hits = 0;
};

int GuardProgram::source(SrcKind kind, int parent, int64_t n, std::string_view name) {
  // the name is part of the key for fields only (an upvalue's name just describes it)
  const std::string_view key = kind == SrcKind::Field ? name : std::string_view();
  auto it = dedup.find(SourceKeyView{kind, parent, n, key});
  if (it != dedup.end()) return it->second;
  sources.push_back({kind, parent, n, std::string(name)});
  const int id = int(sources.size()) - 1;
  dedup.emplace(SourceKey{kind, parent, n, std::string(key)}, id);
  return id;
}

void GuardProgram::end_building() {
  decltype(dedup)().swap(dedup);
  decltype(pinned)().swap(pinned);
  decltype(guarded)().swap(guarded);
  decltype(same_as)().swap(same_as);
  sources.shrink_to_fit();
  guards.shrink_to_fit();
}

static bool is_identifier(const std::string& s) {
  if (s.empty() || isdigit((unsigned char)s[0])) return false;
  for (char c : s)
    if (!isalnum((unsigned char)c) && c != '_') return false;
  return true;
}

std::string GuardProgram::describe(int src) const {
  std::string out;
  describe_into(src, &out);
  return out;
}

// Appends the description: one string for the whole path, not one per level.
void GuardProgram::describe_into(int src, std::string* out) const {
  const Source& s = sources[src];
  switch (s.kind) {
    case SrcKind::Arg:
      *out += "arg[" + std::to_string(s.n) + "]";
      return;
    case SrcKind::Fn:
      *out += "fn";
      return;
    case SrcKind::Upval:
      if (sources[s.parent].kind != SrcKind::Fn) {
        describe_into(s.parent, out);
        *out += ".<upvalue ";
      }
      *out += s.name.empty() ? "upvalue " + std::to_string(s.n) : s.name;
      if (sources[s.parent].kind != SrcKind::Fn) *out += ">";
      return;
    case SrcKind::Field:
      if (sources[s.parent].kind == SrcKind::Upval && sources[s.parent].name == "_ENV") {
        *out += s.name;  // a global
        return;
      }
      describe_into(s.parent, out);
      if (is_identifier(s.name))
        *out += "." + s.name;
      else
        *out += "[\"" + s.name + "\"]";
      return;
    case SrcKind::Index:
      describe_into(s.parent, out);
      *out += "[" + std::to_string(s.n) + "]";
      return;
    case SrcKind::Metatable:
      *out += "getmetatable(";
      describe_into(s.parent, out);
      *out += ")";
      return;
    case SrcKind::Pinned:
      *out += s.name;
      return;
    case SrcKind::Keyed:
      describe_into(s.parent, out);
      *out += "[";
      describe_into(int(s.n), out);
      *out += "]";
      return;
    case SrcKind::Grad:
      describe_into(s.parent, out);
      *out += ".grad";
      return;
  }
  *out += "?";
}

static int64_t tensor_meta(DType dtype, Device device) {
  return int64_t(dtype) | int64_t(device.type) << 8 | int64_t(device.index) << 16;
}

void GuardProgram::compile_hot() const {
  hot_sources.clear();
  hot_sources.reserve(sources.size());  // exactly: an entry keeps them as long as its cache
  for (const Source& s : sources) hot_sources.push_back({s.kind, s.parent, s.n});
  hot.clear();
  hot.reserve(guards.size());
  dims.clear();
  for (const Guard& g : guards) {
    HotGuard h{};
    h.kind = g.kind;
    h.src = g.src;
    h.vtype = int8_t(g.vtype);
    h.k = g.k;
    switch (g.kind) {
      case GuardKind::Equals:
        if (g.vtype == LUA_TNUMBER) {
          h.flag = g.is_int;
          if (g.is_int)
            h.ival = g.ival;
          else
            h.fval = g.fval;
        } else if (g.vtype == LUA_TBOOLEAN) {
          h.flag = g.bval;
        } else {
          h.ptr = g.ptr;
        }
        break;
      case GuardKind::Identity:
        h.ptr = g.ptr;
        break;
      case GuardKind::Type:
        h.vtype = int8_t(g.type);
        h.ival = g.ival;  // numbers: 1 an integer, 2 a float, 0 either
        break;
      case GuardKind::ArgCount:
        h.ival = g.ival;
        break;
      case GuardKind::SameAs:
        h.flag = g.bval;
        break;
      case GuardKind::Tensor:
        h.flag = g.tensor.requires_grad;
        h.vtype = g.tensor.dynamic != 0;
        h.k = int(g.tensor.sizes.size());
        h.dims_at = int64_t(dims.size()) + 1;
        dims.push_back(tensor_meta(g.tensor.dtype, g.tensor.device));
        dims.insert(dims.end(), g.tensor.sizes.begin(), g.tensor.sizes.end());
        dims.insert(dims.end(), g.tensor.strides.begin(), g.tensor.strides.end());
        break;
      case GuardKind::GlobalState:
      case GuardKind::KeyOrder:
      case GuardKind::Aliasing:  // read from the full record
        break;
    }
    hot.push_back(h);
  }
  compiled = true;
}

void GuardProgram::push_source(lua_State* L, int base, int s, int fn_idx, int args_idx,
                               int nargs) const {
  const HotSource& h = hot_sources[s];
  switch (h.kind) {
    case SrcKind::Arg:
      if (h.n <= nargs)
        lua_pushvalue(L, args_idx + int(h.n) - 1);
      else
        lua_pushnil(L);
      break;
    case SrcKind::Fn:
      lua_pushvalue(L, fn_idx);
      break;
    case SrcKind::Upval:
      if (lua_type(L, slot(base, h.parent)) != LUA_TFUNCTION ||
          !lua_getupvalue(L, slot(base, h.parent), int(h.n)))
        lua_pushnil(L);
      break;
    case SrcKind::Field:
      if (lua_type(L, slot(base, h.parent)) == LUA_TTABLE) {
        lua_rawgeti(L, base + 1, h.n);
        lua_rawget(L, slot(base, h.parent));
      } else {
        lua_pushnil(L);
      }
      break;
    case SrcKind::Index:
      if (lua_type(L, slot(base, h.parent)) == LUA_TTABLE)
        lua_rawgeti(L, slot(base, h.parent), h.n);
      else
        lua_pushnil(L);
      break;
    case SrcKind::Metatable:
      if (!lua_getmetatable(L, slot(base, h.parent))) lua_pushnil(L);
      break;
    case SrcKind::Pinned:
      lua_rawgeti(L, base + 1, h.n);
      break;
    case SrcKind::Keyed:
      if (lua_type(L, slot(base, h.parent)) == LUA_TTABLE) {
        lua_pushvalue(L, slot(base, int(h.n)));
        lua_rawget(L, slot(base, h.parent));
      } else {
        lua_pushnil(L);
      }
      break;
    case SrcKind::Grad:
      push_grad(L, slot(base, h.parent));
      break;
  }
}

bool GuardProgram::check(lua_State* L, int fn_idx, int args_idx, int nargs) const {
  if (!compiled) compile_hot();
  lua_checkstack(L, int(hot_sources.size()) + 8);
  const int base = lua_gettop(L);
  if (memo && memo->ready && snapshots_work(L) && check_fast(L, base, fn_idx, args_idx, nargs))
    return true;
  lua_settop(L, base);
  last_fast_ = false;
  if (!check_full(L, fn_idx, args_idx, nargs)) return false;
  after_full_pass(L, base, nargs);
  return true;
}

bool GuardProgram::check_full(lua_State* L, int fn_idx, int args_idx, int nargs) const {
  const int base = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, k_ref);
  for (int s = 0; s < int(hot_sources.size()); s++) push_source(L, base, s, fn_idx, args_idx, nargs);
  nargs_ = nargs;
  return first_failure(L, base) < 0;
}

// Whether `t` is dense with its dims in the stride order of the spec's example: the kernels of a
// graph with dynamic dims index such an input that way (backends/lower/sym_shapes.cpp restride).
// A stride-0 expand passed where a dense example was traced read past its storage.
// (An example that was not dense ran on the eager backend, which takes any strides.)
static bool dense_in_order(const Shape& sizes, const Shape& strides, const Shape& order_of) {
  const int n = int(order_of.size());
  int buf[16];  // the guard's hot path: no allocation for up to 16 dims
  std::vector<int> heap(n > 16 ? n : 0);
  int* order = n > 16 ? heap.data() : buf;
  for (int i = 0; i < n; i++) {  // insertion sort by stride, stable
    int j = i;
    for (; j > 0 && order_of[order[j - 1]] > order_of[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  int64_t expect = 1;
  for (int k = 0; k < n; k++) {
    const int d = order[k];
    if (strides[d] != expect && sizes[d] != 1) return false;
    expect *= sizes[d];
  }
  return true;
}
static bool dense_in_spec_order(const Tensor& t, const TensorSpec& s) {
  return !dense_in_order(s.sizes, s.strides, s.strides) || dense_in_order(t.sizes(), t.strides(), s.strides);
}

static bool tensor_matches(const Tensor& t, const TensorSpec& s) {
  if (t.dtype() != s.dtype || t.device() != s.device || t.requires_grad() != s.requires_grad)
    return false;
  const size_t n = s.sizes.size();
  if (t.sizes().size() != n) return false;
  for (size_t d = 0; d < n; d++) {
    if (s.dynamic >> d & 1) {
      if (t.sizes()[d] < 2) return false;
    } else if (t.sizes()[d] != s.sizes[d]) {
      return false;
    }
  }
  for (const auto& [d, lo, hi] : s.ranges)
    if (t.sizes()[size_t(d)] < lo || t.sizes()[size_t(d)] > hi) return false;
  if (s.dynamic) return dense_in_spec_order(t, s);
  for (size_t d = 0; d < n; d++)
    if (t.strides()[d] != s.strides[d] && s.sizes[d] > 1) return false;
  return true;
}

// The hot copy of a tensor guard: d[-1] is dtype and device packed by tensor_meta, d[0..n) the
// sizes, d[n..2n) the strides; h.vtype marks dynamic dims (checked from the full spec).
static bool tensor_matches_hot(const Tensor& t, const GuardProgram::HotGuard& h, const int64_t* d,
                               const TensorSpec& spec) {
  if (tensor_meta(t.dtype(), t.device()) != d[-1] || t.requires_grad() != h.flag) return false;
  const int n = h.k;
  if (int(t.sizes().size()) != n) return false;
  const int64_t* sizes = t.sizes().data();
  if (h.vtype) return tensor_matches(t, spec);
  for (int i = 0; i < n; i++)
    if (sizes[i] != d[i]) return false;
  const int64_t* strides = t.strides().data();
  for (int i = 0; i < n; i++)
    if (strides[i] != d[n + i] && d[i] > 1) return false;
  return true;
}

// Whether `next` over the table at t visits exactly the keys of the array K[k], in order.
static bool same_key_order(lua_State* L, int t, int K, int k) {
  const int top = lua_gettop(L);
  lua_rawgeti(L, K, k);
  const int keys = lua_gettop(L);
  const lua_Integer n = lua_Integer(lua_rawlen(L, keys));
  lua_Integer i = 0;
  bool ok = true;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    if (++i > n || lua_rawgeti(L, keys, i) == LUA_TNIL || !lua_rawequal(L, -1, -2)) {
      ok = false;
      break;
    }
    lua_pop(L, 1);
  }
  ok = ok && i == n;
  lua_settop(L, top);
  return ok;
}

int GuardProgram::first_failure(lua_State* L, int base) const {
  if (!compiled) compile_hot();
  for (int i = 0; i < int(hot.size()); i++)
    if (!guard_ok(L, base, i)) return i;
  return -1;
}

bool GuardProgram::guard_ok(lua_State* L, int base, int i) const {
  const int K = base + 1;
  const HotGuard& g = hot[i];
  const int v = g.src >= 0 ? slot(base, g.src) : 0;
  bool ok = true;
  switch (g.kind) {
    case GuardKind::Type:
      ok = lua_type(L, v) == g.vtype && (g.vtype != LUA_TUSERDATA || !lua::to_tensor(L, v)) &&
           (g.ival == 0 || (lua_isinteger(L, v) ? 1 : 2) == g.ival);
      break;
    case GuardKind::Tensor: {
      const Tensor* t = lua::to_tensor(L, v);
      ok = t && tensor_matches_hot(*t, g, dims.data() + g.dims_at, guards[i].tensor);
      break;
    }
    case GuardKind::Equals:
      if (lua_type(L, v) != g.vtype) {
        ok = false;
        break;
      }
      switch (g.vtype) {
        case LUA_TNIL:
          break;
        case LUA_TBOOLEAN:
          ok = bool(lua_toboolean(L, v)) == g.flag;
          break;
        case LUA_TNUMBER:
          ok = lua_isinteger(L, v) == g.flag &&
               (g.flag ? lua_tointeger(L, v) == g.ival : same_float(lua_tonumber(L, v), g.fval));
          break;
        default:
          if (g.ptr) {
            ok = lua_tostring(L, v) == g.ptr;
          } else {
            lua_rawgeti(L, K, g.k);
            ok = lua_rawequal(L, v, -1);
            lua_pop(L, 1);
          }
      }
      break;
    case GuardKind::Identity:
      ok = lua_topointer(L, v) == g.ptr && lua_type(L, v) == g.vtype;
      break;
    case GuardKind::ArgCount:
      ok = nargs_ == g.ival;
      break;
    case GuardKind::SameAs:
      ok = bool(lua_rawequal(L, v, slot(base, g.k))) == g.flag;
      break;
    case GuardKind::KeyOrder:
      ok = lua_type(L, v) == LUA_TTABLE && same_key_order(L, v, K, g.k);
      break;
    case GuardKind::GlobalState:
      ok = lua::grad_enabled() == global.grad && default_dtype() == global.default_dtype &&
           default_device() == global.default_device &&
           float32_matmul_precision() == global.matmul_precision;
      break;
    case GuardKind::Aliasing:
      ok = aliasing_ok(L, base);
      break;
  }
  return ok;
}

// The object a member is now (rawequal: the same pointer and, for a non-table, the same value
// as far as a table's identity goes; nil is null).
static const void* object_at(lua_State* L, int idx) {
  return lua_type(L, idx) == LUA_TTABLE ? lua_topointer(L, idx) : nullptr;
}

// Members of a written class must all be one object (theirs while tracing and no other
// class's); every other member must be that object exactly when it was while tracing.
bool GuardProgram::aliasing_ok(lua_State* L, int base) const {
  alias_written.clear();
  int ncls = 0;
  for (const AliasMember& a : aliases) ncls = std::max(ncls, a.cls + 1);
  alias_object.assign(ncls, nullptr);
  for (const AliasMember& a : aliases) {
    if (!a.written) continue;
    const void* p = object_at(L, slot(base, a.src));
    if (!p) return false;  // a written table is a table (its type guard says so too)
    if (!alias_object[a.cls]) {
      alias_object[a.cls] = p;
      alias_written.push_back({p, a.cls});
    } else if (alias_object[a.cls] != p) {
      return false;  // one written class, two objects
    }
  }
  std::sort(alias_written.begin(), alias_written.end());
  for (size_t j = 1; j < alias_written.size(); j++)
    if (alias_written[j - 1].first == alias_written[j].first) return false;  // two classes, one object
  for (const AliasMember& a : aliases) {
    const void* p = object_at(L, slot(base, a.src));
    auto it = std::lower_bound(alias_written.begin(), alias_written.end(),
                               std::pair<const void*, int>{p, -1});
    const int now = p && it != alias_written.end() && it->first == p ? it->second : -1;
    if (now != (alias_object[a.cls] ? a.cls : -1)) return false;
  }
  return true;
}

// The first pair that broke the aliasing: "m.a: expected the same table as m.b, got another table"
std::string GuardProgram::aliasing_failure(lua_State* L, int base) const {
  for (const AliasMember& w : aliases) {
    if (!w.written) continue;
    for (const AliasMember& t : aliases) {
      if (t.src == w.src) continue;
      const bool same = lua_rawequal(L, slot(base, t.src), slot(base, w.src));
      if (same == (t.cls == w.cls)) continue;
      return describe(t.src) + ": expected " + (t.cls == w.cls ? "the same table as " : "another table than ") +
             describe(w.src) + ", got " + (same ? "the same table" : "another table");
    }
  }
  return "aliasing of tables: changed";
}

std::string tensor_spec_string(const TensorSpec& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (size_t d = 0; d < t.sizes.size(); d++) {
    if (d) s += ", ";
    std::string dim = (t.dynamic >> d & 1) ? std::string(">=2") : std::to_string(t.sizes[d]);
    for (const auto& [rd, lo, hi] : t.ranges)
      if (rd == int64_t(d)) dim = std::to_string(lo) + ".." + (hi == INT64_MAX ? std::string("") : std::to_string(hi));
    s += dim;
  }
  s += "] on " + t.device.str();
  if (t.requires_grad) s += ", requires_grad";
  return s;
}

static std::string actual_string(lua_State* L, int v) {
  if (const Tensor* t = lua::to_tensor(L, v)) {
    TensorSpec s{t->dtype(), t->device(), t->requires_grad(), t->sizes(), t->strides(), 0};
    std::string str = tensor_spec_string(s);
    if (!t->is_contiguous()) str += " (strides " + shape_string(t->strides()) + ")";
    return str;
  }
  switch (lua_type(L, v)) {
    case LUA_TNUMBER:
    case LUA_TSTRING: {
      lua_pushvalue(L, v);
      std::string s = lua_type(L, v) == LUA_TSTRING ? "\"" + std::string(lua_tostring(L, -1)) + "\""
                                                    : lua_tostring(L, -1);
      lua_pop(L, 1);
      return s;
    }
    case LUA_TBOOLEAN:
      return lua_toboolean(L, v) ? "true" : "false";
    case LUA_TNIL:
      return "nil";
    default:
      return display_name(L, v);
  }
}

std::string GuardProgram::failure(lua_State* L, int base) const {
  int i = first_failure(L, base);
  if (i < 0) return "";
  const Guard& g = guards[i];
  if (g.kind == GuardKind::ArgCount)
    return "number of arguments: expected " + std::to_string(g.ival) + ", got " +
           std::to_string(nargs_);
  if (g.kind == GuardKind::Aliasing) return aliasing_failure(L, base);
  if (g.kind == GuardKind::SameAs)
    return describe(g.src) + ": expected " + expected_of(g) + ", got " +
           (lua_rawequal(L, slot(base, g.src), slot(base, g.k)) ? "the same table"
                                                                : "another table");
  if (g.kind == GuardKind::GlobalState)
    return "global state: expected " + g.expected + ", got grad " +
           (lua::grad_enabled() ? "on" : "off") + ", default dtype " + dtype_name(default_dtype()) +
           ", default device " + default_device().str() + ", matmul precision " +
           float32_matmul_precision();
  std::string actual = actual_string(L, slot(base, g.src));
  if (g.kind == GuardKind::Identity && "the same " + actual == g.expected) actual = "another " + actual;
  return describe(g.src) + ": expected " + g.expected + ", got " + actual;
}

void GuardProgram::capture_value(lua_State* L, int idx, Guard& g) {
  g.vtype = lua_type(L, idx);
  switch (g.vtype) {
    case LUA_TBOOLEAN:
      g.bval = lua_toboolean(L, idx);
      break;
    case LUA_TNUMBER:
      g.is_int = lua_isinteger(L, idx);
      g.ival = lua_tointeger(L, idx);
      g.fval = lua_tonumber(L, idx);
      break;
    case LUA_TSTRING: {
      size_t n;
      const char* s = lua_tolstring(L, idx, &n);
      g.ptr = n <= 40 ? s : nullptr;  // short strings are interned: equal iff the same pointer
      break;
    }
    case LUA_TNIL:
      break;
    default:
      g.ptr = lua_topointer(L, idx);
      break;
  }
}

void GuardProgram::simplify() {
  std::vector<bool> strong(sources.size(), false);
  for (const Guard& g : guards)
    if (g.src >= 0 && g.kind != GuardKind::Type) strong[g.src] = true;
  std::erase_if(guards, [&](const Guard& g) { return g.kind == GuardKind::Type && strong[g.src]; });
}

const char* guard_kind_name(GuardKind k) {
  switch (k) {
    case GuardKind::Type:
      return "TYPE_MATCH";
    case GuardKind::Tensor:
      return "TENSOR_MATCH";
    case GuardKind::Equals:
      return "EQUALS_MATCH";
    case GuardKind::Identity:
      return "ID_MATCH";
    case GuardKind::GlobalState:
      return "GLOBAL_STATE";
    case GuardKind::ArgCount:
      return "ARG_COUNT";
    case GuardKind::SameAs:
      return "ALIAS_MATCH";
    case GuardKind::KeyOrder:
      return "KEY_ORDER";
    case GuardKind::Aliasing:
      return "ALIAS_MATCH";
  }
  return "?";
}

std::string GuardProgram::expected_of(const Guard& g) const {
  if (g.kind == GuardKind::SameAs)
    return (g.bval ? "the same table as " : "another table than ") + describe(g.k);
  return g.expected;
}

// One line per written table: what it is the same table as, and how many others it is not.
void GuardProgram::aliasing_texts(std::vector<GuardText>* out) const {
  std::vector<char> seen;
  for (const AliasMember& w : aliases) {
    if (!w.written) continue;
    if (int(seen.size()) <= w.src) seen.resize(w.src + 1);
    if (seen[w.src]) continue;
    seen[w.src] = 1;
    std::string same;
    int others = 0;
    for (const AliasMember& t : aliases) {
      if (t.src == w.src) continue;
      if (t.cls != w.cls) {
        others++;
        continue;
      }
      same += (same.empty() ? "the same table as " : ", ") + describe(t.src);
    }
    std::string expected = same;
    if (others)
      expected += (same.empty() ? "" : "; ") + std::string("another table than the other ") +
                  std::to_string(others) + (others == 1 ? " table read" : " tables read");
    out->push_back({guard_kind_name(GuardKind::Aliasing), describe(w.src), expected});
  }
}

std::vector<GuardText> GuardProgram::texts() const {
  std::vector<GuardText> out;
  for (const Guard& g : guards) {
    if (g.kind == GuardKind::Aliasing) {
      aliasing_texts(&out);
      continue;
    }
    out.push_back({guard_kind_name(g.kind), g.src >= 0 ? describe(g.src) : "", expected_of(g)});
  }
  return out;
}

std::vector<std::string> GuardProgram::lines() const {
  std::vector<std::string> out;
  for (const GuardText& t : texts())
    out.push_back(t.kind + ": " + (t.source.empty() ? "" : t.source + " ") + t.expected);
  return out;
}

// ---- the fast path -----------------------------------------------------------------------------

namespace {

// A table is compared whole only when that is cheaper than reading the fields used (about the
// cost of comparing kBytesPerRead bytes each; class tables of a few dozen methods qualify), and
// never beyond kMaxSnapshotNodeBytes of hash part; otherwise its fields are re-read (tc,
// nn.functional: a few functions out of hundreds).
// _ENV is always re-read: a script writing a global between calls must not send every call
// through the full check.
constexpr size_t kBytesPerRead = 1024;
constexpr size_t kPinnedBytes = 4096;
constexpr size_t kMaxSnapshotNodeBytes = 16384;

}  // namespace

// Roots of the memo: argument values, and upvalues of the dispatched function or of a function
// held by K (their parents are read first).
bool GuardProgram::is_root(int s) const {
  const HotSource& h = hot_sources[s];
  if (h.kind == SrcKind::Arg) return true;
  if (h.kind != SrcKind::Upval) return false;
  const SrcKind pk = hot_sources[h.parent].kind;
  return pk == SrcKind::Fn || pk == SrcKind::Pinned;
}

const Tensor* GuardProgram::tensor_at(lua_State* L, int base, int src) const {
  if (last_fast_ && memo->known[src]) return memo->tensor_of[src];
  return lua::to_tensor(L, slot(base, src));
}

bool GuardProgram::check_fast(lua_State* L, int base, int fn_idx, int args_idx, int nargs) const {
  Memo& m = *memo;
  if (nargs != m.nargs) return false;
  lua_rawgeti(L, LUA_REGISTRYINDEX, k_ref);
  const int top = base + 1 + m.slots;
  lua_settop(L, top);
  // 1. the root tables: the memo's, and alive (the ephemeron still has them)
  lua_rawgeti(L, LUA_REGISTRYINDEX, m.eph_ref);
  const int eph = lua_gettop(L);
  for (auto& [s, table] : m.roots) {
    const int p = hot_sources[s].parent;
    if (p >= 0 && lua_isnil(L, slot(base, p))) {
      push_source(L, base, p, fn_idx, args_idx, nargs);
      lua_replace(L, slot(base, p));
    }
    push_source(L, base, s, fn_idx, args_idx, nargs);
    lua_replace(L, slot(base, s));
    if (lua_topointer(L, slot(base, s)) != table) return false;
    lua_pushvalue(L, slot(base, s));
    if (lua_rawget(L, eph) != LUA_TTABLE) return false;
    lua_pop(L, 1);
  }
  // 2. the tables read from, unchanged (fetched ahead: they are scattered over the heap)
  const int ns = int(m.snaps.size());
  constexpr int kAhead = 8;
  for (int j = 0; j < std::min(ns, kAhead); j++) prefetch_table(m.snaps[j].table, m.snaps[j].shape);
  for (int j = 0; j < ns; j++) {
    if (j + kAhead < ns) prefetch_table(m.snaps[j + kAhead].table, m.snaps[j + kAhead].shape);
    const Memo::Snap& sn = m.snaps[j];
    if (!table_unchanged(sn.table, sn.shape, m.bytes.data() + sn.at)) return false;
  }
  // 3. the slots the guards and the caller read
  lua_rawgeti(L, LUA_REGISTRYINDEX, m.vals_ref);
  if (lua_rawgeti(L, -1, 1) != LUA_TTABLE) return false;
  for (int s : m.push_known) {
    lua_rawgeti(L, -1, s + 1);
    lua_replace(L, slot(base, s));
  }
  // vals stays on the stack above the slots: it keeps the known tensors alive while the caller
  // uses them (a memo rebuilt during the call drops its reference to this one)
  lua_replace(L, top + 1);
  lua_settop(L, top + 1);
  for (int s : m.push_live) {
    push_source(L, base, s, fn_idx, args_idx, nargs);
    lua_replace(L, slot(base, s));
  }
  // 4. the guards on what was read, and the tensors' metadata
  nargs_ = nargs;
  for (int i : m.live_guards)
    if (!guard_ok(L, base, i)) return false;
  const uint64_t epoch = metadata_epoch();
  if (epoch != m.epoch) {
    for (auto& [i, t] : m.known_tensors)
      if (!tensor_matches_hot(*t, hot[i], dims.data() + hot[i].dims_at, guards[i].tensor))
        return false;
    m.epoch = epoch;
  }
  last_fast_ = true;
  m.fast_hits++;
  return true;
}

void GuardProgram::after_full_pass(lua_State* L, int base, int nargs) const {
  if (!snapshots_work(L)) return;
  if (!memo) memo = std::make_shared<Memo>();
  Memo& m = *memo;
  std::vector<const void*> roots;
  for (int s = 0; s < int(hot_sources.size()); s++)
    if (is_root(s) && lua_type(L, slot(base, s)) == LUA_TTABLE)
      roots.push_back(lua_topointer(L, slot(base, s)));
  const bool stable = roots == m.last_roots;
  m.last_roots = std::move(roots);
  if (!stable) return;
  if (m.builds >= 4 && m.fast_hits < 8 * int64_t(m.builds)) {
    m.ready = false;  // it keeps missing (a table it reads changes on every call): full checks only
    return;
  }
  build_memo(L, base, nargs);
}

void GuardProgram::build_memo(lua_State* L, int base, int nargs) const {
  Memo& m = *memo;
  const int n = int(hot_sources.size());
  m.ready = false;
  m.builds++;
  m.nargs = nargs;
  m.roots.clear();
  m.snaps.clear();
  m.bytes.clear();
  m.known.assign(n, 0);
  m.tensor_of.assign(n, nullptr);
  std::vector<int> snap_of(n, -2);  // -2 undecided, -1 not snapshotted, else index in snaps
  std::vector<size_t> reads(n, 0);  // sources read from each source (a key order: all)
  for (int s = 0; s < n; s++)
    if (hot_sources[s].parent >= 0) reads[hot_sources[s].parent]++;
  for (const Guard& g : guards)
    if (g.kind == GuardKind::KeyOrder) reads[g.src] += 1 << 20;
  auto snapshotted = [&](int p) {
    if (snap_of[p] == -2) {
      snap_of[p] = -1;
      if (lua_type(L, slot(base, p)) == LUA_TTABLE) {
        const void* t = lua_topointer(L, slot(base, p));
        TableShape sh = table_shape(t);
        const bool env = hot_sources[p].kind == SrcKind::Upval && sources[p].name == "_ENV";
        const size_t bytes = size_t(sh.node_bytes) + sh.array_bytes;
        // pinned tables (classes, metatables) are compared whole up to kPinnedBytes: they
        // rarely change, and reading through them live would keep their sources' slots in use
        const size_t budget = hot_sources[p].kind == SrcKind::Pinned
                                  ? std::max(kPinnedBytes, kBytesPerRead * reads[p])
                                  : kBytesPerRead * reads[p];
        if (sh.node_bytes <= kMaxSnapshotNodeBytes && bytes <= budget && !env) {
          snap_of[p] = int(m.snaps.size());
          m.snaps.push_back({t, sh, m.bytes.size()});
          append_table_bytes(sh, m.bytes);
        }
      }
    }
    return snap_of[p] >= 0;
  };
  for (int s = 0; s < n; s++) {
    const HotSource& h = hot_sources[s];
    const int v = slot(base, s);
    switch (h.kind) {
      case SrcKind::Arg:
      case SrcKind::Upval:
        // tables passed in or captured are the roots; other such values are read on every call
        if (is_root(s) && lua_type(L, v) == LUA_TTABLE) {
          m.known[s] = 1;
          m.roots.push_back({s, lua_topointer(L, v)});
        }
        break;
      case SrcKind::Pinned:
        m.known[s] = 1;  // held by K
        break;
      case SrcKind::Field:
      case SrcKind::Index:
        // a raw read from an unchanged table, or from a value that is not a table (always nil)
        m.known[s] = m.known[h.parent] &&
                     (lua_type(L, slot(base, h.parent)) != LUA_TTABLE || snapshotted(h.parent));
        break;
      case SrcKind::Metatable:  // part of the table's header
        m.known[s] = m.known[h.parent] && snapshotted(h.parent);
        break;
      case SrcKind::Keyed:  // the key's value is known too
        m.known[s] = m.known[h.parent] && m.known[h.n] &&
                     (lua_type(L, slot(base, h.parent)) != LUA_TTABLE || snapshotted(h.parent));
        break;
      case SrcKind::Fn:
      case SrcKind::Grad:  // backward and zero_grad change it without touching any table
        break;
    }
    if (m.known[s]) m.tensor_of[s] = lua::to_tensor(L, v);
  }
  // What the fast path must fill: sources of guards it evaluates, the caller's `needed`, and
  // the parents of every source it reads.
  std::vector<char> need(n, 0);
  m.live_guards.clear();
  m.known_tensors.clear();
  for (int i = 0; i < int(hot.size()); i++) {
    const HotGuard& g = hot[i];
    // a key order depends on the table's contents: known only from its own snapshot
    if (g.kind == GuardKind::KeyOrder && !(m.known[g.src] && snapshotted(g.src))) {
      m.live_guards.push_back(i);
      need[g.src] = 1;
      continue;
    }
    if (g.src >= 0 && m.known[g.src] && g.kind != GuardKind::SameAs) {
      if (g.kind == GuardKind::Tensor) m.known_tensors.push_back({i, m.tensor_of[g.src]});
      continue;
    }
    if (g.kind == GuardKind::SameAs && m.known[g.src] && m.known[g.k]) continue;
    if (g.kind == GuardKind::Aliasing) {  // on known sources only: decided by the snapshots
      if (std::all_of(aliases.begin(), aliases.end(), [&](const AliasMember& a) { return m.known[a.src]; }))
        continue;
      m.live_guards.push_back(i);
      for (const AliasMember& a : aliases) need[a.src] = 1;
      continue;
    }
    m.live_guards.push_back(i);
    if (g.src >= 0) need[g.src] = 1;
    if (g.kind == GuardKind::SameAs) need[g.k] = 1;
  }
  for (int s : needed) need[s] = 1;
  for (int s = n - 1; s >= 0; s--) {  // roots are pushed with their parents before anything
    const HotSource& h = hot_sources[s];
    if (!need[s] || m.known[s] || h.parent < 0) continue;
    need[h.parent] = 1;
    if (h.kind == SrcKind::Keyed) need[h.n] = 1;
  }
  m.push_known.clear();
  m.push_live.clear();
  lua_createtable(L, 0, 0);  // vals: keeps every known value alive while the roots are
  const int vals = lua_gettop(L);
  for (int s = 0; s < n; s++) {
    const HotSource& h = hot_sources[s];
    const bool root = m.known[s] && is_root(s);
    const bool stored = m.known[s] && !root && h.kind != SrcKind::Pinned;
    if (stored) {
      lua_pushvalue(L, slot(base, s));
      lua_rawseti(L, vals, s + 1);
    }
    if (!need[s] || root) continue;
    (stored ? m.push_known : m.push_live).push_back(s);
  }
  m.epoch = metadata_epoch();  // the full check just passed on these tensors
  m.slots = 0;
  for (int s = 0; s < n; s++)
    if (need[s]) m.slots = s + 1;
  for (auto& [s, table] : m.roots) m.slots = std::max(m.slots, s + 1);
  push_weak_table(L, "k");  // eph: root table -> vals
  const int eph = lua_gettop(L);
  for (auto& [s, table] : m.roots) {
    lua_pushvalue(L, slot(base, s));
    lua_pushvalue(L, vals);
    lua_rawset(L, eph);
  }
  if (m.roots.empty()) {  // without argument tables, K (alive with the program) anchors vals
    lua_rawgeti(L, LUA_REGISTRYINDEX, k_ref);
    lua_pushvalue(L, vals);
    lua_rawset(L, eph);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, m.eph_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, m.vals_ref);
  m.eph_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  // vals itself must not be a strong registry entry (it would keep the model alive): the fast
  // path reaches it through a weak-valued holder, alive exactly while eph holds it.
  push_weak_table(L, "v");
  lua_pushvalue(L, vals);
  lua_rawseti(L, -2, 1);
  m.vals_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, vals - 1);
  m.ready = true;
}

void push_grad(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TUSERDATA && lua::to_tensor(L, idx))
    lua_getfield(L, idx, "grad");  // the tensor's __index: the same object as x.grad in Lua
  else
    lua_pushnil(L);
}

void push_weak_table(lua_State* L, const char* mode) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
}

}  // namespace tc::capture
