// Tracer support: real objects and K, reading values through sources (with their guards), tensor
// inputs, upvalues, frames and the delivery of results.
#include <array>
#include <cstring>

#include "capture_state.h"
#include "dump.h"
#include "lua_binding.h"
#include "tracer.h"

namespace tc::capture {

Known& known() {
  static Known k;
  return k;
}

int Tracer::add_obj(int idx) {
  idx = lua_absindex(L, idx);
  const void* p = lua_topointer(L, idx);
  if (p) {
    auto it = obj_of_.find(p);
    if (it != obj_of_.end()) return it->second;
    obj_of_[p] = nobjs_ + 1;
  }
  lua_pushvalue(L, idx);
  lua_rawseti(L, objs_, ++nobjs_);
  return nobjs_;
}

// Every value the tracer pushes goes through push_obj or push_var: the stack grows here (a
// builtin may take hundreds of arguments, `..` hundreds of parts), never past Lua's limit.
void Tracer::reserve_slot() {
  if (!lua_checkstack(L, 4))
    throw BreakSignal{BreakCode::UnsupportedBytecode, "more values than the Lua stack holds"};
}

int Tracer::push_obj(int obj) {
  reserve_slot();
  lua_rawgeti(L, objs_, obj);
  return lua_gettop(L);
}

int Tracer::add_k(int idx) {
  idx = lua_absindex(L, idx);
  lua_pushvalue(L, idx);
  lua_rawseti(L, K_, ++nk_);
  return nk_;
}

std::string display_name(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TTABLE: {
      std::string what = "table";
      lua_pushstring(L, "__name");
      if (lua_rawget(L, idx) == LUA_TSTRING) what = std::string("class ") + lua_tostring(L, -1);
      lua_pop(L, 1);
      return what;
    }
    case LUA_TFUNCTION: {
      if (lua::trampoline_target(L, idx)) {
        std::string s = display_name(L, -1);
        lua_pop(L, 1);
        return s;
      }
      if (lua_iscfunction(L, idx)) {
        if (auto op = lua::op_of(L, idx)) return std::string("tc op ") + op_name(*op);
        auto b = known().builtins.find(lua_tocfunction(L, idx));
        return b != known().builtins.end() ? "builtin " + b->second : "C function";
      }
      lua_Debug ar;
      lua_pushvalue(L, idx);
      lua_getinfo(L, ">S", &ar);
      return "function <" + std::string(ar.short_src) + ":" + std::to_string(ar.linedefined) + ">";
    }
    default:
      return luaL_typename(L, idx);
  }
}

static std::string value_string(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return "nil";
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNUMBER: {
      lua_pushvalue(L, idx);
      std::string s = lua_tostring(L, -1);
      lua_pop(L, 1);
      return s;
    }
    case LUA_TSTRING:
      return "\"" + std::string(lua_tostring(L, idx)) + "\"";
    default:
      return display_name(L, idx);
  }
}

void Tracer::guard_type(int src, int type) {
  if (!e_.guards.first_guard(src, GuardKind::Type)) return;
  Guard g{GuardKind::Type, src};
  g.type = type;
  g.expected = std::string("a ") + lua_typename(L, type);
  e_.guards.guards.push_back(g);
}

void Tracer::guard_equals(int src, int idx) {
  if (!e_.guards.first_guard(src, GuardKind::Equals)) return;
  Guard g{GuardKind::Equals, src};
  g.k = add_k(idx);
  GuardProgram::capture_value(L, idx, g);
  g.expected = value_string(L, idx);
  e_.guards.guards.push_back(g);
}

void Tracer::guard_identity(int src, int idx) {
  if (e_.guards.sources[src].kind == SrcKind::Pinned) return;  // a pinned object is itself
  if (!e_.guards.first_guard(src, GuardKind::Identity)) return;
  Guard g{GuardKind::Identity, src};
  g.k = add_k(idx);
  GuardProgram::capture_value(L, idx, g);
  g.expected = "the same " + value_string(L, idx);
  e_.guards.guards.push_back(g);
}

// A name for a pinned object (sources read through it are described from it).
static std::string object_name(lua_State* L, int idx) {
  const std::string d = display_name(L, idx);
  return d.rfind("function <", 0) == 0 ? d : "<" + d + ">";
}

int Tracer::pin(int idx, const std::string& what) {
  idx = lua_absindex(L, idx);
  // One pinned source per object: the same class reached from 64 instances is read once.
  auto [it, fresh] = e_.guards.pinned.try_emplace(lua_topointer(L, idx), -1);
  if (!fresh) return it->second;
  const int k = add_k(idx);
  e_.guards.sources.push_back({SrcKind::Pinned, -1, k, what.empty() ? object_name(L, idx) : what});
  it->second = int(e_.guards.sources.size()) - 1;
  return it->second;
}

