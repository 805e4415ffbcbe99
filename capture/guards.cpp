// Sources and guards: building (dedup), printing and the allocation-free evaluation loop.
#include "guards.h"

#include <cstring>

#include "lua_binding.h"
#include "tc/config.h"

namespace tc::capture {

int GuardProgram::source(SrcKind kind, int parent, int64_t n, const std::string& name) {
  auto key = std::make_tuple(int(kind), parent, n, kind == SrcKind::Field ? name : std::string());
  auto it = dedup.find(key);
  if (it != dedup.end()) return it->second;
  sources.push_back({kind, parent, n, name});
  int id = int(sources.size()) - 1;
  dedup[key] = id;
  return id;
}

static bool is_identifier(const std::string& s) {
  if (s.empty() || isdigit((unsigned char)s[0])) return false;
  for (char c : s)
    if (!isalnum((unsigned char)c) && c != '_') return false;
  return true;
}

std::string GuardProgram::describe(int src) const {
  const Source& s = sources[src];
  switch (s.kind) {
    case SrcKind::Arg:
      return "arg[" + std::to_string(s.n) + "]";
    case SrcKind::Fn:
      return "fn";
    case SrcKind::Upval: {
      std::string up = s.name.empty() ? "upvalue " + std::to_string(s.n) : s.name;
      return sources[s.parent].kind == SrcKind::Fn ? up
                                                   : describe(s.parent) + ".<upvalue " + up + ">";
    }
    case SrcKind::Field:
      if (sources[s.parent].kind == SrcKind::Upval && sources[s.parent].name == "_ENV")
        return s.name;  // a global
      return describe(s.parent) + (is_identifier(s.name) ? "." + s.name : "[\"" + s.name + "\"]");
    case SrcKind::Index:
      return describe(s.parent) + "[" + std::to_string(s.n) + "]";
    case SrcKind::Metatable:
      return "getmetatable(" + describe(s.parent) + ")";
    case SrcKind::Pinned:
      return s.name;
  }
  return "?";
}

void GuardProgram::compile_hot() const {
  hot_sources.clear();
  for (const Source& s : sources) hot_sources.push_back({s.kind, s.parent, s.n});
  hot.clear();
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
        break;
      case GuardKind::ArgCount:
        h.ival = g.ival;
        break;
      case GuardKind::SameAs:
        h.flag = g.bval;
        break;
      case GuardKind::Tensor:
        h.flag = g.tensor.requires_grad;
        h.k = int(g.tensor.sizes.size());
        h.dims_at = int64_t(dims.size());
        dims.insert(dims.end(), g.tensor.sizes.begin(), g.tensor.sizes.end());
        dims.insert(dims.end(), g.tensor.strides.begin(), g.tensor.strides.end());
        break;
      case GuardKind::GlobalState:
        break;
    }
    hot.push_back(h);
  }
  compiled = true;
}

bool GuardProgram::check(lua_State* L, int fn_idx, int args_idx, int nargs) const {
  if (!compiled) compile_hot();
  lua_checkstack(L, int(hot_sources.size()) + 8);
  const int base = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, k_ref);
  const int K = base + 1;
  for (const HotSource& s : hot_sources) {
    switch (s.kind) {
      case SrcKind::Arg:
        if (s.n <= nargs)
          lua_pushvalue(L, args_idx + int(s.n) - 1);
        else
          lua_pushnil(L);
        break;
      case SrcKind::Fn:
        lua_pushvalue(L, fn_idx);
        break;
      case SrcKind::Upval:
        if (lua_type(L, slot(base, s.parent)) != LUA_TFUNCTION ||
            !lua_getupvalue(L, slot(base, s.parent), int(s.n)))
          lua_pushnil(L);
        break;
      case SrcKind::Field:
        if (lua_type(L, slot(base, s.parent)) == LUA_TTABLE) {
          lua_rawgeti(L, K, s.n);
          lua_rawget(L, slot(base, s.parent));
        } else {
          lua_pushnil(L);
        }
        break;
      case SrcKind::Index:
        if (lua_type(L, slot(base, s.parent)) == LUA_TTABLE)
          lua_rawgeti(L, slot(base, s.parent), s.n);
        else
          lua_pushnil(L);
        break;
      case SrcKind::Metatable:
        if (!lua_getmetatable(L, slot(base, s.parent))) lua_pushnil(L);
        break;
      case SrcKind::Pinned:
        lua_rawgeti(L, K, s.n);
        break;
    }
  }
  nargs_ = nargs;
  return first_failure(L, base) < 0;
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
  if (s.dynamic) return true;
  for (size_t d = 0; d < n; d++)
    if (t.strides()[d] != s.strides[d] && s.sizes[d] > 1) return false;
  return true;
}