int Tracer::push_var(const Var& v) {
  reserve_slot();
  switch (v.k) {
    case Var::K::Nil:
      lua_pushnil(L);
      break;
    case Var::K::Bool:
      lua_pushboolean(L, v.b);
      break;
    case Var::K::Int:
      lua_pushinteger(L, v.i);
      break;
    case Var::K::Float:
      lua_pushnumber(L, v.f);
      break;
    case Var::K::Str:
      lua_pushlstring(L, v.s.data(), v.s.size());
      break;
    case Var::K::Object:
      push_obj(v.obj);
      break;
    default:
      TC_ASSERT(false, "push_var of a symbolic value");
  }
  return lua_gettop(L);
}

Var Tracer::from_lua_unguarded(int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return Var::nil();
    case LUA_TBOOLEAN:
      return Var::boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
      return lua_isinteger(L, idx) ? Var::integer(lua_tointeger(L, idx))
                                   : Var::number(lua_tonumber(L, idx));
    case LUA_TSTRING: {
      size_t n;
      const char* s = lua_tolstring(L, idx, &n);
      return Var::string(std::string(s, n));
    }
    default: {
      Var v;
      v.k = Var::K::Object;
      v.obj = add_obj(idx);
      v.src = pin(idx, "");
      return v;
    }
  }
}

Var Tracer::from_lua(int idx, int src) {
  idx = lua_absindex(L, idx);
  if (const Var* known = known_source(src)) return *known;
  Var v;
  const int t = lua_type(L, idx);
  switch (t) {
    case LUA_TNUMBER:
      if (dynamic_number(src) || marked_number(src)) {
        guard_type(src, LUA_TNUMBER);
        Guard& g = e_.guards.guards.back();
        g.ival = lua_isinteger(L, idx) ? 1 : 2;
        g.expected = g.ival == 1 ? "an integer" : "a float";
        v.k = Var::K::Object;
        v.obj = add_obj(idx);
        v.src = src;
        v.unspec = true;
        break;
      }
      [[fallthrough]];
    case LUA_TNIL:
    case LUA_TBOOLEAN:
    case LUA_TSTRING:
      guard_equals(src, idx);
      v = from_lua_unguarded(idx);
      break;
    case LUA_TUSERDATA:
      if (lua::to_tensor(L, idx)) {
        v = tensor_input(src, idx);
        break;
      }
      [[fallthrough]];
    default:
      guard_type(src, t);
      v.k = Var::K::Object;
      v.obj = add_obj(idx);
      v.src = src;
      if (t == LUA_TTABLE) table_sources_.push_back({src, v.obj});
      break;
  }
  if (int(by_source_.size()) <= src) by_source_.resize(std::max<size_t>(src + 1, 2 * by_source_.size()));
  by_source_[src] = v;
  return v;
}

// where: the source's description (g.describe(src))
static std::string input_name(const GuardProgram& g, int src, const std::string& where,
                              const vm::Proto* root) {
  const Source& s = g.sources[src];
  if (s.kind == SrcKind::Arg && s.n <= root->numparams) {
    std::string n = vm::local_name(*root, int(s.n) - 1, 0);
    if (!n.empty()) return n;
  }
  std::string out;
  out.reserve(where.size());
  for (char c : where) {
    if (isalnum((unsigned char)c) || c == '_')
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "input" : out;
}

// Whether the tensor at idx is a parameter or buffer of a tc.nn module (tc.nn's weak table
// _registered_tensors): dynamic = true leaves those static, as torch does (their shapes do not
// change between calls, and dynamic weights would keep the graph from lowering).
static bool module_tensor(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  bool found = false;
  if (lua_getfield(L, -1, "tc.nn") == LUA_TTABLE) {
    lua_pushliteral(L, "_registered_tensors");
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      lua_pushvalue(L, idx);
      found = lua_rawget(L, -2) != LUA_TNIL;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return found;
}

Var Tracer::tensor_input(int src, int idx) {
  const Tensor& t = *lua::to_tensor(L, idx);
  Tensor fake = Tensor::fake(t.sizes(), t.strides(), t.dtype(), t.device());
  fake.set_requires_grad(t.requires_grad());
  Guard g{GuardKind::Tensor, src};
  g.tensor = TensorSpec{t.dtype(), t.device(), t.requires_grad(), t.sizes(), t.strides(), 0};
  const std::string where = e_.guards.describe(src);
  const bool all_dynamic = opt_.dynamic_all && !module_tensor(L, idx);
  for (int d = 0; all_dynamic && d < t.dim(); d++)
    if (t.sizes()[d] >= 2) g.tensor.dynamic |= uint64_t(1) << d;
  for (auto& [s, d] : opt_.dynamic)
    if (s == where && d >= 0 && d < t.dim() && t.sizes()[d] >= 2)
      g.tensor.dynamic |= uint64_t(1) << d;
  // tc.compiler.mark_dynamic / mark_static(x, dim): registry table tensor userdata -> {dim = true}
  // (1-based); static wins over every dynamic source
  // (a marked dim's value is true or its range {min, max}, kept in `ranges`)
  std::vector<std::array<int64_t, 3>> ranges;
  auto marks = [&](const char* registry) {
    uint64_t m = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, registry);
    if (lua_istable(L, -1)) {
      lua_pushvalue(L, idx);
      if (lua_rawget(L, -2) == LUA_TTABLE)
        for (int d = 0; d < t.dim(); d++) {
          if (lua_rawgeti(L, -1, d + 1) == LUA_TTABLE) {
            lua_rawgeti(L, -1, 1);
            lua_rawgeti(L, -2, 2);
            ranges.push_back({d, lua_tointeger(L, -2), lua_tointeger(L, -1)});
            lua_pop(L, 2);
          }
          if (lua_toboolean(L, -1)) m |= uint64_t(1) << d;
          lua_pop(L, 1);
        }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return m;
  };
  uint64_t marked = marks("tc.capture.marked");
  for (int d = 0; d < t.dim(); d++)
    if (t.sizes()[d] < 2) marked &= ~(uint64_t(1) << d);
  const uint64_t fixed = marks("tc.capture.static");
  marked &= ~fixed;
  g.tensor.dynamic = (g.tensor.dynamic | marked) & ~fixed;
  for (const auto& r : ranges)
    if (marked >> r[0] & 1) g.tensor.ranges.push_back(r);
  g.expected = tensor_spec_string(g.tensor);
  e_.guards.guards.push_back(g);
  e_.guards.first_guard(src, GuardKind::Tensor);
  Var v;
  v.k = Var::K::Tensor;
  v.ref = e_.graph.add_input(input_name(e_.guards, src, where, root_), where, fake);
  v.input = int(e_.graph.inputs.size()) - 1;
  v.src = src;
  for (int d = 0; d < t.dim(); d++) {
    if (g.tensor.dynamic >> d & 1) e_.graph.dynamic_dims.push_back({v.input, d});
    if (marked >> d & 1) marked_dims_.push_back({v.input, d}), marked_names_.push_back(where);
  }
  e_.input_sources.push_back(src);
  proxies_[fake.impl()] = v.ref;
  return v;
}

// Pushes the current value of a source (guards do the same reads at run time). A source read
// before is its object (real values do not change while tracing: writes are recorded), so a deep
// source (arg[1].layers[3].linear1.weight) costs one read, not one per level.
void Tracer::push_source(int src) {
  if (const Var* known = known_source(src); known && known->k == Var::K::Object) {
    push_obj(known->obj);
    return;
  }
  const Source& s = e_.guards.sources[src];
  reserve_slot();
  switch (s.kind) {
    case SrcKind::Arg:
      if (s.n <= nargs_)
        lua_pushvalue(L, args_idx_ + int(s.n) - 1);
      else
        lua_pushnil(L);
      return;
    case SrcKind::Fn:
      lua_pushvalue(L, fn_idx_);
      return;
    case SrcKind::Pinned:
      lua_rawgeti(L, K_, s.n);
      return;
    default:
      break;
  }
  push_source(s.parent);
  const int p = lua_gettop(L);
  switch (s.kind) {
    case SrcKind::Upval:
      if (lua_type(L, p) != LUA_TFUNCTION || !lua_getupvalue(L, p, int(s.n))) lua_pushnil(L);
      break;
    case SrcKind::Field:
      if (lua_type(L, p) == LUA_TTABLE) {
        lua_rawgeti(L, K_, s.n);
        lua_rawget(L, p);
      } else {
        lua_pushnil(L);
      }
      break;
    case SrcKind::Index:
      if (lua_type(L, p) == LUA_TTABLE)
        lua_rawgeti(L, p, s.n);
      else
        lua_pushnil(L);
      break;
    case SrcKind::Metatable:
      if (!lua_getmetatable(L, p)) lua_pushnil(L);
      break;
    case SrcKind::Keyed:
      push_source(int(s.n));
      if (lua_type(L, p) == LUA_TTABLE)
        lua_rawget(L, p);
      else
        lua_pop(L, 1), lua_pushnil(L);
      break;
    case SrcKind::Grad:
      push_grad(L, p);
      break;
    default:
      break;
  }
  lua_remove(L, p);
}

Var Tracer::read_source(int src) {
  if (const Var* known = known_source(src)) return *known;
  push_source(src);
  Var v = from_lua(-1, src);
  lua_pop(L, 1);
  return v;
}

bool Tracer::dynamic_number(int src) const {
  if (opt_.dynamic.empty()) return false;
  const std::string where = e_.guards.describe(src);
  for (auto& [s, d] : opt_.dynamic)
    if (d < 0 && s == where) return true;
  return false;
}

// tc.compiler.mark_dynamic(tbl, key): registry table tbl -> {key = true}; the number read at
// tbl[key] is unspecialized from the first trace on (an optimizer's lr, which a scheduler changes).
bool Tracer::marked_number(int src) {
  const Source s = e_.guards.sources[src];
  if (s.kind != SrcKind::Field) return false;
  luaL_checkstack(L, 4, "tracing a marked number");
  bool marked = false;
  if (lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.marked") == LUA_TTABLE) {
    push_source(s.parent);
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      lua_pushlstring(L, s.name.data(), s.name.size());
      marked = lua_rawget(L, -2) == LUA_TBOOLEAN;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return marked;
}

Var Tracer::spec(const Var& v) {
  if (!v.unspec) return v;
  push_obj(v.obj);
  guard_equals(v.src, -1);
  Var c = from_lua_unguarded(-1);
  lua_pop(L, 1);
  return c;
}

Var Tracer::number_input(const Var& v) {
  auto it = number_inputs_.find(v.src);
  if (it != number_inputs_.end()) return it->second;
  push_obj(v.obj);
  const bool is_int = lua_isinteger(L, -1);
  lua_pop(L, 1);
  Tensor fake = Tensor::fake({}, {}, is_int ? DType::Int64 : DType::Float64, Device{});
  fake.impl()->wrapped_number = true;
  Var x;
  x.k = Var::K::Tensor;
  const std::string where = e_.guards.describe(v.src);
  x.ref = e_.graph.add_input(input_name(e_.guards, v.src, where, root_), where, fake);
  x.input = int(e_.graph.inputs.size()) - 1;
  x.src = v.src;
  e_.input_sources.push_back(v.src);
  proxies_[e_.graph.fake(x.ref).impl()] = x.ref;
  number_inputs_[v.src] = x;
  return x;
}

Var Tracer::upval(Frame& f, int n) {
  // a real upvalue written in this trace: by this frame or by another one sharing it (an inlined
  // callee's write is what the caller reads after the call returns)
  if (f.fn.k != Var::K::Closure && !upval_overlay_.empty())
    if (auto w = upval_overlay_.find(upvalue_id(f, n)); w != upval_overlay_.end()) return w->second;
  if (n < int(f.up.size()) && f.up[n]) return *f.up[n];
  if (int(f.up.size()) <= n) f.up.resize(std::max<size_t>(n + 1, f.p->upvalues.size()));
  Var v;
  if (f.fn.k == Var::K::Closure) {
    const int c = closures_[f.fn.id].cells[n];
    return cells_[c >= 0 ? c : -c - 1];  // cells are never cached: other closures may write them
  } else {
    std::string name =
        n < int(f.p->upvalue_names.size()) && f.p->upvalue_names[n] ? *f.p->upvalue_names[n] : "";
    int src = e_.guards.source(SrcKind::Upval, f.fn.src, n + 1, name);
    v = read_source(src);
  }
  f.up[n] = v;
  return v;
}

void Tracer::set_upval(Frame& f, int n, Var v) {
  if (f.fn.k == Var::K::Closure) {
    const int c = closures_[f.fn.id].cells[n];
    if (c < 0)
      throw BreakSignal{BreakCode::UnsupportedBytecode,
                        "assignment to an outer upvalue from a function made in compiled code"};
    cells_[c] = v;
    return;
  }
  if (int(f.up.size()) <= n) f.up.resize(n + 1);
  f.up[n] = v;
  if (const void* id = upvalue_id(f, n)) upval_overlay_[id] = v;
  effects_.push_back({Effect::Kind::SetUpval, f.fn, Var(), v, n + 1});
}

const void* Tracer::upvalue_id(const Frame& f, int n) {
  if (f.fn.k != Var::K::Object) return nullptr;
  push_obj(f.fn.obj);
  const void* id = lua_type(L, -1) == LUA_TFUNCTION ? lua_upvalueid(L, -1, n + 1) : nullptr;
  lua_pop(L, 1);
  return id;
}

void Tracer::push_frame(const Var& fn, const vm::Proto* p, std::vector<Var> args, int ret_a,
                        int ret_n) {
  Frame f;
  f.p = p;
  f.fn = fn;
  f.ret_a = ret_a;
  f.ret_n = ret_n;
  f.R.resize(p->maxstacksize);
  for (int i = 0; i < p->numparams; i++) f.R[i] = i < int(args.size()) ? args[i] : Var::nil();
  if (p->is_vararg)
    for (size_t i = p->numparams; i < args.size(); i++) f.va.push_back(args[i]);
  struct Info {
    std::vector<int> lines;
    std::string chunk;  // short_src
    bool tc;            // tc's own Lua code
  };
  static std::unordered_map<const vm::Proto*, Info> infos;  // protos live for the process
  auto it = infos.find(p);
  if (it == infos.end()) {
    const std::string src = p->source.value_or("=?");
    it = infos.emplace(p, Info{vm::decode_lines(*p), chunk_id(src), src.rfind("@[tc]", 0) == 0}).first;
  }
  f.lines = &it->second.lines;
  f.chunk = &it->second.chunk;
  f.tc_code = it->second.tc;
  frames_.push_back(std::move(f));
}

void Tracer::deliver(std::vector<Var> results) {
  if (frames_.size() == 1) {
    finish_return(std::move(results));
    frames_.clear();
    return;
  }
  Frame done = std::move(frames_.back());
  frames_.pop_back();
  if (done.discard) return;
  if (done.pcall) results.insert(results.begin(), Var::boolean(true));
  assign(done.ret_a, done.ret_n, results);
}

void Tracer::assign(int ret_a, int ret_n, const std::vector<Var>& results) {
  Frame& c = frames_.back();
  const int n = ret_n < 0 ? int(results.size()) : ret_n;
  for (int j = 0; j < n; j++) reg(c, ret_a + j) = j < int(results.size()) ? results[j] : Var::nil();
  if (ret_n < 0) c.top = ret_a + n;
}

// ---- protos ----------------------------------------------------------------------------------
namespace {
struct ProtoItem {
  std::string key;  // the content key (hash of the dump, its length)
  std::unique_ptr<vm::Proto> proto;
};
struct ProtoStore {
  std::unordered_map<std::string, std::unique_ptr<ProtoItem>> by_key;  // items live for the process
};
ProtoStore& protos() {
  static ProtoStore s;
  return s;
}
constexpr const char* kProtoMemo = "tc.capture.protos";  // closure -> its ProtoItem (weak keys)
}  // namespace

static std::string dump_bytes(lua_State* L, int idx) {
  lua_pushvalue(L, idx);
  std::string out = vm::dump_function(L);
  lua_pop(L, 1);
  return out;
}

static std::string content_key(const std::string& bytes) {
  // FNV-1a 64 over the dump, plus its length: the prototype's content key.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016llx-%zu", (unsigned long long)h, bytes.size());
  return buf;
}

std::string dump_key(lua_State* L, int idx) { return content_key(dump_bytes(L, lua_absindex(L, idx))); }

// A closure's prototype never changes, so the closure itself is the memo's key: a table with weak
// keys (an entry goes with its closure, so a reused address is never seen) maps it to the item.
// Dumping and hashing the function happens once per closure, not once per trace.
const vm::Proto* Tracer::proto_of(lua_State* L, int idx, std::string* key) {
  idx = lua_absindex(L, idx);
  if (lua_getfield(L, LUA_REGISTRYINDEX, kProtoMemo) != LUA_TTABLE) {
    lua_pop(L, 1);
    push_weak_table(L, "k");
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, kProtoMemo);
  }
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TLIGHTUSERDATA) {
    const auto* item = static_cast<const ProtoItem*>(lua_touserdata(L, -1));
    lua_pop(L, 2);
    if (key) *key = item->key;
    return item->proto.get();
  }
  lua_pop(L, 1);
  const std::string bytes = dump_bytes(L, idx);
  std::string k = content_key(bytes);
  auto& store = protos().by_key;
  auto it = store.find(k);
  if (it == store.end()) {
    auto item = std::make_unique<ProtoItem>();
    item->key = k;
    item->proto = std::make_unique<vm::Proto>(vm::read_chunk(bytes));
    it = store.emplace(k, std::move(item)).first;
  }
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, it->second.get());
  lua_rawset(L, -3);
  lua_pop(L, 1);
  if (key) *key = std::move(k);
  return it->second->proto.get();
}

}  // namespace tc::capture