static bool tensor_matches_hot(const Tensor& t, const GuardProgram::HotGuard& h, const int64_t* d,
                               const TensorSpec& spec) {
  if (t.dtype() != spec.dtype || t.device() != spec.device || t.requires_grad() != h.flag)
    return false;
  const int n = h.k;
  if (int(t.sizes().size()) != n) return false;
  const int64_t* sizes = t.sizes().data();
  if (spec.dynamic) return tensor_matches(t, spec);
  for (int i = 0; i < n; i++)
    if (sizes[i] != d[i]) return false;
  const int64_t* strides = t.strides().data();
  for (int i = 0; i < n; i++)
    if (strides[i] != d[n + i] && d[i] > 1) return false;
  return true;
}

int GuardProgram::first_failure(lua_State* L, int base) const {
  if (!compiled) compile_hot();
  const int K = base + 1;
  for (int i = 0; i < int(hot.size()); i++) {
    const HotGuard& g = hot[i];
    const int v = g.src >= 0 ? slot(base, g.src) : 0;
    bool ok = true;
    switch (g.kind) {
      case GuardKind::Type:
        ok = lua_type(L, v) == g.vtype && (g.vtype != LUA_TUSERDATA || !lua::to_tensor(L, v));
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
                 (g.flag ? lua_tointeger(L, v) == g.ival : lua_tonumber(L, v) == g.fval);
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
      case GuardKind::GlobalState: {
        const Guard& full = guards[i];
        ok = lua::grad_enabled() == full.grad && default_dtype() == full.default_dtype &&
             default_device() == full.default_device &&
             float32_matmul_precision() == full.matmul_precision;
        break;
      }
    }
    if (!ok) return i;
  }
  return -1;
}

std::string tensor_spec_string(const TensorSpec& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (size_t d = 0; d < t.sizes.size(); d++) {
    if (d) s += ", ";
    s += (t.dynamic >> d & 1) ? std::string(">=2") : std::to_string(t.sizes[d]);
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
    default: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %p", lua_typename(L, lua_type(L, v)), lua_topointer(L, v));
      return buf;
    }
  }
}

std::string GuardProgram::failure(lua_State* L, int base) const {
  int i = first_failure(L, base);
  if (i < 0) return "";
  const Guard& g = guards[i];
  if (g.kind == GuardKind::ArgCount)
    return "number of arguments: expected " + std::to_string(g.ival) + ", got " +
           std::to_string(nargs_);
  if (g.kind == GuardKind::SameAs)
    return describe(g.src) + ": expected " + g.expected + ", got " +
           (lua_rawequal(L, slot(base, g.src), slot(base, g.k)) ? "the same table"
                                                                : "another table");
  if (g.kind == GuardKind::GlobalState)
    return "global state: expected " + g.expected + ", got grad " +
           (lua::grad_enabled() ? "on" : "off") + ", default dtype " + dtype_name(default_dtype()) +
           ", default device " + default_device().str() + ", matmul precision " +
           float32_matmul_precision();
  return describe(g.src) + ": expected " + g.expected + ", got " +
         actual_string(L, slot(base, g.src));
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
  std::vector<Guard> kept;
  for (Guard& g : guards)
    if (!(g.kind == GuardKind::Type && strong[g.src])) kept.push_back(std::move(g));
  guards = std::move(kept);
}

std::vector<std::string> GuardProgram::lines() const {
  static const char* names[] = {"TYPE_MATCH",   "TENSOR_MATCH", "EQUALS_MATCH", "ID_MATCH",
                                "GLOBAL_STATE", "ARG_COUNT",    "ALIAS_MATCH"};
  std::vector<std::string> out;
  for (const Guard& g : guards)
    out.push_back(std::string(names[int(g.kind)]) + ": " +
                  (g.src >= 0 ? describe(g.src) + " " : "") + g.expected);
  return out;
}

}  // namespace tc::capture
